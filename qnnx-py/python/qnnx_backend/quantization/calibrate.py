"""Calibration data for quantization: from what the user gives (samples of the model's inputs)
to tuples of the graph's per-call inputs, checked against the signature being compiled.

The ``calibration`` option is either

* an iterable of samples (a list, a DataLoader, a generator; read once per compiled graph),
  each one call's arguments: a tensor (the only positional argument), a tuple or list (the
  positional arguments; wrap a list argument: ``([a, b],)``) or a dict (keyword arguments by
  name); or
* a callable ``calibrate(forward)`` that calls ``forward(*args, **kwargs)`` like the model, once
  per sample; ``forward`` runs the float graph and returns its outputs (a tuple of tensors).

torch.compile hands the backend a graph whose inputs dynamo took from the compiled frame's
arguments; each placeholder carries its source (``L['x']``, ``L['kwargs']['mask']``,
``L['batch'].pixel_values``). A sample is bound to the frame's signature and each source is
evaluated on it, so samples map to graph inputs whatever order dynamo lifted them in. Inputs
that do not come from the frame's arguments (globals) keep the value of the call being
compiled. A graph that starts after a graph break takes intermediate values that no sample
holds: it is refused with what to do.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import weakref
from typing import Any, Callable, Optional, Sequence

import torch

_RESUME_PREFIX = "torch_dynamo_resume_in_"


@dataclasses.dataclass(frozen=True)
class Step:
    kind: str
    """"item" (x[i]), "key" (x["k"]) or "attr" (x.k)."""
    value: Any


@dataclasses.dataclass(frozen=True)
class InputSource:
    """Where one graph input comes from: a frame argument and the steps into it, or None
    (``root``) for anything else (globals, closures)."""

    name: str
    """dynamo's spelling of the source, for messages."""
    root: Optional[str]
    steps: tuple[Step, ...] = ()
    mappable: bool = True
    """False when the source has a step this module cannot replay."""


def _source_of(src: Any) -> InputSource:
    from torch._dynamo import source as S

    name = src.name if isinstance(getattr(src, "name", None), str) else str(src)
    steps: list[Step] = []
    cur = src
    while True:
        if isinstance(cur, S.LocalSource):
            return InputSource(name, cur.local_name, tuple(reversed(steps)))
        if isinstance(cur, S.GetItemSource) and not cur.index_is_slice and isinstance(cur.index, (int, str)):
            steps.append(Step("item", cur.index))
        elif isinstance(cur, S.DictGetItemSource) and isinstance(cur.index, (int, str)):
            steps.append(Step("key", cur.index))
        elif isinstance(cur, S.AttrSource):
            steps.append(Step("attr", cur.member))
        elif isinstance(cur, S.ChainedSource):
            # Some other access into an argument: the input depends on the sample, but how is
            # not replayed here.
            inner = _source_of(cur.base)
            return dataclasses.replace(inner, name=name, mappable=False) if inner.root else InputSource(name, None)
        else:
            return InputSource(name, None)
        cur = cur.base


@dataclasses.dataclass(frozen=True)
class Frame:
    """What the backend learns about the compiled frame when dynamo calls it."""

    function: str
    signature: Optional[inspect.Signature]
    """The frame's parameters without ``self``; None when dynamo's frame was not found."""
    sources: tuple[Optional[InputSource], ...]
    """Per graph placeholder (None where dynamo recorded no source)."""
    resumed: bool
    """Whether the frame resumes after a graph break."""
    module: Optional[Callable[[], Any]] = None
    """A weak reference to the module whose method is compiled (``self`` of the frame), or
    None: KV-cache calibration runs its float forward (quantization.prefill)."""

    @staticmethod
    def capture(gm: torch.fx.GraphModule) -> "Frame":
        """Reads the placeholders' sources (``_dynamo_source``, which dynamo sets on every
        placeholder for backends) and the code dynamo is tracing. Call it from the backend."""
        sources = []
        for node in gm.graph.nodes:
            if node.op != "placeholder":
                continue
            src = getattr(node, "_dynamo_source", None)
            sources.append(_source_of(src) if src is not None else None)
        code, f_locals = _current_code()
        signature = _signature(code, f_locals) if code is not None else None
        function = code.co_name if code is not None else "?"
        owner = f_locals.get("self")
        module = weakref.ref(owner) if isinstance(owner, torch.nn.Module) else None
        return Frame(function, signature, tuple(sources), function.startswith(_RESUME_PREFIX), module)


