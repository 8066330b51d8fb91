"""Automatic mixed precision for PT2E-quantized graphs: ``target_sqnr_db``.

Starting from the scheme (8a8w), each attempt quantizes the graph with the overrides found so
far, compiles it for the target HTP with every model value observed, and compares it with the
float graph run once, exactly, on the SoC-less emulator (``_native.Reference``, the engine's
per-layer report). While the lowest output SQNR is below the target, a value is promoted:

* an outlier value first: among the value where the error first jumps (else the one that
  loses most against its inputs) and the values it reads, the one whose median channel spans
  fewest steps of its encoding (``outliers``: one channel 1000x wider than the rest leaves the
  others below one 8-bit step), when that is below ``OUTLIER_BITS``. It is promoted by name, a
  ``quantize_values`` override: its producer and readers run at 16-bit activations. Its own
  SQNR can be high (the wide channel dominates it); the jump shows at a reader that weighs the
  narrow channels;
* else the jump value itself: the modules of its producer and of its readers go to 16-bit
  activations (a ``quantize_modules`` override), so the value is stored and read at 16 bits
  (PT2E requantizes at the modules' edges); a value computed outside any submodule (a
  functional op in the model's own ``forward``) is promoted by name.

The result holds both dicts, the overrides a user writes by hand, so it can be pinned
(``MixedPrecision.options``).

A promotion is to 16-bit activations, which every HTP (v68 included) runs; a module already at 16
bits that is still where the error jumps is kept float next, where the HTP computes floats (in
fp16), never on v68. Each attempt runs the PT2E calibration again on the same samples (observers are rebuilt when the
annotation changes); that is host work, small next to a compile on the emulator.

Values are matched by name: the dynamo ONNX exporter names a value after its FX node, in the
float graph and in the converted (QDQ) one alike. A clamp (ReLU) that the quantizer absorbs
into the encoding of its input has no node of its own in the QDQ graph; its input's value there
holds the clamped numbers, so it is compared under the clamp's name.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import warnings
from typing import Optional, Sequence

import torch

from .. import _native
from .._accuracy import _DTYPE_NAMES, AccuracyReport
from ..compiling import to_onnx
from ..exceptions import LoweringError, QnnApiError
from ..settings import check_target_sqnr_db
from . import pt2e
from .config import FLOAT, SCHEMES, QuantizeConfig, Scheme
from .config import config as quantize_config
from .kinds import OP_KINDS
from .modpaths import module_paths
from .outliers import RangeUse, range_use
from .qdq import QDQ_OPSET

logger = logging.getLogger("qnnx_backend")

#: How many QDQ models a search builds and compares at most, the first (no promotion) included.
MAX_ATTEMPTS = 8
#: A value whose median channel spans fewer steps of its encoding than 2**OUTLIER_BITS is an
#: outlier value (its channels' ranges spread so that the typical one is barely represented).
OUTLIER_BITS = 4.0

_CLAMPS = OP_KINDS["relu"] | OP_KINDS["clamp"]
_UNSET = object()


@dataclasses.dataclass(frozen=True)
class MixedPrecision:
    """What the search found."""

    quantize_modules: dict
    """The overrides it chose, {module path: scheme}, the user's own ones included: pass them as
    ``options={"quantize_modules": ...}`` to pin the result."""
    promoted: tuple
    """The module paths it promoted (to 16-bit activations, or to float where the HTP has fp16),
    in the order first chosen."""
    history: tuple
    """The lowest model-output SQNR (dB) after each compared attempt."""
    report: AccuracyReport
    """The per-layer report of the chosen model."""
    onnx: bytes = dataclasses.field(repr=False)
    """The chosen QDQ model."""
    refused: tuple = ()
    """(module path or value name, reason) of promotions the target refused."""
    quantize_values: dict = dataclasses.field(default_factory=dict)
    """The value overrides it chose, {value name: scheme}, the user's own included: pass them
    as ``options={"quantize_values": ...}``. A value is named as torch.export names the FX
    node of its op (``mul``, ``linear_1``), as the per-layer report and the QDQ model do."""
    promoted_values: tuple = ()
    """The values it promoted by name, in the order first chosen."""

    @property
    def options(self) -> dict:
        """The torch.compile options that pin the result (the non-empty override dicts)."""
        out = {"quantize_modules": self.quantize_modules, "quantize_values": self.quantize_values}
        return {k: v for k, v in out.items() if v}


@dataclasses.dataclass
class _Graph:
    """The float graph as torch.export sees it: per FX node (= ONNX value) name, its module
    path and the names of its readers."""

    module: dict
    readers: dict
    clamps: dict
    """Clamp node name -> its input's name, where the input has no other reader."""
    inputs: dict
    """Node name -> the names of the op outputs it reads."""
    use: dict
    """Node name -> its RangeUse on the calibration samples."""


