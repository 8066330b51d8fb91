"""An 8-bit KV cache for quantized decode graphs (``kv_cache=True`` with ``quantize``).

What on-device LLM runtimes do (Genie, mllm's KV8): the cache lives in memory as 8-bit integers
with one encoding per layer's keys and per layer's values, calibrated once; each step's new rows
are quantized inside the graph with that encoding; the cache is never converted from float at
every step. Here:

* **The graph** (``rewrite``): each cache input of the QDQ model becomes a raw uint8 input read
  by a ``DequantizeLinear`` with the cache's encoding, and each output carrying this step's new
  rows (the write-back arguments of ``compiling.kvcache``) ends in a ``QuantizeLinear`` with the
  same encoding: raw quantized I/O, which the lowering passes to QNN as fixed-point tensors (the
  caller passes and receives the integers).
* **The encodings** (``encodings``): per cache tensor, asymmetric uint8 fitted to the rows the
  calibration prefills hold (``quantization.prefill``): by default the range covering every
  row; with ``kv_cache_observer="histogram"`` the range with the least quantization error over
  their histogram, which clips a few rare values.
* **The host** (``Shadow``): the caller's ``StaticCache`` holds float tensors. Beside each one
  the graph keeps its uint8 twin: made once from the float tensor (at the first decode step of a
  generation, when the float tensor is also set to the twin's values), then updated with the
  graph's new uint8 rows only; the same rows, dequantized, are written into the caller's float
  tensor, so the caller's cache holds exactly what the NPU's does. A float tensor changed by anyone else (a new generation, ``cache.reset()``) is noticed by
  its version counter and its twin is made again.
* **Rotated rows** (``kv_cache_rotation``, ``rotation_matrix``): the cache may hold each row
  times an orthogonal matrix ``R`` of the head size (a randomized Hadamard matrix). The graph
  multiplies the new rows by ``R`` before its ``QuantizeLinear``; the attention reads the
  rotated cache as it is, with its queries rotated too (keys) or its output rotated back
  (values), so the model computes its own attention (``kv8_rotation.at_attention``; where the graph
  has another shape, the dequantized cache is rotated back by ``R^T`` where it is read). A
  row's few wide channels are spread over all of them before one encoding per tensor covers
  them (docs/llm-accuracy.md: what it buys). ``R``'s entries are ``+-1/sqrt(d)``: int8 ``+-1``
  with one scale, exact on the HTP. The host's twins hold the rotated codes and the caller's
  float cache the rows rotated back.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from typing import Any, Optional, Sequence

import torch

from .config import check_observer
from .prefill import MASK_FLOOR
from .rotation import hadamard

#: uint8's range.
QMIN, QMAX = 0, 255


@dataclasses.dataclass(frozen=True)
class Encoding:
    scale: float
    zero_point: int
    rotation: Optional[torch.Tensor] = dataclasses.field(default=None, compare=False, repr=False)
    """The rows are held times this orthogonal float32 matrix [d, d] (``rotation_matrix``)."""

    @staticmethod
    def covering(lo: float, hi: float, rotation: Optional[torch.Tensor] = None) -> "Encoding":
        """The uint8 encoding of [lo, hi] widened to hold 0 (zero must be exact: unwritten rows)."""
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        scale = max(hi - lo, 1e-8) / (QMAX - QMIN)
        zp = int(round(QMIN - lo / scale))
        return Encoding(scale, max(QMIN, min(QMAX, zp)), rotation)

    def quantize(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float() if self.rotation is None else x.float() @ self.rotation
        return torch.clamp(torch.round(x / self.scale) + self.zero_point, QMIN, QMAX).to(torch.uint8)

    def dequantize(self, q: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        x = (q.to(torch.float32) - self.zero_point) * self.scale
        return (x if self.rotation is None else x @ self.rotation.T).to(dtype)


def rotation_matrix(head_dim: int, seed: int = 0) -> torch.Tensor:
    """The randomized Hadamard matrix [d, d] (float32, entries ``+-1/sqrt(d)``) a rotated cache's
    rows are held times; ValueError for a head size with no Hadamard matrix built
    (quantization.rotation.hadamard)."""
    from .rotation import orthogonal

    r, kind = orthogonal(head_dim, torch.Generator().manual_seed(seed))
    if kind != "hadamard":
        raise ValueError(
            f"kv_cache_rotation: no Hadamard matrix of order {head_dim} (the head size) is built here; "
            "hold the cache without rotation (kv_cache_rotation=False)")
    return r.float()


@dataclasses.dataclass(frozen=True)
class CacheIO:
    """One cache tensor of a decode graph: which per-call tensor it is, which graph output holds
    this step's rows for it (and which its positions), and its encoding."""

    tensor: int
    """Position among the graph's per-call tensors (ONNX input ``input_<tensor>``)."""
    arg: int
    """Position among the call's arguments."""
    rows_output: int
    positions_output: int
    dim: int
    encoding: Encoding


