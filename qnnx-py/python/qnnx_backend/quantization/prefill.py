"""Calibration of KV-cache graphs (``kv_cache=True`` with ``quantize``) from prefill passes.

A decoder compiled with ``kv_cache=True`` becomes two graphs: the prefill (the prompt's tokens,
empty cache) and the decode step (one token, the cache of every earlier token as an input).
Calibrating the decode graph the obvious way, by generating token by token, costs one
sequential forward per position (1023 per sample for a 1k cache: the hours users report).

Here calibration data is text: token id sequences (tensors or lists of ints), or strings with the
``tokenizer`` option. Each sequence runs through the float model **once**, as a causal prefill
that keeps every layer's keys and values (rows < p depend only on tokens < p, so the rows of any
prefix are those of the whole sequence). A graph whose step starts at position p and takes T
tokens is then fed, for a spread of positions p, exactly what ``generate`` would feed it there:
the tokens ``seq[p:p+T]``, their positions, the causal mask, every layer's cache holding the
prefill's rows ``[0, p)`` and zeros after them (a fresh ``StaticCache``), and the cache's position
counter at p. A sliding-window layer's cache (Gemma 2/3) holds the window's rows, rolled once it
is full, and its mask is the window's: which of the two branches a graph takes was fixed when
dynamo traced it (``PrefillSamples``). These samples are independent of each other (no sample
waits for another's output), so calibration costs one prefill plus one single-step forward per
position, none of them sequential.

The decode graph is calibrated at **every** position of every sequence (``POSITIONS``; at most
``MAX_SAMPLES`` positions per graph, spread evenly, which bounds the time): its
activations' ranges are per token and heavy-tailed, and 16 positions per sequence left SmolLM2's
decode graph clipping other text (docs/llm-accuracy.md, "Where the gap was"). A sample holds
every layer's whole cache (12 MB for SmolLM2-135M at 256 slots), so the samples are made on demand
(``Samples``): only the prefills' rows are kept.

Graph inputs are recognised by where dynamo took them from (their source in the forward's
arguments, ``L['kwargs']['input_ids']``, ``...past_key_values.layers[3].keys``): a per-call input
of a role not listed in ``ROLES`` is refused with its name, never given a made-up value.
"""

from __future__ import annotations

import dataclasses
import hashlib
import weakref
from collections.abc import Sequence as SequenceABC
from typing import Any, Callable, Optional, Sequence

import torch

from .calibrate import Frame, InputSource, evenly

#: The forward arguments (and cache fields) this module can produce for a step, by the name of
#: the last step of their source.
ROLES = ("input_ids", "position_ids", "cache_position", "attention_mask", "keys", "values", "cumulative_length")

#: The value masked attention positions get in quantized graphs, instead of the float minimum
#: that transformers' masks hold: an Add of -3.4e38 stretches the 16-bit encoding of the masked
#: scores to steps of 1e34, which rounds every real score to zero (uniform attention: SmolLM2 at
#: 16a8w fell to 12 dB and 22% top-1 agreement). exp(-100) is 4e-44: still exactly zero weight
#: after the softmax for scores within +-40, and the scores' encoding keeps steps of about 0.002.
#: The masks are clamped to it on the host, in the calibration samples and at every call.
MASK_FLOOR = -100.0

#: Decode positions sampled per calibration sequence by default: None is every position that fits
#: the cache (module docstring); a number spreads that many evenly over them.
POSITIONS: Optional[int] = None

#: Samples one graph calibrates on at most, spread evenly over every sequence's positions: each
#: costs a forward of the observed graph (0.31 s for SmolLM2-135M's decode graph), so 64 texts of
#: 1,024 tokens would otherwise take hours. 2,048 bound it to about ten minutes there.
MAX_SAMPLES = 2048


