"""FX graph -> ONNX -> QNN graph -> callable, with the fallback policy of the "qnn" backend.

The flow for one graph from torch.compile: parameters and buffers (which dynamo passes as graph
inputs) are frozen into the graph as constants; the graph is exported to ONNX; the native module
checks every node against the backend's op table, lowers the model and finalizes one QNN graph.
The returned callable checks each call's inputs against the compiled signature, hands tensor
memory to QNN without copies, and returns torch tensors.
"""

from __future__ import annotations

import collections
import copy
import ctypes
import hashlib
import io
import logging
import time
import warnings
from typing import Any, Callable, Optional, Sequence

import torch

from . import _kvcache, _native
from ._decompose import decompose
from .exceptions import CacheError, LibraryLoadError, LoweringError, QnnApiError, QnnxError, UnsupportedOpError
from .settings import QnnSettings

logger = logging.getLogger("qnnx_backend")

#: Counters of the work done in this process (exports, compiles, cache hits, fallbacks); tests
#: use them to prove that a warm start skipped export, lowering and finalize.
STATS: collections.Counter = collections.Counter()

# torch's dtype for each element type, by qnnx's names for them (_native.dtype_names()).
_TORCH_DTYPES = {
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f64": torch.float64,
    "i8": torch.int8,
    "u8": torch.uint8,
    "i16": torch.int16,
    "u16": getattr(torch, "uint16", None),
    "i32": torch.int32,
    "u32": getattr(torch, "uint32", None),
    "i64": torch.int64,
    "u64": getattr(torch, "uint64", None),
    "bool": torch.bool,
}

_FALLBACK_ERRORS = (UnsupportedOpError, LoweringError, QnnApiError, LibraryLoadError)


def _torch_dtype(name: str) -> torch.dtype:
    d = _TORCH_DTYPES.get(name)
    if d is None:
        raise QnnxError(f"tensor dtype {name} has no torch equivalent in this torch version")
    return d


def _is_static(value: Any) -> bool:
    """Parameters and buffers: dynamo passes them as inputs and tags them as static."""
    return isinstance(value, torch.nn.Parameter) or (
        isinstance(value, torch.Tensor) and getattr(value, "_dynamo_static_input_type", None) is not None
    )


class _Frozen(torch.nn.Module):
    """The dynamo graph with static inputs as buffers (ONNX initializers) and integer inputs
    (symbolic sizes) fixed to this call's values, taking only the runtime tensors."""

    def __init__(self, gm: torch.fx.GraphModule, args: Sequence[Any], runtime: Sequence[int]):
        super().__init__()
        self.gm = gm
        self.n = len(args)
        self.runtime = list(runtime)
        self.fixed: dict[int, Any] = {}
        for i, a in enumerate(args):
            if i in self.runtime:
                continue
            if isinstance(a, torch.Tensor):
                self.register_buffer(f"c{i}", a.detach(), persistent=False)
            else:
                self.fixed[i] = a

    def forward(self, *runtime_args):
        full = []
        it = iter(runtime_args)
        for i in range(self.n):
            if i in self.fixed:
                full.append(self.fixed[i])
            elif i in self.runtime:
                full.append(next(it))
            else:
                full.append(getattr(self, f"c{i}"))
        return self.gm(*full)


def _export_with(exporter: str, frozen: _Frozen, runtime_args: Sequence[torch.Tensor]) -> bytes:
    names = [f"input_{i}" for i in range(len(runtime_args))]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            program = torch.onnx.export(frozen, tuple(runtime_args), dynamo=True, input_names=names, verbose=False)
            return program.model_proto.SerializeToString()
        buf = io.BytesIO()
        torch.onnx.export(
            frozen,
            tuple(runtime_args),
            buf,
            dynamo=False,
            opset_version=17,
            input_names=names,
            do_constant_folding=True,
        )
        return buf.getvalue()


# What the exporters raise for graphs they cannot express.
_EXPORT_ERRORS = (RuntimeError, TypeError, ValueError, ImportError, AttributeError)


