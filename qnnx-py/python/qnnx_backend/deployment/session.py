"""Running compiled models without PyTorch: an ONNX Runtime-shaped ``InferenceSession`` and the
loader of saved models (``qnnx_backend.load``). Needs numpy only; importing this module does not
import torch (``tests/python/test_session.py`` checks it in a process where torch cannot
be imported).

Porting an ONNX Runtime app::

    # sess = ort.InferenceSession("model.onnx", providers=["QNNExecutionProvider"],
    #                             provider_options=[{"backend_path": "QnnHtp.dll"}])
    sess = qnnx_backend.runtime.InferenceSession("model.onnx")
    (y,) = sess.run(None, {"x": x})

``InferenceSession`` takes an ONNX model (a path or its bytes; compiled at the first session and
kept in the context-binary cache, so later sessions load the binary), a file written by
``qnnx_backend.export`` (loaded with no compile at all) or a context binary from ``qnnx compile``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from .. import _native, _warn
from ..exceptions import InputError, QnnxError

__all__ = ["InferenceSession", "SessionOptions", "NodeArg", "SavedModel", "load"]

_NUMPY = {
    "f32": np.float32,
    "f16": np.float16,
    "f64": np.float64,
    "i8": np.int8,
    "u8": np.uint8,
    "i16": np.int16,
    "u16": np.uint16,
    "i32": np.int32,
    "u32": np.uint32,
    "i64": np.int64,
    "u64": np.uint64,
    "bool": np.bool_,
}

# ONNX Runtime's spelling of element types in NodeArg.type.
_ORT_TYPES = {
    "f32": "float",
    "f16": "float16",
    "f64": "double",
    "bf16": "bfloat16",
    "i8": "int8",
    "u8": "uint8",
    "i16": "int16",
    "u16": "uint16",
    "i32": "int32",
    "u32": "uint32",
    "i64": "int64",
    "u64": "uint64",
    "bool": "bool",
}


def _np_dtype(name: str) -> np.dtype:
    """numpy's dtype for a qnnx tensor type name; a quantized tensor (``qu8``) is its integers."""
    d = _NUMPY.get(name[1:] if name.startswith("q") else name)
    if d is None:
        raise QnnxError(f"tensor dtype {name} has no numpy equivalent")
    return np.dtype(d)


@dataclasses.dataclass(frozen=True)
class NodeArg:
    """One model input or output, as ``onnxruntime.NodeArg``: ``name``, ``shape`` (a list of
    ints: compiled graphs are static) and ``type`` (``"tensor(float)"``, ...)."""

    name: str
    shape: list
    type: str


def _node_arg(desc: Sequence[Any]) -> NodeArg:
    name, _, shape, model_dtype = desc
    return NodeArg(name, list(shape), f"tensor({_ORT_TYPES.get(model_dtype, model_dtype)})")


class _Graph:
    """The per-call work on numpy arrays for one compiled graph: input checks (dtype, shape,
    int64 range), output allocation, int64 widening. Worked out once per graph."""

    def __init__(self, native: Any):
        self.native = native
        # (name, model dtype, graph dtype, element count, shape)
        self.ins = []
        for name, gdtype, gshape, hdtype in native.inputs:
            n = int(np.prod(gshape, dtype=np.int64))
            self.ins.append((name, _np_dtype(hdtype), _np_dtype(gdtype), n, tuple(gshape)))
        # (name, graph dtype, model dtype, shape)
        self.outs = [
            (name, _np_dtype(gdtype), _np_dtype(hdtype), tuple(gshape))
            for name, gdtype, gshape, hdtype in native.outputs
        ]
        self.input_args = [_node_arg(d) for d in native.inputs]
        self.output_args = [_node_arg(d) for d in native.outputs]
        self.output_index = {o[0]: i for i, o in enumerate(self.outs)}

    def run(self, arrays: Sequence[Any]) -> list:
        if len(arrays) != len(self.ins):
            raise InputError(f"the model takes {len(self.ins)} inputs ({', '.join(i[0] for i in self.ins)}), got {len(arrays)}")
        keep = []  # converted arrays stay alive until QNN has run
        ptrs = []
        for a, (name, want, g, n, shape) in zip(arrays, self.ins):
            if not isinstance(a, np.ndarray):
                raise InputError(f"input {name}: expected a numpy array, got {type(a).__name__}")
            if a.dtype != want:
                raise InputError(f"input {name} is {a.dtype}; the model takes {want} with shape {list(shape)}")
            if a.size != n or (a.ndim == len(shape) and a.shape != shape):
                raise InputError(f"input {name} has shape {list(a.shape)}; the model takes {list(shape)}")
            if g != want:
                if want == np.int64 and g == np.int32 and n:
                    lo, hi = int(a.min()), int(a.max())
                    if lo < -(2**31) or hi >= 2**31:
                        raise InputError(f"input {name}: int64 values in [{lo}, {hi}] do not fit the int32 the HTP computes in")
                a = a.astype(g)
            elif not a.flags.c_contiguous:
                a = np.ascontiguousarray(a)
            keep.append(a)
            ptrs.append((a.ctypes.data, a.nbytes))
        outs = [np.empty(shape, dtype=g) for _, g, _, shape in self.outs]
        self.native.run(ptrs, [(o.ctypes.data, o.nbytes) for o in outs])
        for i, (_, g, h, _) in enumerate(self.outs):
            if g != h:
                outs[i] = outs[i].astype(h)
        return outs


