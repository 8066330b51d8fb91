"""In-place tensor writes: their functional forms inside a graph, and their replay on the host.

``compiling.kvcache`` rewrites a graph's in-place writes (``index_copy_``, ``x[key] = v``) into
these before export. ONNX has ScatterND and ScatterElements for them, but those are not in every
backend's op set, so both are written with a one-hot MatMul, Equal and Where: each written row
is a source row times 1 plus zeros and every other row is selected unchanged, so the result is
exact in any float precision (fp16 on the HTP included).

``x[key] = v`` is supported when ``key`` indexes one dimension (the others full slices, an
Ellipsis allowed) with an int, a slice, or a 0-D/1-D integer tensor (negative entries count
from the end, as in eager), or when ``key`` is a boolean mask (``torch.where``). transformers'
sliding-window cache (Gemma 2/3) writes ``new_keys[:, :, torch.tensor([-1])] = k``. Duplicate
indices are not supported: eager keeps one of the writes, the one-hot MatMul would add them.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Optional, Sequence

import torch

from ..exceptions import LoweringError


def index_copy(buf: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``buf.index_copy(dim, index, src)`` from MatMul, Equal and Where, which QNN backends run
    (ONNX's ScatterND is not in every backend's op set). Row ``j`` of ``src`` lands at
    ``index[j]``: ``onehot[i, j] = (i == index[j])``, and ``onehot @ src`` picks it exactly."""
    dim = dim % buf.dim()
    n = buf.shape[dim]
    eq = torch.arange(n, dtype=index.dtype)[:, None] == index.reshape(1, -1)
    # A Where of two constants and a max, not a Cast of the bool and a sum: in a quantized graph
    # both run on integers (QNN ElementWiseSelect and ReduceMax), which a v68 HTP needs (it has
    # no float path); its Cast and the sum's unencoded output would compute in float.
    one, zero = torch.ones((), dtype=buf.dtype), torch.zeros((), dtype=buf.dtype)
    onehot = torch.where(eq, one, zero)
    hit = onehot.amax(dim=1) > 0.5
    if dim == buf.dim() - 2:
        # [.., L, X] -> [.., n, X] without transposes: the KV-cache layout [B, H, S, D], dim 2.
        return torch.where(hit.reshape(n, 1), torch.matmul(onehot, src.to(buf.dtype)), buf)
    moved = torch.matmul(src.to(buf.dtype).movedim(dim, -1), onehot.transpose(0, 1))
    return torch.where(hit, moved, buf.movedim(dim, -1)).movedim(-1, dim)


def _full(k: Any) -> bool:
    return isinstance(k, slice) and k == slice(None)


def parse_key(shape: torch.Size, key: Any) -> tuple[str, Optional[int], Any]:
    """What ``x[key] = v`` writes, for ``x`` of ``shape``: ``("mask", None, mask)`` or
    ``("index", dim, k)`` with ``k`` the int, slice or integer tensor indexing ``dim``.

    Called twice: on the traced (fake) values when the graph is rewritten, so that an
    unsupported key is refused by name before export, and on the real values while exporting."""
    key = key if isinstance(key, tuple) else (key,)
    if len(key) == 1 and isinstance(key[0], torch.Tensor) and key[0].dtype == torch.bool:
        return "mask", None, key[0]
    if sum(k is Ellipsis for k in key) > 1 or any(k is None for k in key):
        raise LoweringError(f"kv_cache: x[key] = v with key {key!r}: Ellipsis at most once, no None (new axes)")
    if Ellipsis in key:
        at = next(i for i, k in enumerate(key) if k is Ellipsis)
        key = key[:at] + (slice(None),) * (len(shape) - len(key) + 1) + key[at + 1 :]
    indexed = [(d, k) for d, k in enumerate(key) if not _full(k)]
    if len(key) > len(shape) or len(indexed) != 1:
        raise LoweringError(
            f"kv_cache: x[key] = v with key {key!r} on a tensor of shape {tuple(shape)} is not supported: "
            "index exactly one dimension (the others ':'), or write with index_copy_ / a boolean mask"
        )
    dim, k = indexed[0]
    if isinstance(k, torch.Tensor) and (k.dtype.is_floating_point or k.dtype == torch.bool or k.dim() > 1):
        raise LoweringError(
            f"kv_cache: x[key] = v indexes dimension {dim} with a {k.dtype} tensor of {k.dim()} dimensions; "
            "supported: an int, a slice, or a 0-D or 1-D integer tensor"
        )
    if not isinstance(k, (int, slice, torch.Tensor)):
        raise LoweringError(f"kv_cache: x[key] = v indexes dimension {dim} with {k!r}; supported: int, slice, integer tensor")
    return "index", dim, k