def _current_code() -> tuple[Any, dict]:
    """The code object dynamo is compiling, and the frame's locals (to tell an nn.Module's
    ``self`` apart). Internal to dynamo; (None, {}) if it moved."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        tx = InstructionTranslator.current_tx()
        return tx.f_code, dict(getattr(tx, "f_locals", {}) or {})
    except (ImportError, AttributeError, RuntimeError):
        return None, {}


def _signature(code: Any, f_locals: dict) -> inspect.Signature:
    names = code.co_varnames
    n_pos = code.co_argcount
    n_posonly = code.co_posonlyargcount
    n_kwonly = code.co_kwonlyargcount
    params = []
    # Defaults are not in the code object: every parameter may be left out; a graph input
    # whose argument a sample lacks is reported when it is needed.
    for i in range(n_pos):
        kind = inspect.Parameter.POSITIONAL_ONLY if i < n_posonly else inspect.Parameter.POSITIONAL_OR_KEYWORD
        params.append(inspect.Parameter(names[i], kind, default=_MISSING))
    i = n_pos + n_kwonly
    if code.co_flags & inspect.CO_VARARGS:
        params.append(inspect.Parameter(names[i], inspect.Parameter.VAR_POSITIONAL))
        i += 1
    for j in range(n_pos, n_pos + n_kwonly):
        params.append(inspect.Parameter(names[j], inspect.Parameter.KEYWORD_ONLY, default=_MISSING))
    if code.co_flags & inspect.CO_VARKEYWORDS:
        params.append(inspect.Parameter(names[i], inspect.Parameter.VAR_KEYWORD))
    # A method of a module: the module is not part of the samples.
    if params and params[0].kind != inspect.Parameter.VAR_POSITIONAL and isinstance(
        f_locals.get(params[0].name), torch.nn.Module
    ):
        params = params[1:]
    return inspect.Signature(params)


def _params(sig: inspect.Signature) -> str:
    prefix = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return ", ".join(prefix.get(p.kind, "") + p.name for p in sig.parameters.values())


class _Missing:
    def __repr__(self) -> str:
        return "<not given>"


_MISSING = _Missing()


def _describe(sample: Any) -> str:
    if isinstance(sample, torch.Tensor):
        return f"tensor {tuple(sample.shape)} {sample.dtype}"
    return type(sample).__name__


def _as_call(sample: Any) -> tuple[tuple, dict]:
    if isinstance(sample, torch.Tensor):
        return (sample,), {}
    if isinstance(sample, (tuple, list)):
        return tuple(sample), {}
    if isinstance(sample, dict):
        if not all(isinstance(k, str) for k in sample):
            raise ValueError("calibration: a dict sample must map argument names (str) to values")
        return (), dict(sample)
    raise ValueError(
        f"calibration: a sample is a {_describe(sample)}; give a tensor (the only positional "
        "argument), a tuple of positional arguments or a dict of keyword arguments"
    )


class Mapper:
    """Turns one call's arguments into the graph's per-call tensors, checked against ``args``
    (the arguments of the call being compiled)."""

    def __init__(self, frame: Frame, args: Sequence[Any], per_call: Sequence[int]):
        if frame.resumed:
            raise ValueError(
                f"calibration: this graph starts after a graph break in {frame.function[len(_RESUME_PREFIX):]}: "
                "its inputs are values computed by the code before the break, which calibration "
                "samples (the model's inputs) do not hold. Quantization needs the whole model in one "
                "graph: remove the graph break (torch._dynamo.explain(model)(*inputs) lists them; "
                "fullgraph=True makes torch.compile raise at it)"
            )
        self.frame = frame
        self.args = args
        self.per_call = [i for i in per_call if isinstance(args[i], torch.Tensor)]
        self.sources = [frame.sources[i] if i < len(frame.sources) else None for i in self.per_call]
        from_frame = [s for s in self.sources if s is not None and s.root is not None]
        for s in from_frame:
            if not s.mappable:
                raise ValueError(
                    f"calibration: graph input {s.name} is read from argument {s.root!r} in a way "
                    "this backend cannot replay on a sample; pass that tensor as an argument of its own"
                )
        self.roots = sorted({s.root for s in from_frame if s.root is not None})

    def _bind(self, args: tuple, kwargs: dict, where: str) -> dict:
        sig = self.frame.signature
        if sig is None:
            # dynamo's frame is unknown: keyword samples map by name; positional ones only when
            # the graph reads a single argument.
            if kwargs and not args:
                return dict(kwargs)
            if len(args) == 1 and not kwargs and len(self.roots) == 1:
                return {self.roots[0]: args[0]}
            raise ValueError(
                f"calibration: {where}: the compiled function's signature is unknown here; give "
                "samples as dicts {argument name: value}"
            )
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise ValueError(f"calibration: {where} does not fit {self.frame.function}({_params(sig)}): {e}") from None
        return dict(bound.arguments)

    def inputs(self, args: tuple, kwargs: dict, where: str) -> tuple[torch.Tensor, ...]:
        """The per-call tensors for one call, as the compiled graph takes them."""
        local = self._bind(args, kwargs, where)
        out = []
        for i, src in zip(self.per_call, self.sources):
            want = self.args[i]
            if src is None or src.root is None:
                out.append(want)
                continue
            value = local.get(src.root, _MISSING)
            label = src.root
            for step in src.steps:
                if value is _MISSING:
                    break
                try:
                    if step.kind == "attr":
                        value = getattr(value, step.value)
                        label += f".{step.value}"
                    else:
                        value = value[step.value]
                        label += f"[{step.value!r}]"
                except (KeyError, IndexError, AttributeError, TypeError):
                    value = _MISSING
            if value is _MISSING:
                raise ValueError(
                    f"calibration: {where} has no value for {label} (graph input {src.name}); every "
                    "sample must give the inputs the model is called with"
                )
            if not isinstance(value, torch.Tensor):
                raise ValueError(
                    f"calibration: {where}: {label} is a {type(value).__name__}; the compiled graph "
                    f"takes a tensor {tuple(want.shape)} {want.dtype} there"
                )
            if tuple(value.shape) != tuple(want.shape) or value.dtype != want.dtype:
                raise ValueError(
                    f"calibration: {where}: {label} is {tuple(value.shape)} {value.dtype}, but this "
                    f"graph is compiled for {tuple(want.shape)} {want.dtype}. Give samples of the shape "
                    "and dtype the model is called with (quantized graphs are compiled per input shape)"
                )
            out.append(value.detach())
        return tuple(out)


def collect(
    calibration: Any,
    mapper: Mapper,
    run_float: Callable[[tuple], Any],
) -> list[tuple[torch.Tensor, ...]]:
    """Every calibration sample as per-call tensors. ``run_float`` runs the float graph on them
    (the value ``forward`` returns to a calibration callable). ValueError for anything that
    does not fit, naming the sample and what to change."""
    samples: list[tuple[torch.Tensor, ...]] = []
    if callable(calibration) and not isinstance(calibration, torch.Tensor):

        def forward(*args, **kwargs):
            inputs = mapper.inputs(args, kwargs, f"call {len(samples)} of forward")
            samples.append(inputs)
            return run_float(inputs)

        with torch.no_grad():
            calibration(forward)
    else:
        try:
            it = iter(calibration)
        except TypeError:
            raise ValueError(
                f"calibration={calibration!r}: give an iterable of samples or a callable "
                "calibrate(forward)"
            ) from None
        for k, sample in enumerate(it):
            args, kwargs = _as_call(sample)
            samples.append(mapper.inputs(args, kwargs, f"sample {k}"))
    if not samples:
        raise ValueError(
            "calibration: no samples"
            + (" (the callable never called forward)" if callable(calibration) else " (the iterable is empty or exhausted)")
            + "; give at least one example input, ideally a few dozen of the data the model sees"
        )
    return samples


def digest(samples: Sequence[Sequence[torch.Tensor]]) -> str:
    """sha256 over the samples' dtypes, shapes and bytes: the calibration part of a warm-start
    fingerprint (the encodings are a function of it, the graph and the settings). Samples made
    on demand (``prefill.Samples``) hash what they are made from instead."""
    own = getattr(samples, "digest", None)
    if callable(own):
        return own()
    h = hashlib.sha256()
    for sample in samples:
        h.update(b"sample")
        for t in sample:
            t = t.detach().contiguous().cpu()
            h.update(repr((t.dtype, tuple(t.shape))).encode())
            if t.numel():
                h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def evenly(items: Sequence[Any], k: int) -> list:
    """At most ``k`` of ``items``, spread evenly from the first to the last (all of them when
    there are ``k`` or fewer)."""
    n = len(items)
    if n <= k:
        return list(items)
    return [items[round(j * (n - 1) / max(k - 1, 1))] for j in range(k)]