def plan(
    kv_plan: Any, tensor_idx: Sequence[int], roles: dict, n_outputs: int
) -> list[tuple[int, int, int, int, int]]:
    """(tensor position, argument index, rows output, positions output, dim) of every cache
    tensor that the graph's write-backs fill with ``index_copy_`` (``kv_plan``:
    compiling.kvcache.MutationPlan; ``roles``: argument index -> prefill.Input;
    ``n_outputs``: outputs of the QNN graph)."""
    from ..compiling.writes import Out

    first_extra = n_outputs - kv_plan.n_extra
    out = []
    # A cache tensor written any other way (a sliding window's roll) stays float (16-bit in the
    # graph): its twin could not follow the host's replay.
    written = [wb.input_index for wb in kv_plan.writebacks]
    for wb in kv_plan.writebacks:
        role = roles.get(wb.input_index)
        if wb.method != "index_copy_" or role is None or role.role not in ("keys", "values"):
            continue
        if written.count(wb.input_index) != 1 or len(wb.args) != 3 or wb.kwargs:
            continue
        dim, pos, rows = wb.args
        if not (isinstance(dim, int) and isinstance(pos, Out) and isinstance(rows, Out)):
            continue
        out.append((tensor_idx.index(wb.input_index), wb.input_index, first_extra + rows.index,
                    first_extra + pos.index, dim))
    return out


def encodings(samples: Sequence[Any], tensors: Sequence[int], rotate: Optional[bool] = False,
              observer: str = "minmax") -> dict[int, Encoding]:
    """Per cache tensor position, the uint8 encoding fitted to the rows the samples hold there
    (times ``rotation_matrix`` of their size with ``rotate``; with None, where their size has a
    Hadamard matrix). ``samples``: per calibration sequence, its float prefill's rows (indexable
    by tensor position, ``[..., rows, head size]``), each row once and no padding: a fit reads
    how often each value occurs, which the decode graph's zero-padded samples would skew.

    ``observer``: "minmax" (the default), the range covering every row; "histogram", torchao's
    HistogramObserver, PyTorch's own range search for the encoding with the least L2
    quantization error over a histogram of the rows (a few rare values clipped). What each costs
    on a trained decoder, on the host and on the HTP: docs/llm-accuracy.md."""
    check_observer("kv_cache_observer", observer)
    if not tensors:
        return {}
    from torchao.quantization.pt2e import HistogramObserver, MinMaxObserver

    kind = HistogramObserver if observer == "histogram" else MinMaxObserver
    seen = {k: kind(dtype=torch.quint8, qscheme=torch.per_tensor_affine, quant_min=QMIN, quant_max=QMAX)
            for k in tensors}
    rotations: dict[int, Optional[torch.Tensor]] = {}
    for s in samples:
        for k in tensors:
            x = s[k].detach().float()
            if rotate is not False:
                if k not in rotations:
                    rotations[k] = (rotation_matrix(x.shape[-1]) if rotate or hadamard(x.shape[-1]) is not None
                                    else None)
                if rotations[k] is not None:
                    x = x @ rotations[k]
            seen[k](x.reshape(-1))
    out = {}
    for k in tensors:
        o = seen[k]
        lo, hi = float(o.min_val), float(o.max_val)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError("kv8: no calibration rows for a cache tensor (every calibration sequence is too short?)")
        if observer == "histogram" and hi > lo:
            scale, zero_point = o.calculate_qparams()
            out[k] = Encoding(float(scale), int(zero_point), rotations.get(k))
        else:
            out[k] = Encoding.covering(lo, hi, rotations.get(k))
    return out