@dataclasses.dataclass
class SessionOptions:
    """What ``onnxruntime.SessionOptions`` and the QNN EP's provider options set, for qnnx.

    ``soc_model``: the SoC to compile for (a number, or a name such as ``"SM8650"``); default
    the host's (SoC 60 on the x86_64 emulator). ``htp_arch``: 68, 69, 73, ... ``precision``:
    ``"fp32"`` (default: float32 tensors, which FP16-capable HTPs compute in fp16) or ``"fp16"``
    (weights and activations stored as float16). ``opt_level``: HTP finalize optimization 1-3.
    ``cache``/``cache_dir``: keep compiled ONNX models in the context-binary cache (default on,
    in ``$QNNX_CACHE_DIR`` or the platform cache folder). ``log_level``: QNN's log level
    (``error``, ``warn``, ``info``, ``verbose``, ``debug``). ``input_shapes``: static shapes for
    inputs with symbolic dims (``{"x": [1, 3, 224, 224]}``; graphs are compiled static).
    ``performance_mode``: the HTP performance mode voted while the session lives, by ONNX
    Runtime's ``htp_performance_mode`` names (``"burst"``, ``"balanced"``, ...:
    ``_native.performance_modes()``); a QNN library that refuses it is warned about once and the
    model runs at the default clocks. Settings other than ``log_level`` and ``performance_mode``
    apply to ONNX models only: a saved model is already compiled."""

    soc_model: Union[int, str, None] = None
    htp_arch: Optional[int] = None
    precision: str = "fp32"
    opt_level: Optional[int] = None
    cache: bool = True
    cache_dir: Optional[str] = None
    log_level: Optional[str] = None
    input_shapes: Optional[Mapping[str, Sequence[int]]] = None
    performance_mode: Optional[str] = None


# QNN EP provider options (onnxruntime-qnn) with a meaning here, by their ORT names.
_EP_OPTIONS = {"soc_model", "htp_arch", "enable_htp_fp16_precision", "backend_path", "backend_type", "htp_performance_mode"}


def _check_performance_mode(mode: Optional[str]) -> None:
    if mode is not None and mode not in _native.performance_modes():
        raise ValueError(f"htp_performance_mode {mode!r}: valid ones are {', '.join(_native.performance_modes())}")


def _from_provider_options(opts: SessionOptions, provider_options: Optional[Sequence[Mapping[str, Any]]]) -> SessionOptions:
    for po in provider_options or []:
        unknown = set(po) - _EP_OPTIONS
        if unknown:
            raise ValueError(f"provider options {sorted(unknown)} have no qnnx meaning; known: {sorted(_EP_OPTIONS)}")
        if "soc_model" in po:
            opts = dataclasses.replace(opts, soc_model=int(po["soc_model"]))
        if "htp_arch" in po:
            opts = dataclasses.replace(opts, htp_arch=int(po["htp_arch"]))
        if str(po.get("enable_htp_fp16_precision", "0")) == "1":
            opts = dataclasses.replace(opts, precision="fp16")
        if "htp_performance_mode" in po:
            mode = str(po["htp_performance_mode"])
            _check_performance_mode(mode)
            opts = dataclasses.replace(opts, performance_mode=mode)
        _check_backend(po)
    return opts


# ONNX Runtime's names of the HTP library and backend: asking for them is what qnnx does anyway.
_HTP_LIBRARIES = {"qnnhtp.dll", "libqnnhtp.so"}