def _export(frozen: _Frozen, runtime_args: Sequence[torch.Tensor], settings: QnnSettings) -> bytes:
    """ONNX bytes of the frozen graph. The TorchScript exporter is tried first by default: it is
    about 10x faster (0.2 s against 3 to 9 s for small models here); graphs it cannot express
    (fused kernels such as the TransformerEncoderLayer fast path) go through the dynamo exporter,
    whose decompositions handle them."""
    order = ["torchscript", "dynamo"] if settings.exporter == "torchscript" else ["dynamo"]
    errors = []
    for exporter in order:
        t = time.perf_counter()
        try:
            data = _export_with(exporter, frozen, runtime_args)
        except _EXPORT_ERRORS as e:
            errors.append(f"{exporter}: {e}")
            continue
        STATS["exports"] += 1
        logger.debug("%s export: %d bytes in %.1f ms", exporter, len(data), (time.perf_counter() - t) * 1e3)
        return data
    raise LoweringError("ONNX export failed: " + "; ".join(errors))


class CompiledGraph:
    """One QNN graph for one input signature.

    Everything a call needs that does not depend on the call's tensors (torch dtypes, element
    counts, byte sizes, output shapes) is worked out once here: the per-call path only checks
    the inputs, allocates the outputs and hands both to QNN.
    """

    def __init__(
        self, native: Any, device: str, out_meta: Sequence[Optional[torch.Size]], check_nan: bool = True
    ):
        self.native = native
        self.check_nan = check_nan
        self.device = device
        self.inputs = native.inputs
        self.outputs = native.outputs
        self.out_meta = list(out_meta)
        # (name, model dtype, graph dtype, element count, graph shape, bytes per element)
        self._in_plan = []
        for name, gdtype, gshape, hdtype in self.inputs:
            g = _torch_dtype(gdtype)
            self._in_plan.append((name, _torch_dtype(hdtype), g, _numel(gshape), tuple(gshape), _itemsize(g)))
        # (allocation shape, graph dtype, byte size, model dtype or None, final shape or None):
        # an output whose dtype needs no conversion is allocated directly in its final shape
        # (same element count, contiguous: the same bytes).
        self._out_plan = []
        for i, (_, gdtype, shape, hdtype) in enumerate(self.outputs):
            g, h = _torch_dtype(gdtype), _torch_dtype(hdtype)
            meta = self.out_meta[i] if i < len(self.out_meta) else None
            n = _numel(shape)
            final = tuple(meta) if meta is not None and _numel(meta) == n else None
            if g == h:
                alloc = final if final is not None else tuple(shape)
                self._out_plan.append((alloc, g, n * _itemsize(g), None, None))
            else:
                self._out_plan.append((tuple(shape), g, n * _itemsize(g), h, final))

    def __call__(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        keep = []  # converted or made-contiguous copies stay alive until QNN has run
        ins = []
        for t, (name, want, g, numel, gshape, size) in zip(tensors, self._in_plan):
            if not isinstance(t, torch.Tensor):
                raise QnnxError(f"input {name}: expected a tensor, got {type(t).__name__}")
            if not t.is_cpu:
                raise QnnxError(f"input {name} is on {t.device}; QNN graphs take CPU tensors")
            if t.dtype != want:
                raise QnnxError(f"input {name} is {t.dtype}; the compiled graph takes {want}")
            if t.numel() != numel:
                raise QnnxError(
                    f"input {name} has shape {tuple(t.shape)}; the compiled graph takes {gshape}"
                )
            if g != want:
                t = t.detach()
                if t.dtype == torch.int64 and g == torch.int32 and numel:
                    lo, hi = (int(v) for v in torch.aminmax(t))
                    if lo < -(2**31) or hi >= 2**31:
                        raise QnnxError(
                            f"input {name}: int64 values in [{lo}, {hi}] do not fit the int32 the HTP computes in"
                        )
                t = t.to(g)
                keep.append(t)
            if not t.is_contiguous():
                t = t.contiguous()
                keep.append(t)
            ins.append((t.data_ptr(), numel * size))
        outs = [torch.empty(alloc, dtype=g) for (alloc, g, _, _, _) in self._out_plan]
        self.native.run(ins, [(o.data_ptr(), p[2]) for o, p in zip(outs, self._out_plan)])
        for i, (_, _, _, h, final) in enumerate(self._out_plan):
            if h is not None:
                o = outs[i].to(h)
                outs[i] = o.reshape(final) if final is not None else o
        return outs


def _unsupported_error(nodes: Sequence[tuple], device: str) -> UnsupportedOpError:
    err = UnsupportedOpError(
        f"{len(nodes)} node(s) cannot run on {device}:\n" + "\n".join(f"  {r}" for (_, _, r) in nodes)
    )
    err.nodes = list(nodes)
    err.operators = sorted({op for (_, op, _) in nodes})
    err.device = device
    return err


def _itemsize(dtype: torch.dtype) -> int:
    return dtype.itemsize


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _out_meta(gm: torch.fx.GraphModule) -> list[Optional[torch.Size]]:
    """Static output shapes from dynamo's fake-tensor metadata (None where unknown/symbolic)."""
    out = []
    for node in gm.graph.nodes:
        if node.op != "output":
            continue
        args = node.args[0]
        args = args if isinstance(args, (tuple, list)) else [args]
        for a in args:
            v = getattr(a, "meta", {}).get("example_value") if isinstance(a, torch.fx.Node) else None
            try:
                out.append(torch.Size([int(d) for d in v.shape]) if isinstance(v, torch.Tensor) else None)
            except (TypeError, ValueError, RuntimeError):
                out.append(None)
    return out


class _InferenceOnly(torch.autograd.Function):
    """Attaches outputs to the autograd graph only to fail clearly on backward."""

    @staticmethod
    def forward(ctx, anchor, *outs):  # noqa: ARG004
        return tuple(o.clone() for o in outs)

    @staticmethod
    def backward(ctx, *grads):
        raise QnnxError(
            "backward through a graph compiled by the qnn backend is not supported: qnnx_backend "
            "is inference-only. Use model.eval() and run under torch.inference_mode() or torch.no_grad()."
        )


class QnnCallable:
    """What the backend returns to dynamo: picks (or compiles) the graph for each call's input
    signature and falls back to the original graph when a signature cannot run on QNN."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], settings: QnnSettings):
        self.gm = gm
        self.settings = settings
        # Graphs that write into their inputs (KV caches) are compiled in a functional form whose
        # extra outputs replay the writes on the caller's tensors (_kvcache); without kv_cache the
        # writes would be lost, so such graphs are refused.
        self.kv_plan: Optional[_kvcache.MutationPlan] = None
        self.refusal: Optional[LoweringError] = None
        source = gm
        mutated = _kvcache.mutated_inputs(gm)
        if mutated and not settings.kv_cache:
            self.refusal = LoweringError(
                f"the graph updates its input(s) {', '.join(mutated)} in place (a KV cache?); compiled "
                "without kv_cache=True those updates would be lost. Pass options={'kv_cache': True}."
            )
        elif mutated:
            try:
                source, self.kv_plan = _kvcache.functionalize(gm, [_is_static(a) for a in example_inputs])
            except LoweringError as e:
                self.refusal = e
        self.out_meta = _out_meta(source)
        # Export rewrites a graph of its own: the original keeps running eagerly on fallback
        # (a functionalized graph is already a new one).
        if source is gm:
            source = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
        self.export_gm = decompose(source)
        self.runtime = [i for i, a in enumerate(example_inputs) if not _is_static(a)]
        self.statics = [a for a in example_inputs if _is_static(a)]
        self.returns_tuple = _returns_sequence(gm)
        self.graphs: dict[Any, Optional[CompiledGraph]] = {}
        self.warned = False

    def signature(self, args: Sequence[Any]) -> tuple:
        sig = []
        for i in self.runtime:
            a = args[i]
            if isinstance(a, torch.Tensor):
                sig.append((tuple(a.shape), a.dtype))
            else:
                sig.append(("const", a))
        return tuple(sig)

    def compile(self, args: Sequence[Any]) -> Optional[CompiledGraph]:
        """Compiles for these concrete arguments; returns None (eager) on a fallback error."""
        s = self.settings
        runtime_tensors = [args[i] for i in self.runtime if isinstance(args[i], torch.Tensor)]
        tensor_idx = [i for i in self.runtime if isinstance(args[i], torch.Tensor)]
        frozen = _Frozen(self.export_gm, args, tensor_idx)
        devices = ["npu", "gpu"] if s.device == "auto" else [s.device]
        reasons: list[str] = []
        onnx_bytes = None
        cache_dir = _cache_dir(s)
        if self.refusal is not None:
            if s.strict:
                raise self.refusal
            devices = []
            reasons.append(str(self.refusal))
        for device in devices:
            fingerprint = None
            try:
                # With an explicit SoC or arch the native calls below open (and check) the
                # runtime for that configuration themselves; is_available() would open a second
                # backend and device for the default configuration (70-190 ms here).
                if s.soc_model is None and s.htp_arch is None and not _native.is_available(device):
                    raise LibraryLoadError(f"{device}: {_native.unavailable_reason(device)}")
                if cache_dir is not None:
                    # Warm start: an FX-level fingerprint maps straight to a cached binary, so
                    # neither the ONNX export nor lowering nor finalize runs.
                    fingerprint = self.fx_fingerprint(args, device)
                    hit = _read_alias(fingerprint, cache_dir, device, s)
                    if hit is not None:
                        STATS["cache_hits"] += 1
                        logger.info("qnn: loaded a cached graph for %s in %.1f ms", device, hit.load_ms)
                        return CompiledGraph(hit, device, self.out_meta, s.check_nan)
                if onnx_bytes is None:
                    onnx_bytes = _export(frozen, runtime_tensors, s)
                if s.dry_run:
                    unsupported = _native.check(onnx_bytes, device)
                    if unsupported:
                        raise _unsupported_error(unsupported, device)
                    logger.info("qnn dry run: every node is supported on %s", device)
                    return None
                t = time.perf_counter()
                # No separate check() first: it runs the whole lowering (parse, passes, op
                # rules) only to discard the plan, and compile reports every unsupported node
                # itself (for resnet18 the check cost as much as the lowering).
                try:
                    native = _native.compile(
                        onnx_bytes,
                        device=device,
                        soc_model=s.soc_model,
                        htp_arch=s.htp_arch,
                        fp16=s.fp16,
                        opt_level=s.opt_level,
                        cache_dir=cache_dir,
                    )
                except UnsupportedOpError as e:
                    nodes = getattr(e, "nodes", None)
                    if nodes:
                        raise _unsupported_error(nodes, device) from None
                    raise
                if native.from_cache:
                    STATS["cache_hits"] += 1
                else:
                    STATS["compiles"] += 1
                if fingerprint is not None and native.cache_key:
                    _write_alias(cache_dir, fingerprint, native.cache_key)
                logger.info(
                    "qnn: compiled a graph with %d inputs and %d outputs for %s in %.0f ms "
                    "(lowering %.1f ms, finalize %.1f ms)",
                    len(native.inputs),
                    len(native.outputs),
                    device,
                    (time.perf_counter() - t) * 1e3,
                    native.lower_ms,
                    native.finalize_ms,
                )
                return CompiledGraph(native, device, self.out_meta, s.check_nan)
            except _FALLBACK_ERRORS as e:
                if getattr(e, "device", None) is None:
                    e.device = device
                if s.strict:
                    raise
                reasons.append(f"{device}: {e}")
        STATS["fallbacks"] += 1
        if not self.warned:
            self.warned = True
            warnings.warn(
                "qnn backend: running this graph with eager PyTorch on the CPU because it cannot "
                "run on QNN:\n" + "\n".join(reasons),
                RuntimeWarning,
                stacklevel=3,
            )
        return None

    def fx_fingerprint(self, args: Sequence[Any], device: str) -> str:
        """Graph code, weights, input signature, target and compile settings: everything that
        decides the compiled binary, computed without exporting."""
        s = self.settings
        parts = [
            b"qnnx-fx-1",
            _native.versions()["qnnx"].encode(),
            torch.__version__.encode(),
            self.gm.code.encode(),
            device.encode(),
            repr((s.soc_model, s.htp_arch, sorted(s.compile_settings().items()))).encode(),
            repr(self.signature(args)).encode(),
        ]
        for i, a in enumerate(args):
            if i in self.runtime or not isinstance(a, torch.Tensor):
                continue
            t = a.detach().contiguous()
            parts.append(repr((i, t.dtype, tuple(t.shape))).encode())
            nbytes = t.numel() * t.element_size()
            if nbytes:
                parts.append(memoryview((ctypes.c_char * nbytes).from_address(t.data_ptr())).cast("B"))
        return fingerprint(parts)

    def __call__(self, *args):
        sig = self.signature(args)
        if sig not in self.graphs:
            if self.graphs and self.settings.strict:
                logger.warning(
                    "qnn backend: input signature %s differs from the compiled one(s); compiling a new graph",
                    sig,
                )
            self.graphs[sig] = self.compile(args)
        graph = self.graphs[sig]
        if graph is None:
            return self.gm(*args)
        tensors = [args[i] for i in self.runtime if isinstance(args[i], torch.Tensor)]
        outs = graph(tensors)
        if self.kv_plan is not None:
            outs = self.kv_plan.finish(args, outs)
        if torch.is_grad_enabled():
            anchor = next(
                (a for a in list(args) + self.statics if isinstance(a, torch.Tensor) and a.requires_grad),
                None,
            )
            if anchor is not None:
                outs = list(_InferenceOnly.apply(anchor, *outs))
        return tuple(outs) if self.returns_tuple else outs[0]


def _returns_sequence(gm: torch.fx.GraphModule) -> bool:
    for node in gm.graph.nodes:
        if node.op == "output":
            return isinstance(node.args[0], (tuple, list))
    return True


def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], settings: QnnSettings) -> Callable:
    """The backend entry: the original forward for device="cpu", otherwise a QnnCallable.

    Compilation happens at the first call of each input signature rather than here: dynamo
    wraps exceptions raised by a backend in BackendCompilerFailed, while exceptions raised by
    the compiled function reach the caller as they are, so strict mode's UnsupportedOpError
    (and the others) can be caught by their own class.
    """
    if settings.device == "cpu":
        return gm.forward
    return QnnCallable(gm, example_inputs, settings)


def fingerprint(parts: Sequence[Any]) -> str:
    """sha256 over length-prefixed byte strings (no two part lists collide by concatenation)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()


def _cache_dir(s: QnnSettings) -> Optional[str]:
    if not s.cache:
        return None
    d = s.cache_dir or _native.default_cache_dir()
    if d is None:
        raise CacheError("cache=True but no cache folder is known: set cache_dir or QNNX_CACHE_DIR")
    return str(d)


def _read_alias(fingerprint: str, cache_dir: str, device: str, s: QnnSettings):
    key = _native.alias_get(cache_dir, fingerprint)
    if key is None:
        return None
    return _native.load_cached(
        key, cache_dir, device=device, soc_model=s.soc_model, htp_arch=s.htp_arch, opt_level=s.opt_level
    )


def _write_alias(cache_dir: str, fingerprint: str, key: str) -> None:
    try:
        _native.alias_put(cache_dir, fingerprint, key)
    except CacheError as e:
        logger.warning("qnn: could not record the cache alias of %s: %s", fingerprint, e)
