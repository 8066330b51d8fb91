"""``qnnx_backend.profile``: where one execute's time goes on the QNN backend, per QNN op, per
ONNX node and per ``nn.Module``.

The numbers are QNN's own profiler's (``QnnProfile``), read by the Rust engine: at the
``detailed`` level the HTP reports each op's cycles, which are mapped back to the ONNX node each
QNN op was lowered from and, through the TorchScript exporter's node names
(``/layer1/layer1.0/conv1/Conv``), to the module path (``layer1.0.conv1``). What the emulator
reports, and how ``by_module`` counts fused kernels, is in docs/profiling.md.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import AbstractSet, Any, Optional, Sequence, Union

import torch

from . import _native
from .compiling import to_onnx
from .compiling.buckets import QnnCompiledModule
from .compiling.call import CompiledGraph
from .exceptions import QnnxError

LEVELS = ("basic", "detailed")


def module_path(onnx_node: str, modules: Optional[AbstractSet[str]] = None) -> Optional[str]:
    """The ``nn.Module`` path in a TorchScript-exported node name, or None for other names.

    The exporter writes each enclosing module's scope and then the op: ``/layer2/layer2.1/conv2/Conv``
    is ``layer2.1.conv2``, ``/fc/Gemm`` is ``fc``; a node of the top module (``/Add``) is ``""``.
    A scope of a container's child spells the container too (``layer2.1`` after ``layer2``,
    ``downsample.0`` after ``layer4.0.downsample``): it replaces the container. The second and later calls of one module get scopes ``fc_1``, ``relu_2``: with ``modules``
    (the model's ``named_modules`` paths), a path that is none of them but is one without that
    suffix is that module.
    """
    if not onnx_node.startswith("/"):
        return None
    scopes = onnx_node[1:].split("/")[:-1]
    path = ""
    for s in scopes:
        if not s:
            return None
        container, _, child = s.rpartition(".")
        if container and (path == container or path.endswith("." + container)):
            path = f"{path}.{child}"
        else:
            path = f"{path}.{s}" if path else s
        if modules is not None and path not in modules:
            unsuffixed = _CALL_SUFFIX.sub("", path)
            if unsuffixed in modules:
                path = unsuffixed
    return path


_CALL_SUFFIX = re.compile(r"_[0-9]+$")

#: QNN ops seen to report 0 cycles on the emulator when the HTP fused them with the ops after
#: them into one kernel, whose cycles the kernel's last op reports (Conv2d + Relu, FullyConnected
#: + Sigmoid, Conv2d + Sigmoid + ElementWiseMultiply for SiLU, ElementWiseAdd + Relu in a residual
#: block; docs/profiling.md). A data-movement op with 0 cycles (a Reshape before a
#: FullyConnected) costs nothing and is not the head of the op after it.
FUSED_HEADS = frozenset({"Conv2d", "DepthWiseConv2d", "FullyConnected", "ElementWiseAdd"})

#: by_module's bucket for the top module's own ops (module path ``""``).
TOP = "(top)"


@dataclass(frozen=True)
class OpTime:
    """One QNN op of the profiled execute."""

    qnn_node: str
    #: The QNN op type, None for the HTP's ``Input``/``Output`` pseudo-nodes.
    qnn_op: Optional[str]
    onnx_node: Optional[str]
    #: The module the ONNX node belongs to, when its name says (see ``module_path``).
    module: Optional[str]
    value: int
    #: ``cycles`` on the HTP.
    unit: str
    #: Of all the execute's node values, 0 to 1.
    share: float
    #: ``share`` of the accelerator's microseconds: an estimate, as the HTP reports node cycles.
    est_us: Optional[float]


class Profile:
    """A profiled execute: whole-graph times, the ops, aggregates, the compile's stages and a
    Chrome trace."""

    def __init__(
        self,
        profile_json: str,
        trace_json: str,
        timings: Sequence[tuple[str, float]],
        modules: Optional[AbstractSet[str]] = None,
    ):
        """``modules``: the profiled ``nn.Module``'s ``named_modules`` paths, when known (see
        ``module_path``)."""
        p = json.loads(profile_json)
        self.level: str = p["level"]
        self.execute_us: Optional[int] = p["execute_us"]
        self.accel_us: Optional[int] = p["accel_us"]
        self.accel_cycles: Optional[int] = p["accel_cycles"]
        self.events: list[dict[str, Any]] = p["events"]
        self.ops: list[OpTime] = [
            OpTime(
                qnn_node=o["qnn_node"],
                qnn_op=o["qnn_op"],
                onnx_node=o["onnx_node"],
                module=module_path(o["onnx_node"], modules) if o["onnx_node"] else None,
                value=o["value"],
                unit=o["unit"],
                share=o["share"],
                est_us=o["est_us"],
            )
            for o in p["ops"]
        ]
        #: The compile's stages, (name, milliseconds), as ``qnnx compile --timings`` lists them.
        self.timings: list[tuple[str, float]] = list(timings)
        self.trace: dict[str, Any] = json.loads(trace_json)

    def _aggregate(self, keys: Sequence[str]) -> list[tuple[str, int, float]]:
        sums: dict[str, list] = {}
        for op, k in zip(self.ops, keys):
            s = sums.setdefault(k, [0, 0.0])
            s[0] += op.value
            s[1] += op.share
        return sorted(((k, v, sh) for k, (v, sh) in sums.items()), key=lambda t: -t[1])

    def by_onnx_node(self) -> list[tuple[str, int, float]]:
        """(ONNX node, value, share), most expensive first; the HTP's I/O pseudo-nodes under
        ``[Input]``/``[Output]``."""
        return self._aggregate([op.onnx_node or f"[{op.qnn_node}]" for op in self.ops])

    def kernel_modules(self) -> list[str]:
        """Per op, the bucket ``by_module`` counts it in: its module's path, or the module of
        the op heading its fused kernel. The HTP reports a fused kernel's cycles on its last op
        and 0 on the others (a Conv2d then its Relu: the Conv2d 0, the Relu all of it), so with
        an activation called as a function of the top module (``torch.relu(self.conv(x))``)
        the convolution's time would land on the top module; a run of 0-cycle ops headed by
        one of ``FUSED_HEADS`` and the op after it are counted in the head's module. Ops of the
        top module are ``"(top)"``; an op whose ONNX node name carries no module is
        ``"(no module: <node>)"`` (of a torch module, an op the lowering added: ``input_0_nhwc``
        is the NCHW to NHWC transpose of the first input); the HTP's I/O pseudo-nodes are
        ``[Input]``/``[Output]``, as in ``by_onnx_node``."""

        def own(op: OpTime) -> str:
            if op.qnn_op is None:
                return f"[{op.qnn_node}]"
            if op.module is None:
                return f"(no module: {op.onnx_node})"
            return op.module or TOP

        keys = [own(op) for op in self.ops]
        head: Optional[str] = None
        for i, op in enumerate(self.ops):
            if op.value == 0:
                if head is None and op.qnn_op in FUSED_HEADS:
                    head = keys[i]
                elif head is not None:
                    keys[i] = head
                continue
            if head is not None:
                keys[i] = head
            head = None
        return keys

    def by_module(self) -> list[tuple[str, int, float]]:
        """(module path, value, share), most expensive first, each op counted in the module
        that holds its ONNX node, a fused kernel in the module of its first op; the top
        module's own ops under ``"(top)"``, an op of no module under ``"(no module: <node>)"``
        and the HTP's I/O pseudo-nodes under ``[Input]``/``[Output]`` (``kernel_modules``)."""
        return self._aggregate(self.kernel_modules())

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return (
            f"<Profile {self.level}: execute {self.execute_us} us, accelerator {self.accel_us} us, "
            f"{len(self.ops)} ops; print() it for the table>"
        )

    def table(self, top: Optional[int] = None) -> str:
        """The per-op table ``qnnx run --profile`` prints, most expensive first."""
        ops = sorted(self.ops, key=lambda o: -o.value)[:top]
        lines = [f"profile ({self.level}): execute {self.execute_us} us, accelerator {self.accel_us} us"]
        if not ops:
            lines.append("(per-op times need level='detailed')" if self.level == "basic" else "(no op events)")
            return "\n".join(lines) + "\n"
        lines.append(f"  {'QNN op':<20} {'module':<28} {'ONNX node':<40} {ops[0].unit:>10} {'share':>6}")
        for o in ops:
            lines.append(
                f"  {o.qnn_op or '[' + o.qnn_node + ']':<20} {(o.module or TOP) if o.module is not None else '-':<28} "
                f"{o.onnx_node or '-':<40} {o.value:>10} {o.share * 100:>5.1f}%"
            )
        return "\n".join(lines) + "\n"

    def save_trace(self, path: Union[str, os.PathLike]) -> None:
        """Writes the Chrome trace (Perfetto, chrome://tracing)."""
        with open(path, "w") as f:
            json.dump(self.trace, f)


