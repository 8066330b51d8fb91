"""``qnnx_backend.accuracy_report``: where a model loses accuracy on the HTP, per layer.

The model and its reference are compiled with every intermediate that holds a model value as a
graph output and run on the same inputs, so the numbers are what the backend computes (the
Rust engine's ``compare``): the reference in exact fp32 on the SoC-less HTP emulator, the model
in fp16 on an FP16 SoC, or a QDQ model (with its float model as ``reference``) on any SoC.
Values map back to ONNX nodes and, through the TorchScript exporter's node names, to
``nn.Module`` paths (see ``_profile.module_path``).
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import torch

from . import _native
from ._profile import _onnx_of, _unwrap, module_path
from .compiling.call import TORCH_DTYPES

ModelLike = Union[torch.nn.Module, bytes, str, os.PathLike]

_DTYPE_NAMES = {d: n for n, d in TORCH_DTYPES.items() if d is not None}


def _num(x: Any) -> Any:
    # The engine writes infinities (an exact value, an fp16 overflow) as strings.
    return float(x) if isinstance(x, str) else x


@dataclass(frozen=True)
class LayerError:
    """How one model value differs from the reference."""

    value: str
    onnx_node: str
    op_type: str
    #: The module the ONNX node belongs to, when its name says; None otherwise.
    module: Optional[str]
    #: ``10 log10(sum ref^2 / sum err^2)``: inf when exact, -inf when the HTP's value is not finite.
    sqnr_db: float
    cosine: float
    max_abs_err: float
    #: HTP values that are NaN or infinite where the reference's are finite (fp16 overflow).
    nonfinite: int
    #: The lowest SQNR among the value's compared inputs, None when none is compared.
    input_sqnr_db: Optional[float]
    is_output: bool


class AccuracyReport:
    """Every compared value, worst SQNR first, and the first one where the error jumps."""

    def __init__(self, report_json: str):
        r = json.loads(report_json)
        self.jump_db: float = r["jump_db"]
        self.layers: list[LayerError] = [
            LayerError(
                value=l["value"],
                onnx_node=l["node"],
                op_type=l["op_type"],
                module=module_path(l["node"]),
                sqnr_db=_num(l["sqnr_db"]),
                cosine=_num(l["cosine"]),
                max_abs_err=_num(l["max_abs_err"]),
                nonfinite=l["nonfinite"],
                input_sqnr_db=None if l["input_sqnr_db"] is None else _num(l["input_sqnr_db"]),
                is_output=l["is_output"],
            )
            for l in r["layers"]
        ]
        #: Values only one of the two builds held (folded or fused away on one side).
        self.unmatched: list[str] = r["unmatched"]
        #: With a batch of inputs (the first input's first axis N >= 2), per model output over its
        #: N rows: ``n``, ``cosine_min``, ``cosine_mean``, ``top1_agreement`` and, for N >= 3, the
        #: pairwise-similarity structure (``offdiag_correlation``, ``offdiag_mean_reference``,
        #: ``offdiag_mean_test``, ``nn_agreement``; see qnnx_backend.batch_metrics).
        self.batch: dict[str, dict] = {b["value"]: {k: v for k, v in b.items() if k != "value"} for b in r.get("batch", [])}
        first = r["first_jump"]
        #: The first value in graph order whose SQNR is more than ``jump_db`` below its inputs'.
        self.first_jump: Optional[LayerError] = next((l for l in self.layers if l.value == first), None)

    def layer(self, value: str) -> Optional[LayerError]:
        return next((l for l in self.layers if l.value == value), None)

    def table(self, top: Optional[int] = 20) -> str:
        """The table ``qnnx compare`` prints, worst first, with module paths."""
        rows = self.layers[:top]
        w = max([len(l.module or l.value) for l in rows] + [5])
        lines = [f"  {'layer':<{w}}  {'op':<12} {'SQNR dB':>9} {'cosine':>10} {'max |err|':>11}"]
        for l in rows:
            mark = "  <- first jump" if l is self.first_jump else ("  (output)" if l.is_output else "")
            lines.append(
                f"  {l.module or l.value:<{w}}  {l.op_type:<12} {l.sqnr_db:>9.2f} {l.cosine:>10.6f} {l.max_abs_err:>11.4e}{mark}"
            )
        for name, b in self.batch.items():
            line = (f"output {name} over {b['n']} inputs: cosine min {b['cosine_min']:.5f} / mean "
                    f"{b['cosine_mean']:.5f}, top-1 agreement {b['top1_agreement']:.3f}")
            if b.get("offdiag_correlation") is not None:
                line += (f"; pairwise similarity: correlation {b['offdiag_correlation']:.4f}, mean "
                         f"{b['offdiag_mean_reference']:.3f} -> {b['offdiag_mean_test']:.3f}, "
                         f"nearest-neighbour agreement {b['nn_agreement']:.3f}")
            lines.append(line)
        if self.first_jump is None:
            lines.append(f"first jump: none (no value falls more than {self.jump_db} dB below its inputs)")
        else:
            j = self.first_jump
            lines.append(f"first jump: {j.module or j.value} ({j.op_type} node {j.onnx_node!r}): {j.sqnr_db:.2f} dB")
        return "\n".join(lines) + "\n"

    def to_csv(self) -> str:
        out = io.StringIO()
        fields = list(LayerError.__dataclass_fields__)
        w = csv.writer(out)
        w.writerow(fields)
        for l in self.layers:
            w.writerow([getattr(l, f) for f in fields])
        return out.getvalue()

    def __repr__(self) -> str:
        j = self.first_jump
        return f"<AccuracyReport {len(self.layers)} values, first jump {j.value if j else None!r}>"


def _onnx_bytes(model: ModelLike, inputs: Sequence[torch.Tensor], what: str) -> bytes:
    if isinstance(model, torch.nn.Module):
        return _onnx_of(_unwrap(model), inputs)
    if isinstance(model, (bytes, bytearray)):
        return bytes(model)
    if isinstance(model, (str, os.PathLike)):
        with open(model, "rb") as f:
            return f.read()
    raise TypeError(f"accuracy_report: {what} must be an nn.Module, ONNX bytes or a path, got {type(model).__name__}")


def accuracy_report(
    model: ModelLike,
    example_inputs: Union[torch.Tensor, Sequence[torch.Tensor]],
    *,
    reference: Optional[ModelLike] = None,
    soc_model: Union[int, str, None] = 60,
    htp_arch: Optional[int] = None,
    fp16: bool = True,
    jump_db: float = 10.0,
) -> AccuracyReport:
    """Runs ``model`` on the HTP of ``soc_model`` (emulated on x86_64) and on the exact fp32
    reference with ``example_inputs``, and reports, per model value, SQNR, cosine and largest
    error of the HTP's own intermediate outputs, worst first, and the first layer where the
    error jumps by more than ``jump_db`` dB.

    ``model`` is an ``nn.Module`` (exported with the TorchScript exporter, so values map to
    module paths), ONNX bytes or an ``.onnx`` path. A float model runs in fp16 (``fp16=False``:
    fp32 graph, which FP16 HTPs still compute in fp16). A quantized (QDQ) model needs its float
    model as ``reference`` (same kinds), and runs on any SoC, v68 included.
    """
    tensors = [example_inputs] if isinstance(example_inputs, torch.Tensor) else list(example_inputs)
    for k, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"accuracy_report: input {k} is a {type(t).__name__}, not a tensor")
        if t.dtype not in _DTYPE_NAMES:
            raise ValueError(f"accuracy_report: input {k} has dtype {t.dtype}, which the HTP does not take")
    onnx = _onnx_bytes(model, tensors, "model")
    ref = None if reference is None else _onnx_bytes(reference, tensors, "reference")
    packed = [
        (_DTYPE_NAMES[t.dtype], list(t.shape), t.detach().cpu().contiguous().numpy().tobytes()) for t in tensors
    ]
    spec = _native.Spec("npu", soc_model, htp_arch, fp16)
    report = _native.compare(onnx, packed, spec, reference=ref, jump_db=jump_db)
    return AccuracyReport(report)