@to_onnx.exclusive
def _float_graph(
    traced: torch.nn.Module, example: Sequence[torch.Tensor], samples: Sequence[Sequence[torch.Tensor]]
) -> tuple[bytes, _Graph]:
    try:
        with torch.no_grad(), warnings.catch_warnings(), torch.fx.traceback.preserve_node_meta():
            warnings.simplefilter("ignore")
            program = torch.export.export(traced, tuple(example), strict=False)
            exported = torch.onnx.export(
                program,
                tuple(example),
                dynamo=True,
                optimize=False,
                opset_version=QDQ_OPSET,
                input_names=[f"input_{i}" for i in range(len(example))],
                verbose=False,
            )
    except to_onnx.EXPORT_ERRORS as e:
        raise LoweringError(f"target_sqnr_db: the float graph could not be exported: {e}") from None
    module, readers, clamps, inputs = {}, {}, {}, {}
    for n in program.graph.nodes:
        if n.op != "call_function":
            continue
        paths = module_paths(n)
        module[n.name] = paths[-1] if paths else ""
        readers[n.name] = [u.name for u in n.users]
        inputs[n.name] = [a.name for a in n.all_input_nodes if a.op == "call_function"]
        src = n.args[0] if n.args else None
        if n.target in _CLAMPS and isinstance(src, torch.fx.Node) and len(src.users) == 1:
            clamps[n.name] = src.name
    use = range_use(program.module(), samples)
    return exported.model_proto.SerializeToString(), _Graph(module, readers, clamps, inputs, use)


def _name_clamped_values(qdq: bytes, graph: _Graph) -> bytes:
    """The QDQ model with each absorbed clamp's input value renamed to the clamp (see above)."""
    import onnx

    m = onnx.load_from_string(qdq)
    have = {o for n in m.graph.node for o in n.output}
    rename = {src: clamp for clamp, src in graph.clamps.items() if clamp not in have and src in have}
    if not rename:
        return qdq
    for n in m.graph.node:
        n.input[:] = [rename.get(i, i) for i in n.input]
        n.output[:] = [rename.get(o, o) for o in n.output]
    for o in m.graph.output:
        o.name = rename.get(o.name, o.name)
    return m.SerializeToString()


def _output_sqnr(report: AccuracyReport) -> float:
    outs = [l.sqnr_db for l in report.layers if l.is_output]
    return min(outs) if outs else -math.inf


def _candidate(report: AccuracyReport, open_) -> Optional[str]:
    """The value to promote next: the first jump, else the one losing most against its inputs,
    else the worst, among the layers ``open_`` accepts."""
    layers = [l for l in report.layers if open_(l.value)]
    j = report.first_jump
    if j is not None and open_(j.value):
        return j.value

    def drop(l) -> float:
        if l.input_sqnr_db is None or not math.isfinite(l.input_sqnr_db):
            return -math.inf
        return l.input_sqnr_db - max(l.sqnr_db, -300.0)

    scored = [l for l in layers if drop(l) > -math.inf]
    if scored:
        return max(scored, key=drop).value
    return layers[0].value if layers else None


def _outlier(graph: _Graph, anchors: Sequence[str], bits, done) -> Optional[tuple[str, float]]:
    """Among ``anchors`` and the values they read (not ``done``), the one whose median channel
    spans the fewest steps at its width (``bits(name)``), with that number of bits, when it is
    below OUTLIER_BITS."""
    suspects = list(dict.fromkeys(s for a in anchors for s in [a, *graph.inputs.get(a, [])]))
    scored = []
    for name in suspects:
        use: Optional[RangeUse] = graph.use.get(name)
        if use is not None and name not in done and name in graph.module:
            scored.append((use.bits(bits(name)), name))
    if not scored:
        return None
    b, name = min(scored)
    return (name, b) if b < OUTLIER_BITS else None