class Samples(SequenceABC):
    """Calibration samples made when read: ``make(key)`` builds the sample of each key, from state
    the maker keeps (the prefills' rows), so a thousand decode samples never exist at once.
    Re-readable, as calibration, the 8-bit cache's encodings and GPTQ each read them."""

    def __init__(
        self,
        keys: Sequence[Any],
        make: Callable[[Any], tuple],
        fingerprint: Callable[[Any], None],
        sequences: Optional[tuple[Callable[[], Any], list[torch.Tensor]]] = None,
        cache_rows: Sequence[list] = (),
    ):
        #: The samples' keys, at most ``MAX_SAMPLES`` of those given; ``offered`` how many were.
        self.offered = len(keys)
        self.keys = evenly(keys, MAX_SAMPLES)
        self.make = make
        self._fingerprint = fingerprint
        #: (a weak reference to the float model, every calibration sequence): what GPTQ computes
        #: its Hessians from for KV-cache graphs (quantization.gptq.SequenceHessians).
        self.sequences = sequences
        #: Per calibration sequence a decode graph's samples are cut from, its float prefill's K/V
        #: rows (``kv_rows``), each row once: what the 8-bit cache's encodings are fitted to
        #: (quantization.kv8.encodings). Empty for a prefill graph.
        self.cache_rows = list(cache_rows)

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self.make(k) for k in self.keys[i]]
        return self.make(self.keys[i])

    def digest(self) -> str:
        """sha256 of what the samples are made from (``fingerprint`` feeds a hash), without making
        them: hashing every sample would read gigabytes of zero-padded caches."""
        h = hashlib.sha256(repr(self.keys).encode())
        self._fingerprint(h)
        return h.hexdigest()


def hash_prefills(h: Any, seqs: Sequence[torch.Tensor], prefills: Sequence[list]) -> None:
    """Feeds ``h`` the calibration sequences and their prefills' K/V rows: what samples made from
    them (``Samples``) are a function of, besides the graph's input shapes."""
    for seq, layers in zip(seqs, prefills):
        h.update(seq.numpy().tobytes())
        for t in (t for kv in layers for t in kv):
            h.update(t.detach().float().contiguous().numpy().tobytes())


@dataclasses.dataclass(frozen=True)
class Input:
    """One per-call graph input: its role and, for cache fields, its layer."""

    role: str
    layer: Optional[int]
    name: str
    sliding: bool = False
    """The mask of the sliding-window layers (``attention_mask['sliding_attention']``)."""


def _classify(src: Optional[InputSource], index: int) -> Input:
    if src is None or not src.steps:
        raise ValueError(
            f"calibration for kv_cache graphs: graph input {index} does not come from the forward's "
            "arguments; compile the model's forward (model.forward = torch.compile(model.forward, ...))"
        )
    last = str(src.steps[-1].value)
    layer = None
    for a, b in zip(src.steps, src.steps[1:]):
        if a.kind == "attr" and a.value == "layers" and b.kind == "item" and isinstance(b.value, int):
            layer = b.value
    sliding = False
    if last not in ROLES and any(s.value == "attention_mask" for s in src.steps):
        sliding = last == "sliding_attention"
        last = "attention_mask"  # a dict of masks (sliding and full attention layers)
    if last not in ROLES:
        raise ValueError(
            f"calibration for kv_cache graphs: the graph takes {src.name}, which a prefill pass cannot "
            f"provide (known: {', '.join(ROLES)}); calibrate this model without kv_cache, or report it"
        )
    if last in ("keys", "values", "cumulative_length") and layer is None:
        raise ValueError(f"calibration for kv_cache graphs: {src.name} names no cache layer (layers[i])")
    return Input(last, layer, src.name, sliding)


def sequences(calibration: Any, tokenizer: Any = None) -> list[torch.Tensor]:
    """The calibration data as 1-D int64 token id tensors (ValueError naming what to change)."""
    if callable(calibration) and not isinstance(calibration, torch.Tensor):
        raise ValueError(
            "calibration for kv_cache graphs is token ids or text, not a callable: give "
            "[tensor of token ids, ...] or strings with options={'tokenizer': tokenizer}"
        )
    out = []
    for k, item in enumerate(calibration):
        if isinstance(item, str):
            if tokenizer is None:
                raise ValueError(
                    f"calibration sample {k} is text: pass the model's tokenizer too "
                    "(options={'tokenizer': AutoTokenizer.from_pretrained(...)}), or give token ids"
                )
            item = tokenizer(item, return_tensors="pt")["input_ids"]
        if isinstance(item, dict) and "input_ids" in item:
            item = item["input_ids"]
        t = torch.as_tensor(item)
        if t.dim() == 2 and t.shape[0] == 1:
            t = t[0]
        if t.dim() != 1 or t.dtype.is_floating_point or t.dtype == torch.bool:
            raise ValueError(
                f"calibration sample {k}: {tuple(t.shape)} {t.dtype}; for kv_cache graphs give token "
                "ids, one sequence per sample (a 1-D tensor, [1, n] or a list of ints), or text"
            )
        if t.numel() < 2:
            raise ValueError(f"calibration sample {k} has {t.numel()} token(s); give sequences of at least 2")
        out.append(t.to(torch.int64))
    if not out:
        raise ValueError("calibration: no samples; give a few dozen token sequences of the text the model sees")
    return out