def _check_backend(po: Mapping[str, Any]) -> None:
    """``backend_path`` / ``backend_type`` choose ORT's QNN backend library. qnnx finds and opens
    the HTP library itself (qnn-sys/src/loader); naming the HTP is what it does anyway, anything
    else (another file, the CPU or GPU backend) has no effect here, said once."""
    path = po.get("backend_path")
    if path is not None and (os.path.dirname(str(path)) or os.path.basename(str(path)).lower() not in _HTP_LIBRARIES):
        _warn.once(
            f"backend_path={path}",
            f"provider option backend_path={path!r} has no effect: qnnx opens the QNN HTP library it finds "
            "itself (`qnnx doctor` says which); to choose the file, set QNN_HTP_LIB=<path> (or QNN_LIB_DIR=<folder>) "
            "before the first session",
        )
    kind = po.get("backend_type")
    if kind is not None and str(kind).lower() != "htp":
        _warn.once(
            f"backend_type={kind}",
            f"provider option backend_type={kind!r} has no effect: qnnx_backend.runtime.InferenceSession runs on "
            "QNN's HTP (for the GPU, compile with `qnnx compile --backend gpu` on a device)",
        )


class InferenceSession:
    """``onnxruntime.InferenceSession`` for QNN's HTP, without ONNX Runtime or PyTorch.

    ``path_or_bytes``: an ONNX model (bytes, or a path ending in ``.onnx``), a saved model
    (``qnnx_backend.export``), or a QNN context binary (``qnnx compile``; its first graph, with
    the graph's own tensor names and dtypes).
    ``sess_options``: a ``SessionOptions``; keyword arguments override its fields.
    ``providers`` is accepted for porting and must name QNN or CPU execution providers (the model
    runs on the HTP either way); ``provider_options`` takes the QNN EP's ``soc_model``,
    ``htp_arch``, ``enable_htp_fp16_precision`` and ``htp_performance_mode``.

    Errors are ``qnnx_backend.exceptions`` classes: ``QnnApiError`` carries QNN's ``.code`` and
    ``.call``, ``InputError`` names the input and the shape or dtype the model takes,
    ``UnsupportedOpError`` lists the nodes that cannot run, ``SavedModelError`` says what is
    wrong with a saved file.
    """

    def __init__(
        self,
        path_or_bytes: Union[str, os.PathLike, bytes],
        sess_options: Optional[SessionOptions] = None,
        providers: Optional[Sequence[Any]] = None,
        provider_options: Optional[Sequence[Mapping[str, Any]]] = None,
        **options: Any,
    ):
        opts = sess_options or SessionOptions()
        if not isinstance(opts, SessionOptions):
            raise TypeError(f"sess_options must be qnnx_backend.runtime.SessionOptions, got {type(opts).__name__}")
        names = [p[0] if isinstance(p, (tuple, list)) else p for p in providers or []]
        for name in names:
            if name not in ("QNNExecutionProvider", "CPUExecutionProvider"):
                raise ValueError(f"provider {name!r}: this session runs on QNN's HTP (QNNExecutionProvider)")
        if names and "QNNExecutionProvider" not in names:
            # ORT would run the model on the CPU; qnnx has no CPU provider (and no fallback).
            _warn.once(
                "providers=cpu",
                f"providers={names}: qnnx has no CPU execution provider; this session runs on QNN's HTP",
            )
        opts = _from_provider_options(opts, provider_options)
        opts = dataclasses.replace(opts, **options)
        if opts.precision not in ("fp32", "fp16"):
            raise ValueError(f"precision={opts.precision!r}: use 'fp32' or 'fp16'")
        _check_performance_mode(opts.performance_mode)
        if opts.log_level is not None:
            _native.set_log_level(str(opts.log_level))
        self.options = opts
        self.manifest: Optional[dict] = None
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            native = self._compile(bytes(path_or_bytes))
        else:
            path = os.fspath(path_or_bytes)
            with open(path, "rb") as f:
                head = f.read(8)
            if head == b"QNNXSAVE":
                graphs, manifest = _native.load_saved(path)
                native = graphs[0]
                self.manifest = json.loads(manifest)
            elif path.lower().endswith(".onnx"):
                with open(path, "rb") as f:
                    onnx = f.read()
                # External data (torch's exporter writes the weights to model.onnx.data) is
                # read from the model's folder, as ONNX Runtime does.
                native = self._compile(onnx, os.path.dirname(os.path.abspath(path)))
            else:
                # A plain context binary (qnnx compile, QNN's tools): no manifest, so its graph
                # I/O is the model's as it stands (int64 I/O is the graph's int32).
                native = _native.load_context_binary(path)
        if opts.performance_mode is not None:
            native.set_performance_mode(opts.performance_mode)
        self._graph = _Graph(native)
        self._native = native

    def _compile(self, onnx: bytes, base_dir: Optional[str] = None) -> Any:
        o = self.options
        cache_dir = None
        if o.cache:
            cache_dir = o.cache_dir or _native.default_cache_dir()
        spec = _native.Spec("npu", o.soc_model, o.htp_arch, o.precision == "fp16", o.opt_level, cache_dir)
        return _native.compile(
            onnx,
            spec,
            input_shapes=None if o.input_shapes is None else {k: [int(d) for d in v] for k, v in o.input_shapes.items()},
            base_dir=base_dir,
        )

    @property
    def performance_mode(self) -> Optional[str]:
        """The HTP performance mode this session voted (``performance_mode``), or None."""
        return self._native.performance_mode

    @property
    def from_cache(self) -> bool:
        """Whether an ONNX model's compiled binary came from the cache."""
        return bool(self._native.from_cache)

    def get_inputs(self) -> list:
        return list(self._graph.input_args)

    def get_outputs(self) -> list:
        return list(self._graph.output_args)

    def get_providers(self) -> list:
        return ["QNNExecutionProvider"]

    def run(self, output_names: Optional[Sequence[str]], input_feed: Mapping[str, Any], run_options: Any = None) -> list:
        """Outputs named by ``output_names`` (all, in model order, for None) for the inputs in
        ``input_feed`` (name to numpy array), as numpy arrays. ``run_options`` is accepted for
        porting and ignored."""
        g = self._graph
        missing = [i[0] for i in g.ins if i[0] not in input_feed]
        extra = sorted(set(input_feed) - {i[0] for i in g.ins})
        if missing or extra:
            raise InputError(
                f"inputs missing: {missing}, unknown: {extra}; the model takes {[i[0] for i in g.ins]}"
            )
        outs = g.run([input_feed[i[0]] for i in g.ins])
        if output_names is None:
            return outs
        picked = []
        for n in output_names:
            i = g.output_index.get(n)
            if i is None:
                raise InputError(f"no output {n!r}; the model has {list(g.output_index)}")
            picked.append(outs[i])
        return picked