def _promoted_nodes(graph: _Graph, value: str) -> list:
    """The FX nodes to promote for ``value``: its producer and readers, and the absorbed clamps
    among them with the op they are absorbed into (a clamp is quantized as part of its input's
    producer, so the two go to 16 bits together)."""
    names = [value, *graph.readers.get(value, [])]
    if value in graph.clamps:  # the QDQ value of a clamp is its input's producer's
        names.append(graph.clamps[value])
    for n in list(names):
        names.extend(r for r in graph.readers.get(n, []) if graph.clamps.get(r) == n)
    return list(dict.fromkeys(names))


def search(
    traced: torch.nn.Module,
    example: Sequence[torch.Tensor],
    samples: Sequence[Sequence[torch.Tensor]],
    cfg: QuantizeConfig,
    spec: "_native.Spec",
    target_sqnr_db: float,
    max_attempts: int = MAX_ATTEMPTS,
) -> MixedPrecision:
    """Searches value and module promotions of ``traced`` quantized with ``cfg`` until every
    output is within ``target_sqnr_db`` of the float graph on ``example``, on the HTP ``spec``
    names. Raises LoweringError naming the best reached when no assignment within
    ``max_attempts`` does."""
    if cfg.scheme.act_bits != 8:
        raise ValueError(
            f"target_sqnr_db: quantize={cfg.scheme.name!r} has 16-bit activations already; the "
            "search promotes 8-bit ones (use quantize='8a8w')"
        )
    float_onnx, graph = _float_graph(traced, example, samples)
    packed = [(_DTYPE_NAMES[t.dtype], list(t.shape), t.detach().cpu().contiguous().numpy().tobytes()) for t in example]
    reference = _native.Reference(float_onnx, packed)
    up = SCHEMES["16a8w"] if cfg.scheme.weight_bits == 8 else SCHEMES["16a16w"]
    arch = spec.arch
    # The QDQ builds are compared without fp16 (a user's fp16 is for float graphs).
    test_spec = _native.Spec("npu", spec.soc_model, spec.htp_arch)
    # Where the HTP computes floats (in fp16; not v68), a module or value already at 16 bits
    # that is still to blame is kept float next.
    can_float = arch is None or arch != 68
    # ("module", path) or ("value", name) -> up, or None = float
    level: dict[tuple[str, str], Optional[Scheme]] = {}
    steps: list[list[tuple[tuple[str, str], object]]] = []  # (key, previous level) per step
    refused: list[tuple[tuple[str, str], str]] = []
    history: list[float] = []
    best: Optional[tuple[float, dict]] = None
    user_values = dict(cfg.values)

    def pins(kind: str) -> dict:
        return {k: (l.name if l is not None else FLOAT) for (t, k), l in level.items() if t == kind}

    def options() -> dict:
        return {o: p for o, p in (("quantize_modules", pins("module")), ("quantize_values", pins("value"))) if p}

    def bits(name: str) -> float:
        """The activation bits ``name`` is stored with in the last attempt (inf: float)."""
        if ("value", name) in level or name in user_values:
            s = level.get(("value", name), user_values.get(name))
            return s.act_bits if s is not None else math.inf
        s = level.get(("module", graph.module.get(name) or ""), cfg.scheme)
        return s.act_bits if s is not None else math.inf

    def promote(key: tuple[str, str], step: list) -> None:
        before = level.get(key, _UNSET)
        level[key] = up if before is _UNSET else None
        step.append((key, before))

    for _ in range(max(1, max_attempts)):
        modules = cfg.modules + tuple((k, l) for (t, k), l in level.items() if t == "module")
        values = cfg.values + tuple((k, l) for (t, k), l in level.items() if t == "value")
        q = pt2e.quantize(traced, example, samples, dataclasses.replace(cfg, modules=modules, values=values))
        qdq = _name_clamped_values(q.onnx, graph)
        try:
            report = AccuracyReport(reference.compare(qdq, test_spec))
        except (QnnApiError, LoweringError) as e:
            if not steps:
                raise
            # The target refused the last step (v68 has no 16-bit MatMul of two activations,
            # say): undone, and the next candidate is tried.
            for key, before in steps.pop():
                if before is _UNSET:
                    del level[key]
                else:
                    level[key] = before  # type: ignore[assignment]
                refused.append((key, str(e).splitlines()[0]))
            continue
        out = _output_sqnr(report)
        history.append(out)
        logger.info("qnn mixed precision: attempt %d, %s, output SQNR %.2f dB", len(history), options(), out)
        if best is None or out > best[0]:
            best = (out, options())
        if out >= target_sqnr_db:
            user = {p: (s.name if s is not None else FLOAT) for p, s in cfg.modules}
            mine = {v: (s.name if s is not None else FLOAT) for v, s in cfg.values}
            found = MixedPrecision(
                {**user, **pins("module")},
                tuple(k for t, k in level if t == "module"),
                tuple(history),
                report,
                qdq,
                tuple((k, why) for (_, k), why in refused),
                {**mine, **pins("value")},
                tuple(k for t, k in level if t == "value"),
            )
            logger.info(
                "qnn mixed precision: %.2f dB at the output in %d attempt(s); pin it with options=%r",
                out, len(history), found.options,
            )
            return found
        done = {k for k, _ in refused} | {k for k, l in level.items() if l is None or not can_float}
        done_paths = {k for t, k in done if t == "module"}
        done_values = {k for t, k in done if t == "value"} | set(user_values)

        def open_(name: str) -> bool:
            path = graph.module.get(name)
            return path is not None and (path not in done_paths if path else name not in done_values)

        value = _candidate(report, open_)
        anchors = [a for a in (report.first_jump.value if report.first_jump else None, value) if a]
        outlier = _outlier(graph, anchors, bits, done_values)
        step: list = []
        if outlier is not None:
            logger.info(
                "qnn mixed precision: %r is an outlier value (its median channel spans %.1f bits of "
                "its encoding; the error jumps at %r)", outlier[0], outlier[1], anchors[0],
            )
            promote(("value", outlier[0]), step)
        elif value is not None and not graph.module.get(value):
            promote(("value", value), step)  # computed outside any submodule: by name
        elif value is not None:
            for name in _promoted_nodes(graph, value):
                path = graph.module.get(name)
                if not path or path in done_paths or any(k == ("module", path) for k, _ in step):
                    continue
                promote(("module", path), step)
        if not step:
            break
        steps.append(step)
    b, p = best if best is not None else (-math.inf, {})
    raise LoweringError(
        f"target_sqnr_db={target_sqnr_db}: no assignment within {max_attempts} attempts reaches it at the "
        f"output: the best was {b:.2f} dB with {p or 'nothing promoted'}"
        + (f"; the target refused 16 bits for {[k for (_, k), _ in refused]}" if refused else "")
        + "; raise max_attempts, lower the target, calibrate on more representative data, or use quantize='16a8w'"
    )


