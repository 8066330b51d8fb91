"""``qnnx_backend.compile``: one compiled module, with prefill lengths padded to static buckets.

QNN graphs have static shapes, so every new ``[batch, sequence]`` shape of a decoder's
``input_ids`` would cost an export, a lowering and a finalize. With ``dynamic=True`` a cache-free
prefill call is padded on the right to the next bucket (64, 128, then multiples of 256, capped at
the model's maximum position count), runs the graph compiled for that bucket, and returns logits
for the real tokens only. Right padding does not change the real tokens' logits: in a causal
decoder a token attends only to itself and earlier tokens, and the padded positions get
``attention_mask`` 0.

The input contract (anything else raises ``ValueError`` before any graph runs):

* ``input_ids``: the first positional argument or the ``input_ids`` keyword, an integer tensor
  ``[batch, sequence]`` with ``sequence`` >= 1 and no longer than the model's
  ``max_position_embeddings`` / ``n_positions`` when its config has one;
* ``attention_mask`` (optional): the same shape as ``input_ids``, 1 for real tokens and 0 for
  padding (left padding by the caller is kept as it is);
* ``position_ids`` / ``token_type_ids`` (optional): the same shape as ``input_ids``;
* no ``past_key_values`` and no ``use_cache=True``: bucketing is for cache-free prefill. Calls
  with a cache (``generate`` with ``kv_cache=True``) are passed through unpadded;
* other tensor arguments must not have the sequence length as a dimension.

Calls without integer ``input_ids`` (vision models, encoders called with float tensors), and
models whose ``forward`` takes no ``attention_mask``, are passed through unchanged: each new
shape compiles its own graph.
"""

from __future__ import annotations

import inspect
from typing import Any, Optional

import torch

from ..exceptions import QnnxError

#: The first buckets; above the last one, buckets are multiples of STEP.
FIRST_BUCKETS = (64, 128)
STEP = 256

# Sequence-shaped keyword arguments that are padded with the input_ids, and the value padding gets.
_PADDED = ("attention_mask", "position_ids", "token_type_ids")