class SavedModel:
    """A saved model loaded by ``qnnx_backend.load``: call it with the model's inputs in order,
    as numpy arrays or torch tensors (CPU), and it returns what the model returned (one tensor or
    a tuple or list), in the same kind. No torch.compile, dynamo, ONNX export or lowering runs;
    torch is only touched when given torch tensors."""

    def __init__(self, path: Union[str, os.PathLike]):
        graphs, manifest = _native.load_saved(os.fspath(path))
        if len(graphs) != 1:
            raise QnnxError(f"{path}: {len(graphs)} graphs; this loader runs single-graph saved models")
        self.manifest = json.loads(manifest)
        self.load_ms = graphs[0].load_ms
        self._graph = _Graph(graphs[0])
        extra = self.manifest.get("extra", {})
        self._structure = json.loads(extra.get("outputs", '"tuple"'))

    def __call__(self, *inputs: Any) -> Any:
        torch_in = any(type(x).__module__.startswith("torch") for x in inputs)
        arrays = [x.detach().cpu().numpy() if type(x).__module__.startswith("torch") else x for x in inputs]
        outs = self._graph.run(arrays)
        if torch_in:
            import torch  # the caller gave torch tensors, so torch is already imported

            outs = [torch.from_numpy(o) for o in outs]
        if self._structure == "tensor":
            return outs[0]
        if self._structure == "list":
            return outs
        return tuple(outs)

    def get_inputs(self) -> list:
        return list(self._graph.input_args)

    def get_outputs(self) -> list:
        return list(self._graph.output_args)


def load(path: Union[str, os.PathLike]) -> SavedModel:
    """Memory-maps a model saved by ``qnnx_backend.export`` and returns a callable running it.
    ``SavedModelError`` says what is wrong with a file that is not one, is truncated or corrupt,
    comes from another QNN release or is for another SoC."""
    return SavedModel(path)