def setitem(buf: torch.Tensor, key: Any, value: Any) -> torch.Tensor:
    """``buf`` after ``buf[key] = value``, as a new tensor (``parse_key`` says which keys)."""
    kind, dim, k = parse_key(buf.shape, key)
    value = torch.as_tensor(value, dtype=buf.dtype)
    if kind == "mask":
        return torch.where(k, value, buf)
    n = buf.shape[dim]
    rest = buf.shape[:dim] + buf.shape[dim + 1 :]
    if isinstance(k, int) or (isinstance(k, torch.Tensor) and k.dim() == 0):
        # One position: the value has no `dim` axis (x[:, 0] = v with v of x[:, 0]'s shape).
        index = torch.as_tensor(k).reshape(1)
        value = value.expand(rest).unsqueeze(dim)
    else:
        index = torch.arange(n)[k] if isinstance(k, slice) else k
        value = value.expand(buf.shape[:dim] + (index.shape[0],) + buf.shape[dim + 1 :])
    if index.shape[0] == 0:
        return buf
    # Negative positions count from the end, as eager indexing does; Where keeps to basic ops.
    index = torch.where(index < 0, index + n, index)
    return index_copy(buf, dim, index, value)


@dataclasses.dataclass(frozen=True)
class Out:
    """In a write-back's arguments: the extra graph output with this index."""

    index: int


def _resolve(a: Any, extra: Sequence[torch.Tensor]) -> Any:
    if isinstance(a, Out):
        return extra[a.index]
    if isinstance(a, (tuple, list)):
        return type(a)(_resolve(x, extra) for x in a)
    if isinstance(a, dict):
        return {k: _resolve(v, extra) for k, v in a.items()}
    return a


def _roll_in_place(t: torch.Tensor, *args: Any, **kwargs: Any) -> None:
    t.copy_(t.roll(*args, **kwargs))


# Write-backs that are not a tensor method of the same name.
_HOST = {"setitem": operator.setitem, "roll": _roll_in_place}


@dataclasses.dataclass
class WriteBack:
    """Replays one in-place op on the caller's tensor ``inputs[input_index]`` after the graph ran:
    ``inputs[input_index].<method>(*args, **kwargs)`` (``setitem``: ``t[key] = value``; ``roll``:
    ``t`` rolled in place), each ``Out`` in the arguments replaced by that extra graph output."""

    input_index: int
    method: str
    args: list
    kwargs: dict

    def apply(self, inputs: Sequence[Any], extra: Sequence[torch.Tensor]) -> None:
        t = inputs[self.input_index]
        args, kwargs = _resolve(list(self.args), extra), _resolve(self.kwargs, extra)
        if self.method in _HOST:
            _HOST[self.method](t, *args, **kwargs)
        else:
            getattr(t, self.method)(*args, **kwargs)


@dataclasses.dataclass
class MutationPlan:
    """How the outputs of the rewritten graph map back to the original graph's outputs."""

    n_outputs: int
    """Outputs of the original graph."""
    alias_outputs: dict
    """Original output position -> input index: outputs that are a mutated input itself are the
    caller's tensor (after the write-back), not a graph output."""
    n_extra: int
    """Extra graph outputs (after the kept original outputs) holding write-back arguments."""
    writebacks: list

    def finish(self, inputs: Sequence[Any], outs: Sequence[torch.Tensor]) -> list:
        """The original graph's outputs, after applying the write-backs to ``inputs``."""
        kept = len(outs) - self.n_extra
        extra = outs[kept:]
        for wb in self.writebacks:
            wb.apply(inputs, extra)
        result = []
        it = iter(outs[:kept])
        for i in range(self.n_outputs):
            j = self.alias_outputs.get(i)
            result.append(inputs[j] if j is not None else next(it))
        return result