def mixed_precision(
    model: torch.nn.Module,
    example_inputs,
    *,
    calibration,
    target_sqnr_db: float,
    quantize: str = "8a8w",
    soc_model=60,
    htp_arch: Optional[int] = None,
    max_attempts: int = MAX_ATTEMPTS,
    observer: str = "minmax",
    per_channel: bool = True,
    weight_rounding: str = "nearest",
    quantize_modules=None,
    quantize_ops=None,
    quantize_values=None,
) -> MixedPrecision:
    """Finds the fewest values and modules of ``model`` to keep at 16-bit activations so that,
    quantized with ``quantize`` and calibrated on ``calibration`` (a list of samples: tensors or
    tuples of tensors), every output on ``example_inputs`` is within ``target_sqnr_db`` of the
    float model, measured on the HTP of ``soc_model`` (emulated on x86_64). Returns the
    overrides (``result.options``: ``quantize_modules`` and ``quantize_values``) to pass as
    torch.compile options, with the per-layer report of the chosen model. Raises LoweringError when no assignment within ``max_attempts`` compiles
    reaches the target. Call it before compiling anything for a v68 SoC in the process: the
    reference runs on the SoC-less emulator, which refuses float graphs once a v68 backend
    opened."""
    check_target_sqnr_db(target_sqnr_db)
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ValueError(f"max_attempts={max_attempts!r}: an int of at least 1")
    example = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    samples = [(s,) if isinstance(s, torch.Tensor) else tuple(s) for s in calibration]
    if not samples:
        raise ValueError("calibration is empty: give at least one sample, ideally a few dozen of the data the model sees")
    spec = _native.Spec("npu", soc_model, htp_arch)
    cfg = quantize_config(
        quantize, observer, per_channel, quantize_modules, quantize_ops, spec.arch, weight_rounding, quantize_values
    )
    return search(model.eval(), example, samples, cfg, spec, float(target_sqnr_db), max_attempts)