def bucket(n: int, limit: Optional[int] = None) -> int:
    """The padded length for ``n`` tokens: 64, 128, then the next multiple of 256, never above
    ``limit`` (the model's maximum position count)."""
    if n < 1:
        raise ValueError(f"input_ids has {n} tokens; the prefill needs at least one")
    if limit is not None and n > limit:
        raise ValueError(f"input_ids has {n} tokens; the model takes at most {limit} positions")
    b = next((f for f in FIRST_BUCKETS if n <= f), None)
    if b is None:
        b = -(-n // STEP) * STEP
    return min(b, limit) if limit is not None else b


def _max_positions(model: torch.nn.Module) -> Optional[int]:
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions"):
        v = getattr(config, name, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def _takes_attention_mask(model: torch.nn.Module) -> bool:
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
    return "attention_mask" in params


def _pad_token(model: torch.nn.Module) -> int:
    v = getattr(getattr(model, "config", None), "pad_token_id", None)
    return v if isinstance(v, int) and v >= 0 else 0


def _signature(args: tuple, kwargs: dict) -> tuple:
    def one(v):
        if isinstance(v, torch.Tensor):
            return ("tensor", tuple(v.shape), v.dtype)
        return ("value", type(v).__name__)

    return tuple(one(a) for a in args) + tuple((k, one(v)) for k, v in sorted(kwargs.items()))


class QnnCompiledModule(torch.nn.Module):
    """What ``qnnx_backend.compile`` returns: calls ``torch.compile(model, backend="qnn")``,
    with bucketed prefill (``dynamic=True``) or one fixed signature (``dynamic=False``).
    Attributes it does not have (``config``, ``generate``...) are the model's."""

    def __init__(self, model: torch.nn.Module, options: dict, dynamic: bool):
        super().__init__()
        self.compiled = torch.compile(model, backend="qnn", options=options, dynamic=False)
        self.dynamic = dynamic
        self.fixed: Optional[tuple] = None
        self.max_positions = _max_positions(model)
        self.pad_token = _pad_token(model)
        # Padding is only sound when the padded positions can be masked out.
        self.maskable = _takes_attention_mask(model)
        #: Bucket lengths compiled so far (a new length reuses one of these when it fits).
        self.buckets: set[int] = set()
        if dynamic:
            # One graph per bucket: dynamo's default of 8 recompiles would silently run
            # later buckets eagerly.
            cfg = torch._dynamo.config
            name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
            setattr(cfg, name, max(getattr(cfg, name), 64))

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["compiled"]._orig_mod, name)

    def forward(self, *args, **kwargs):
        if not self.dynamic:
            sig = _signature(args, kwargs)
            if self.fixed is None:
                self.fixed = sig
            elif sig != self.fixed:
                raise QnnxError(
                    "this module was compiled with dynamic=False, which fixes the input signature at the "
                    f"first call: {self.fixed}; this call has {sig}. Pad the inputs to that shape, or "
                    "compile with dynamic=True (prefill lengths padded to buckets)."
                )
            return self.compiled(*args, **kwargs)
        ids = kwargs.get("input_ids")
        positional = ids is None and bool(args)
        if positional:
            ids = args[0]
        if (
            not isinstance(ids, torch.Tensor)
            or ids.is_floating_point()
            or ids.is_complex()
            or kwargs.get("past_key_values") is not None
            or not self.maskable
        ):
            return self.compiled(*args, **kwargs)
        return self._prefill(ids, positional, args, kwargs)

    def _prefill(self, ids: torch.Tensor, positional: bool, args: tuple, kwargs: dict):
        if ids.dim() != 2:
            raise ValueError(f"input_ids has shape {tuple(ids.shape)}; bucketed prefill takes [batch, sequence]")
        if kwargs.get("use_cache"):
            raise ValueError(
                "use_cache=True: bucketed prefill is cache-free (padded positions would enter the cache). "
                "For generation, compile model.forward with options={'kv_cache': True} and call generate "
                "with cache_implementation='static'."
            )
        batch, n = ids.shape
        b = bucket(n, self.max_positions)
        pad = b - n
        kwargs = dict(kwargs)
        rest = list(args[1:] if positional else args)
        kwargs.pop("input_ids", None)
        for name in _PADDED:
            v = kwargs.get(name)
            if v is not None and (not isinstance(v, torch.Tensor) or tuple(v.shape) != (batch, n)):
                shape = tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
                raise ValueError(f"{name} has shape {shape}; it must match input_ids {(batch, n)}")
        for i, v in enumerate(rest):
            if isinstance(v, torch.Tensor):
                raise ValueError(
                    f"positional tensor argument {i + 1}: pass attention_mask, position_ids and "
                    "token_type_ids by keyword with bucketed prefill"
                )
        for k, v in kwargs.items():
            if k not in _PADDED and isinstance(v, torch.Tensor) and n in tuple(v.shape)[1:] and pad:
                raise ValueError(
                    f"{k} has the sequence length {n} as a dimension; bucketed prefill pads only "
                    f"input_ids and {', '.join(_PADDED)}"
                )
        if pad:
            ids = torch.nn.functional.pad(ids, (0, pad), value=self.pad_token)
            mask = kwargs.get("attention_mask")
            if mask is None:
                mask = torch.ones(batch, n, dtype=torch.long)
            kwargs["attention_mask"] = torch.nn.functional.pad(mask, (0, pad), value=0)
            pos = kwargs.get("position_ids")
            if pos is not None:
                # Padded tokens continue the positions (they are masked and dropped anyway).
                tail = pos[:, -1:] + torch.arange(1, pad + 1, dtype=pos.dtype)
                kwargs["position_ids"] = torch.cat([pos, tail], dim=1)
            types = kwargs.get("token_type_ids")
            if types is not None:
                kwargs["token_type_ids"] = torch.nn.functional.pad(types, (0, pad), value=0)
        kwargs["use_cache"] = False
        self.buckets.add(b)
        out = self.compiled(ids, *rest, **kwargs)
        return _real_tokens(out, n, b) if pad else out


def _real_tokens(out: Any, n: int, b: int) -> Any:
    """The outputs for the first ``n`` of ``b`` positions: logits (or the tensor returned)."""
    if isinstance(out, torch.Tensor):
        return out[:, :n] if out.dim() >= 2 and out.shape[1] == b else out
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        out.logits = logits[:, :n]
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return type(out)([_real_tokens(out[0], n, b), *out[1:]])
    return out