def rewrite(model: Any, caches: Sequence[CacheIO]) -> bytes:
    """The QDQ model (an ``onnx.ModelProto``, edited in place) with each cache input raw uint8
    (behind a DequantizeLinear) and each rows output raw uint8 (after a QuantizeLinear), with
    the cache's encoding."""
    from onnx import TensorProto, helper

    from . import kv8_rotation as rotated

    g = model.graph
    new_nodes, inits = [], []
    for c in caches:
        s, z = f"kv8_scale_{c.tensor}", f"kv8_zero_point_{c.tensor}"
        inits += [helper.make_tensor(s, TensorProto.FLOAT, [], [c.encoding.scale]),
                  helper.make_tensor(z, TensorProto.UINT8, [], [c.encoding.zero_point])]
        name = f"input_{c.tensor}"
        inp = next((i for i in g.input if i.name == name), None)
        if inp is None:
            raise ValueError(f"kv8: the quantized graph has no input {name}")
        inp.type.tensor_type.elem_type = TensorProto.UINT8
        real = f"{name}_kv8"
        for n in g.node:
            n.input[:] = [real if x == name else x for x in n.input]
        r = c.encoding.rotation
        if r is not None:
            # The rotation's matrix product takes and gives 16-bit activations on the HTP (not 8):
            # the same grid at 16 bits, which holds every 8-bit code exactly (65535 = 257 x 255).
            s16, z16 = f"kv8_scale16_{c.tensor}", f"kv8_zero_point16_{c.tensor}"
            inits += [helper.make_tensor(s16, TensorProto.FLOAT, [], [c.encoding.scale / 257]),
                      helper.make_tensor(z16, TensorProto.UINT16, [], [c.encoding.zero_point * 257])]
        # Read side: the codes dequantized; rows held rotated are rotated back where the attention
        # reads them (its queries or its output, ``kv8_rotation.at_attention``), else right here.
        at_attention = r is not None and rotated.at_attention(
            g, inits, real, r, {rotated.UINT8: (s, z), rotated.UINT16: (s16, z16)}, name)
        read = f"{name}_kv8_held" if r is not None and not at_attention else real
        new_nodes.append(helper.make_node("DequantizeLinear", [name, s, z], [read], name=f"{name}_kv8_dq"))
        if r is not None and not at_attention:
            new_nodes += rotated.requantize(read, f"{read}16", s16, z16)
            new_nodes += rotated.rotate(inits, f"{read}16", real, r.T, f"{name}_kv8_unrotate")
        out = g.output[c.rows_output]
        real_out = f"{out.name}_kv8"
        for n in g.node:
            n.output[:] = [real_out if x == out.name else x for x in n.output]
            n.input[:] = [real_out if x == out.name else x for x in n.input]
        written = real_out
        if r is not None:
            written = f"{out.name}_kv8_rotated"
            g.node.extend(rotated.rotate(inits, real_out, f"{written}_f", r, f"{out.name}_kv8_rotate"))
            g.node.extend(rotated.requantize(f"{written}_f", written, s16, z16))
        g.node.append(helper.make_node("QuantizeLinear", [written, s, z], [out.name], name=f"{out.name}_kv8_q"))
        out.type.tensor_type.elem_type = TensorProto.UINT8
    g.initializer.extend(inits)
    nodes = new_nodes + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    return model.SerializeToString()


@dataclasses.dataclass
class _Twin:
    q: torch.Tensor
    source: Any  # weakref to the caller's float tensor (an id or address may be reused)
    version: int


class Shadow:
    """The host side of a quantized KV-cache graph: the uint8 twins of its cache tensors (see the
    module's docstring), and its float attention masks clamped to ``prefill.MASK_FLOOR`` as they
    were when the graph was calibrated."""

    def __init__(self, caches: Sequence[CacheIO], masks: Sequence[int] = ()):
        self.caches = list(caches)
        self.masks = list(masks)
        self.twins: dict[int, _Twin] = {}

    def inputs(self, args: Sequence[Any], tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """The graph's per-call tensors with each float cache replaced by its uint8 twin and the
        masks clamped."""
        tensors = list(tensors)
        for k in self.masks:
            if tensors[k].is_floating_point():
                tensors[k] = tensors[k].clamp(min=MASK_FLOOR)
        for c in self.caches:
            f = args[c.arg]
            t = self.twins.get(c.arg)
            if t is None or t.source() is not f or t.version != f._version:
                q = c.encoding.quantize(f)
                # The caller's cache then holds what the graph reads (the prefill's rows on the
                # 8-bit grid), as it will hold each step's rows.
                f.copy_(c.encoding.dequantize(q, f.dtype))
                t = _Twin(q, weakref.ref(f), f._version)
                self.twins[c.arg] = t
            tensors[c.tensor] = t.q
        return tensors

    def outputs(self, outs: list[torch.Tensor], args: Sequence[Any]) -> list[torch.Tensor]:
        """Writes each step's uint8 rows into the twins and gives the float write-back (to the
        caller's cache) the same rows dequantized."""
        outs = list(outs)
        for c in self.caches:
            rows = outs[c.rows_output]
            self.twins[c.arg].q.index_copy_(c.dim, outs[c.positions_output].to(torch.int64), rows)
            outs[c.rows_output] = c.encoding.dequantize(rows, args[c.arg].dtype)
        return outs

    def settle(self, args: Sequence[Any]) -> None:
        """After the write-back into the caller's tensors: they now equal the twins."""
        for c in self.caches:
            self.twins[c.arg].version = args[c.arg]._version


def describe(caches: Sequence[CacheIO]) -> str:
    """A log line's worth: how many cache tensors (at least one), their encodings' ranges."""
    ranges = [c.encoding.scale * (QMAX - QMIN) for c in caches]
    rotated = sum(c.encoding.rotation is not None for c in caches)
    return (f"{len(caches)} cache tensors at 8 bits (ranges {min(ranges):.3g} to {max(ranges):.3g})"
            + (f", {rotated} held rotated" if rotated else ""))