def spread(last: int, positions: Optional[int], first: int = 1) -> list[int]:
    """Up to ``positions`` decode-step starts spread evenly over ``first..=last`` (every one with
    None; none if ``last`` is below ``first``)."""
    starts = range(first, last + 1)
    return evenly(starts, len(starts) if positions is None else positions)


@torch.no_grad()
def kv_rows(model: torch.nn.Module, seq: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every layer's (keys, values) after a causal float prefill of ``seq`` by ``model`` (its
    forward run eagerly even when compiled): [1, heads, n, dim], every row, sliding-window layers'
    too (a cache made without the model's config keeps them all; their masks still apply the
    window)."""
    from transformers import DynamicCache

    with torch.compiler.set_stance("force_eager"):
        out = model(input_ids=seq[None], past_key_values=DynamicCache(), use_cache=True)
    cache = out.past_key_values
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise ValueError(f"calibration for kv_cache graphs: the float prefill returned a {type(cache).__name__}, not a transformers Cache")
    return [(layer.keys, layer.values) for layer in layers]


class PrefillSamples:
    """Builds one graph's calibration samples from prefill passes of the float model."""

    def __init__(self, frame: Frame, args: Sequence[Any], per_call: Sequence[int]):
        model = frame.module() if frame.module is not None else None
        if model is None:
            raise ValueError(
                "calibration for kv_cache graphs runs the float model once per sequence, but the "
                "compiled function is not a module's forward: compile model.forward"
            )
        # Weakly: the samples (which the compiled graph keeps for its partitions) must not keep
        # the model alive, nor the call's own tensors (a KV cache): only their shapes and dtypes
        # are kept, as meta tensors.
        self.model = weakref.ref(model)
        self.index = [i for i in per_call if isinstance(args[i], torch.Tensor)]
        self.inputs = [_classify(frame.sources[i] if i < len(frame.sources) else None, i) for i in self.index]
        self.args = {i: torch.empty(args[i].shape, dtype=args[i].dtype, device="meta") for i in self.index}
        by_role = {x.role: args[i] for x, i in zip(self.inputs, self.index)}
        if "input_ids" not in by_role:
            raise ValueError("calibration for kv_cache graphs: the graph takes no input_ids (inputs_embeds?)")
        ids = by_role["input_ids"]
        if ids.dim() != 2 or ids.shape[0] != 1:
            raise ValueError(
                f"calibration for kv_cache graphs: input_ids is {tuple(ids.shape)}; quantized kv_cache "
                "graphs are calibrated for batch 1"
            )
        self.steps = int(ids.shape[1])
        caches = {x.layer: args[i].shape[-2] for x, i in zip(self.inputs, self.index) if x.role in ("keys", "values")}
        # Sliding-window layers (Gemma 2 and 3): transformers keeps their last ``window`` rows in a
        # cache of that length (shorter than the others'), written in place until it is full and
        # rolled by one row at every step after (StaticSlidingWindowLayer). Which of the two a
        # graph does was decided in Python when dynamo traced it, at the position of its first
        # call: its samples take the same branch (``rolling``), with the cache rows and the
        # window's mask that branch sees.
        full = max(caches.values(), default=None)
        self.sliding = {layer for layer, n in caches.items() if n < full}
        self.window: Optional[int] = None
        if self.sliding:
            self.window = caches[min(self.sliding)]
        elif any(x.sliding for x in self.inputs):
            w = getattr(getattr(model, "config", None), "sliding_window", None)
            self.window = int(w) if w else None
        first = next((args[i] for x, i in zip(self.inputs, self.index) if x.role in ("position_ids", "cache_position")), None)
        at = int(first.flatten()[0]) if first is not None and first.numel() else 0
        self.rolling = bool(self.sliding) and at >= self.window
        masks = [args[i].shape[-1] for x, i in zip(self.inputs, self.index) if x.role == "attention_mask" and not x.sliding]
        #: The positions a step may start at end where the smallest cache (or mask) ends; a graph
        #: without cache inputs is a prefill, which starts at 0.
        self.decode = bool(caches)
        room = [n for layer, n in caches.items() if layer not in self.sliding] + masks
        self.room = min(room) if room else None

    def starts(self, n: int, positions: Optional[int]) -> list[int]:
        """Where the steps of a sequence of ``n`` tokens start."""
        if not self.decode:
            return [0] if n >= self.steps else []
        last = n - self.steps
        if self.room is not None:
            last = min(last, self.room - self.steps)
        if self.sliding and not self.rolling:
            last = min(last, self.window - self.steps)  # before the window is full
        return spread(last, positions, first=self.window if self.rolling else 1)

    def prefill(self, seq: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        model = self.model()
        if model is None:
            raise ValueError("calibration for kv_cache graphs: the model was freed while compiling")
        return kv_rows(model, seq)

    def sample(self, seq: torch.Tensor, p: int, rows: list) -> tuple[torch.Tensor, ...]:
        """The graph's per-call tensors for the step of ``seq[p:p+T]`` after the prefix ``seq[:p]``."""
        t = self.steps
        pos = torch.arange(p, p + t)
        out = []
        for x, i in zip(self.inputs, self.index):
            want = self.args[i]
            if x.role == "input_ids":
                v = seq[p : p + t][None]
            elif x.role in ("position_ids", "cache_position"):
                v = pos.reshape(want.shape)
            elif x.role == "cumulative_length":
                v = torch.tensor(p)
            elif x.role == "attention_mask":
                # A rolled window's slot s holds position p - window + 1 + s (this step's row last).
                offset = p - self.window + 1 if self.rolling and x.sliding else 0
                v = _causal_mask(want, pos, self.window if x.sliding else None, offset)
            else:
                keys, values = rows[x.layer]
                src = keys if x.role == "keys" else values
                v = torch.zeros(want.shape, dtype=want.dtype)
                if self.rolling and x.layer in self.sliding:
                    v[..., : self.window, :] = src[..., p - self.window : p, :].to(want.dtype)
                else:
                    v[..., :p, :] = src[..., :p, :].to(want.dtype)
            out.append(v.to(want.dtype).reshape(want.shape))
        return tuple(out)

    def collect(self, seqs: Sequence[torch.Tensor], positions: Optional[int] = POSITIONS) -> tuple[Samples, int]:
        """The samples of every sequence (made when read: ``Samples``), and the number of prefill
        passes run."""
        keys, kept_seqs, kept_rows, prefills = [], [], [], 0
        for seq in seqs:
            starts = self.starts(int(seq.numel()), positions)
            if not starts:
                continue
            rows = []
            if self.decode:
                # Only the part of the sequence a step can see: a sliding-window layer's prefill
                # then keeps every row (and the rest would be computed for nothing).
                rows = self.prefill(seq[: starts[-1]])
                prefills += 1
                kept = min(k.shape[-2] for k, _ in rows)
                starts = [p for p in starts if p <= kept]
            keys.extend((len(kept_seqs), p) for p in starts)
            kept_seqs.append(seq)
            kept_rows.append(rows)

        def fingerprint(h) -> None:
            for i in self.index:
                h.update(repr((self.args[i].dtype, tuple(self.args[i].shape))).encode())
            h.update(repr([x.role for x in self.inputs]).encode())
            hash_prefills(h, kept_seqs, kept_rows)
            for seq in seqs:  # every sequence: GPTQ's Hessians read those this graph skips too
                h.update(seq.numpy().tobytes())

        samples = Samples(
            keys, lambda key: self.sample(kept_seqs[key[0]], key[1], kept_rows[key[0]]), fingerprint, (self.model, list(seqs)),
            [r for r in kept_rows if r],
        )
        if not samples:
            need = self.steps + 1 if self.decode else self.steps
            raise ValueError(
                f"calibration: no sequence is long enough for this graph ({self.steps} token(s) per "
                f"step{' after at least one cached token' if self.decode else ''}): give sequences of at "
                f"least {need} tokens"
            )
        return samples, prefills


def _causal_mask(want: torch.Tensor, pos: torch.Tensor, window: Optional[int] = None, offset: int = 0) -> torch.Tensor:
    """A mask like ``want`` (the call being compiled's) for queries at ``pos``: the key in slot s,
    at position j = offset + s, is visible to the query at position q when j <= q (and, for a
    sliding window, q - j < window: transformers' rule). Boolean masks are True where visible;
    float masks add 0 there and ``MASK_FLOOR`` elsewhere."""
    n = want.shape[-1]
    j = offset + torch.arange(n)[None, :]
    visible = j <= pos[:, None]  # [T, n]
    if window is not None:
        visible &= pos[:, None] - j < window
    if want.dtype == torch.bool:
        return visible.expand(want.shape)
    low = torch.tensor(MASK_FLOOR, dtype=want.dtype)
    return torch.where(visible, torch.zeros((), dtype=want.dtype), low).expand(want.shape)