def _onnx_of(model: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> bytes:
    """The module exported with the TorchScript exporter, whose node names carry module paths
    (the package's default exporter; see ``compiling.to_onnx``)."""

    was_training = model.training
    model.eval()
    try:
        return to_onnx._export_with("torchscript", model, inputs)  # type: ignore[arg-type]
    except to_onnx.EXPORT_ERRORS as e:
        raise QnnxError(f"profile: ONNX export of the module failed: {e}") from e
    finally:
        model.train(was_training)


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module a ``qnnx_backend.compile`` or ``torch.compile`` result wraps."""

    if isinstance(model, QnnCompiledModule):
        model = model.compiled
    return getattr(model, "_orig_mod", model)


def profile(
    model: Union[torch.nn.Module, bytes, str, os.PathLike, Any],
    inputs: Union[torch.Tensor, Sequence[torch.Tensor]],
    *,
    level: str = "detailed",
    device: str = "npu",
    **compile_options: Any,
) -> Profile:
    """Compiles ``model`` for QNN (unless it is compiled already), runs it once on ``inputs``
    with QNN's profiler at ``level`` (``"basic"``: whole-graph times; ``"detailed"``: every op)
    and returns the ``Profile``.

    ``model`` is an ``nn.Module`` (exported to ONNX with the TorchScript exporter, so ops map to
    module paths), ONNX bytes or a path to an ``.onnx`` file, or a ``_native.Compiled`` graph.
    A ``torch.compile``'d or ``qnnx_backend.compile``'d module is profiled as the module it
    wraps: one graph of the whole module, not dynamo's partitions, compiled with
    ``compile_options`` rather than the options it was compiled with.
    ``compile_options`` go to ``_native.Spec`` (``soc_model``, ``htp_arch``, ``fp16``, ``opt_level``,
    ``cache_dir``) and ``_native.compile`` (``input_shapes``, ``fix_inputs``, ...). Profiling costs nothing elsewhere: only this call creates a profiler.
    """
    if level not in LEVELS:
        raise ValueError(f"level={level!r}: use 'basic' or 'detailed'")
    tensors = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
    modules = None
    if isinstance(model, _native.Compiled):
        native = model
    else:
        if isinstance(model, torch.nn.Module):
            unwrapped = _unwrap(model)
            modules = frozenset(name for name, _ in unwrapped.named_modules())
            onnx = _onnx_of(unwrapped, tensors)
        elif isinstance(model, (bytes, bytearray)):
            onnx = bytes(model)
        elif isinstance(model, (str, os.PathLike)):
            with open(model, "rb") as f:
                onnx = f.read()
        else:
            raise TypeError(
                f"profile: expected an nn.Module, ONNX bytes or path, or a compiled graph, got {type(model).__name__}"
            )
        spec_keys = ("soc_model", "htp_arch", "fp16", "opt_level", "cache_dir")
        spec = _native.Spec(device, **{k: v for k, v in compile_options.items() if k in spec_keys})
        native = _native.compile(onnx, spec, **{k: v for k, v in compile_options.items() if k not in spec_keys})
    graph = CompiledGraph(native, device, [], check_nan=True)
    with torch.no_grad():
        _, profile_json, trace_json = graph.profiled(tensors, level)
    return Profile(profile_json, trace_json, native.timings, modules)
