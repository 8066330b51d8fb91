"""Options of the "qnn" torch.compile backend: one frozen, documented dataclass."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sized
from typing import Any, Mapping, Optional, Union

from . import _native
from .exceptions import CacheError
from .quantization import config as quant_config

DEVICES = ("auto", "npu", "gpu", "cpu")
LOG_LEVELS = ("error", "warn", "info", "verbose", "debug")
EXPORTERS = ("torchscript", "dynamo")


@dataclasses.dataclass(frozen=True)
class QnnSettings:
    """Everything that controls how a graph is compiled and run.

    Options shared with the ``qnnx-backend`` 0.4 package keep its names, values and defaults.
    """

    device: str = "auto"
    """"auto" tries the NPU, then the GPU, then runs the original graph on the CPU; "npu",
    "gpu" and "cpu" pick one (with fallback to the CPU unless ``strict``)."""
    strict: bool = False
    """Raise instead of falling back to eager PyTorch when a graph cannot run on QNN."""
    fp16: bool = False
    """Store weights and activations as float16 inside the graph (graph inputs and outputs keep
    their dtype). FP16-capable HTPs compute float graphs in fp16 either way."""
    cache: bool = False
    """Keep compiled context binaries on disk and reuse them across processes."""
    cache_dir: Optional[str] = None
    """Cache folder; default $QNNX_CACHE_DIR, else the platform cache folder (XDG on Linux,
    LocalAppData on Windows)."""
    kv_cache: bool = False
    """Compile graphs that update their inputs in place (a Hugging Face ``StaticCache``): the
    graph runs in a functional form and the updates are replayed on the caller's tensors
    (see compiling.kvcache). Without it such graphs are refused (eager with a warning; strict:
    LoweringError), never run with the updates dropped."""
    soc_model: Optional[int] = None
    """Target SoC (Qnn_SocModel_t, e.g. 60 = SC8380XP) or a name ("SM8650"). Default: the
    device's own; SoC 60 on the x86_64 emulator."""
    htp_arch: Optional[int] = None
    """Minimum HTP architecture (68, 69, 73, 75, 79, 81, 85, 89: ``_native.htp_archs()``); with
    ``soc_model`` it must be that SoC's."""
    opt_level: Optional[int] = None
    """HTP finalize optimization 1 to 3: more compile time for a faster graph."""
    log_level: Optional[str] = None
    """QNN's own log level (error, warn, info, verbose, debug); default $QNN_LOG_LEVEL or warn."""
    exporter: str = "torchscript"
    """How FX graphs become ONNX: "torchscript" (about 10x faster) or "dynamo"."""
    dry_run: bool = False
    """Stop after checking support: log the summary (with the partitions a partly supported
    graph would get) and run eagerly."""
    min_partition_size: int = 3
    """Without ``strict``, a graph with nodes QNN cannot run is split: runs of supported FX
    nodes become QNN graphs, the rest runs eagerly. A run of fewer FX nodes than this stays
    eager: each QNN partition costs a graph execution and a copy of its inputs and outputs per
    call, more than one or two eager elementwise ops (see the README's "What runs where").
    A floor: ``partition_cost`` then weighs the runs that are long enough."""
    partition_cost: Union[str, float] = "measure"
    """The per-call cost (microseconds) a run of supported FX nodes must beat to become a QNN
    partition: its median eager time on the host, on the inputs it gets at the first call,
    must be above it, else it stays eager (its QNN call would cost at least that much, so it
    cannot be faster there; see partitioning.callcost). "measure" (the default) measures one QNN graph
    call on the backend once per process; a number fixes it (0 turns the rule off: every run
    of ``min_partition_size`` nodes is a partition). With ``cache``, the decision is stored
    with the split, and a warm start reuses it without measuring."""
    check_nan: bool = True
    """Refuse float inputs that contain NaN (QnnxError): the HTP computes in saturating fp16 and
    returns a finite number where eager PyTorch returns NaN. Costs one scan of each float input
    per call. Infinities are accepted and saturate to the fp16 range."""
    fix_inputs: Optional[Mapping[str, Any]] = None
    """Small tensor inputs fixed to a value at compile time, by name: a flag, a mode, a sample
    rate, a shape (``{"flag": True, "scale": 0.5, "size": [2, 3]}``; a bool, int, float, a list
    of them or a small tensor). A name is the ``forward`` argument's (``flag``), dynamo's
    placeholder for it (``l_flag_``) or the exported ONNX input (``input_1``). The input leaves
    the QNN graph: everything computed from it folds at compile time (an ``If`` on a flag takes
    its branch). It is still passed at each call and checked: another value raises
    ``InputError``. A name that is no input of a compiled graph (with graph breaks it may be
    another graph's) is ignored for that graph. Enters the cache key."""

    quantize: Optional[str] = None
    """Post-training quantization for the NPU: "8a8w" (uint8 activations, int8 weights),
    "16a8w" (uint16 activations), "16a16w" (int16 weights too, which v68 refuses for Conv),
    "16a4w" (uint16 activations, int4 weights: half the weight bytes of 16a8w) or None for a
    float graph. Needs ``calibration``. The calibrated encodings are part of the
    compiled model (and so of the cache keys). See the README's Quantization section."""
    calibration: Any = dataclasses.field(default=None, compare=False, repr=False)
    """With ``quantize``: the calibration data, read on the host with PyTorch once per compiled
    graph. An iterable of samples, each one call's arguments (a tensor, a tuple of positional
    arguments or a dict of keyword arguments), or a callable ``calibrate(forward)`` that calls
    ``forward(*args, **kwargs)`` like the model for each sample (see quantization.calibrate).
    With ``kv_cache``: token id sequences or text, each run once as a prefill
    (quantization.prefill)."""
    kv_cache_bits: int = 8
    """With ``quantize`` and ``kv_cache``: how the decode graph's KV cache is held between steps:
    8 (uint8 with one calibrated encoding per layer's keys and values; the new rows quantized in
    the graph, the cache never re-quantized from float: quantization.kv8) or 16 (the cache enters
    the graph as float and is quantized there with the scheme's activations)."""
    kv_cache_rotation: Optional[bool] = None
    """With ``kv_cache_bits=8``: each cached row is held times a randomized Hadamard matrix of the
    head size (rotated before it is quantized in the graph), which spreads the few wide key and
    value channels over all of them before one uint8 encoding per tensor covers them. The
    attention reads the rotated rows as they are (its queries rotated for the keys, its output
    rotated back for the values: quantization.kv8_rotation), a head-size product per head, layer
    and step; a graph of another shape rotates the whole cache back where it reads it. True:
    always (ValueError for a head size with no Hadamard matrix built); False: never; None (the
    default): wherever the head size has one, on HTP v73 and newer (QuantizeConfig.
    kv_cache_rotation: where it was measured to pay; docs/llm-accuracy.md)."""
    kv_cache_observer: str = "minmax"
    """With ``kv_cache_bits=8``: how the cache's encodings are fitted to the calibration prefills'
    rows: "minmax" (the default: the range covering every row) or "histogram" (the range with the
    least quantization error over their histogram, a few rare values clipped). The histogram's
    fit halves what the cache alone costs on the host, but on the HTP the whole quantized
    SmolLM2 does worse with it over a long text, so it is not the default
    (docs/llm-accuracy.md). quantization.kv8.encodings."""
    tokenizer: Any = dataclasses.field(default=None, compare=False, repr=False)
    """With ``quantize`` and ``kv_cache``: the model's tokenizer (a Hugging Face tokenizer, or any
    callable ``tokenizer(text, return_tensors="pt")["input_ids"]``), so that calibration can be
    text. KV-cache graphs calibrate on token sequences, each run once through a causal prefill
    (quantization.prefill)."""
    observer: str = "minmax"
    """How activation ranges are calibrated: "minmax" (running minimum and maximum) or
    "histogram" (the range that minimises the quantization error, robust to outliers)."""
    per_channel: bool = True
    """Weights quantized per output channel (else one scale per weight tensor)."""
    weight_rounding: str = "nearest"
    """How each weight takes its grid point: "nearest", or "gptq" (GPTQ: each layer's
    rounding errors are moved onto its weights not yet rounded, weighted by its calibration
    inputs, so that its output changes least; costs seconds per model on the host, e.g. 16 s
    for resnet18 at 128x128; see quantization.gptq and the README's Quantization section)."""
    activation_headroom: Optional[float] = None
    """16-bit activation encodings cover the calibrated range times this factor. None (the
    default): 2 for ``kv_cache`` graphs, whose per-token activation ranges the calibration text
    never covers (one of the 16 bits spent on the rest), 1 (exactly the calibrated range) for
    others, where that bit costs accuracy (docs/quantization.md, "Headroom"). 8-bit activations
    are never widened."""
    weight_block_size: Optional[int] = None
    """With ``quantize="16a4w"``: Linear/MatMul weights quantized per block of this many input
    features (32, 64, 128, ...) instead of per output channel: a float scale per output channel
    times a 4-bit integer scale per block (QNN's block expansion, "LPBQ"; HTP v69 and newer, a
    v68 target refuses it). Weights whose input size the block does not divide, and conv
    weights, stay per channel (see docs/quantization.md, "Block-wise 4-bit weights")."""
    quantize_modules: Optional[Mapping[str, Optional[str]]] = dataclasses.field(
        default=None, compare=False
    )
    """Per-module precision: {nn.Module path pattern (fnmatch, as model.named_modules() spells
    paths): scheme, or "float"}. The deepest matching module wins."""
    quantize_ops: Optional[Mapping[str, Optional[str]]] = dataclasses.field(
        default=None, compare=False
    )
    """Per-op precision: {op kind ("softmax", "layer_norm", "conv", ...; quantization.config.OP_KINDS):
    scheme, or "float"}. A module override wins over an op override."""
    quantize_values: Optional[Mapping[str, Optional[str]]] = dataclasses.field(
        default=None, compare=False
    )
    """Per-value precision: {value name: scheme, or "float"}, for the output of any op, functional
    ones included (``x * scale`` in a ``forward``). A value is named as torch.export names the FX
    node of its op (``mul``, ``linear_1``), as the per-layer report and the QDQ model name it; its
    producer and its readers run at the scheme's activation width. Wins over the module and op
    overrides for those ops (see quantization/config.py)."""
    target_sqnr_db: Optional[float] = None
    """With ``quantize="8a8w"``: automatic mixed precision. Values and modules are promoted to
    16-bit activations, fewest first, until every output on the first call's inputs is within
    this SQNR (dB) of the float graph on the target HTP; the chosen ``quantize_modules`` and
    ``quantize_values`` are logged to pin the result (see quantization/mixed.py, and
    ``qnnx_backend.mixed_precision`` to get them back)."""

    def compile_settings(self) -> dict:
        """The options that change the compiled binary (they enter the cache key)."""
        return {
            "fp16": self.fp16,
            "opt_level": self.opt_level,
            "exporter": self.exporter,
            "fix_inputs": tuple(sorted(fixed_values(self.fix_inputs).items())),
            "quantize": self._quantize_key() if self.quantize is not None else None,
        }

    def cache_folder(self) -> Optional[str]:
        """The context-binary cache folder, None without ``cache`` (CacheError when ``cache``
        is on and no folder is known)."""
        if not self.cache:
            return None
        d = self.cache_dir or _native.default_cache_dir()
        if d is None:
            raise CacheError("cache=True but no cache folder is known: set cache_dir or QNNX_CACHE_DIR")
        return str(d)

    def spec(self, device: str, *, cached: bool = True) -> "_native.Spec":
        """What the native module compiles and loads with on ``device``, built here once from
        these settings: the SoC and arch (on the HTP only: with device="auto" the GPU is opened
        with its defaults, and the native module refuses a SoC for it), ``fp16``,
        ``opt_level``, and with ``cached`` the cache folder."""
        npu = device == "npu"
        return _native.Spec(
            device,
            self.soc_model if npu else None,
            self.htp_arch if npu else None,
            self.fp16,
            self.opt_level,
            self.cache_folder() if cached else None,
        )

    def _quantize_key(self) -> str:
        d = self.quantize_config().describe()
        return d if self.target_sqnr_db is None else f"{d} target {float(self.target_sqnr_db)!r} dB"

    def quantize_config(self):
        """The quantization options as a ``quantization.config.QuantizeConfig`` (``quantize`` set)."""
        arch = None
        if self.soc_model is not None or self.htp_arch is not None:
            arch = _native.target_arch("npu", self.soc_model, self.htp_arch)
        return quant_config.config(
            str(self.quantize),
            self.observer,
            self.per_channel,
            self.quantize_modules,
            self.quantize_ops,
            arch,
            self.weight_rounding,
            self.quantize_values,
            self.weight_block_size,
            self.headroom(),
        )

    def kv_rotation(self) -> Optional[bool]:
        """``kv_cache_rotation``, or its default on this graph's HTP (QuantizeConfig.kv_cache_rotation)."""
        return self.quantize_config().kv_cache_rotation(self.kv_cache_rotation)

    def headroom(self) -> float:
        """``activation_headroom``, or its default for this graph (``kv_cache``: 2, else 1)."""
        if self.activation_headroom is not None:
            return self.activation_headroom
        return quant_config.DECODER_HEADROOM if self.kv_cache else 1.0


def fixed_value_text(name: str, value: Any) -> str:
    """``value`` as the native module (and the qnnx command's ``--fix-input``) spells it:
    ``true``, ``3``, ``0.5``, ``[1, 2, 3]``. Raises ValueError for anything else."""
    if hasattr(value, "tolist") and callable(value.tolist):  # torch.Tensor, numpy arrays
        value = value.tolist()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)) and all(
        isinstance(v, (bool, int, float)) and not isinstance(v, (list, tuple)) for v in value
    ):
        return "[" + ",".join(fixed_value_text(name, v) for v in value) + "]"
    raise ValueError(
        f"fix_inputs[{name!r}]={value!r}: use a bool, int, float, a flat list of them or a small tensor"
    )


def fixed_values(fix_inputs: Optional[Mapping[str, Any]]) -> dict[str, str]:
    """``fix_inputs`` with each value in the native module's spelling (``fixed_value_text``)."""
    return {str(k): fixed_value_text(str(k), v) for k, v in (fix_inputs or {}).items()}


VALID_OPTIONS = tuple(f.name for f in dataclasses.fields(QnnSettings))


def parse_options(options: Optional[Mapping[str, Any]]) -> QnnSettings:
    """Validates a torch.compile ``options`` dict. Unknown keys and bad values raise
    ``ValueError`` naming the valid ones."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(VALID_OPTIONS))
    if unknown:
        raise ValueError(
            f"unknown qnn backend option(s) {unknown}; valid options: {', '.join(VALID_OPTIONS)}"
        )
    s = QnnSettings(**options)
    if s.device not in DEVICES:
        raise ValueError(f"device={s.device!r}: use one of {DEVICES}")
    for name in ("strict", "fp16", "cache", "kv_cache", "dry_run", "check_nan"):
        if not isinstance(getattr(s, name), bool):
            raise ValueError(f"{name}={getattr(s, name)!r}: must be True or False")
    if isinstance(s.min_partition_size, bool) or not isinstance(s.min_partition_size, int) or s.min_partition_size < 1:
        raise ValueError(f"min_partition_size={s.min_partition_size!r}: must be an int of at least 1")
    check_partition_cost(s.partition_cost)
    if s.opt_level is not None and s.opt_level not in (1, 2, 3):
        raise ValueError(f"opt_level={s.opt_level!r}: must be 1, 2 or 3")
    if s.log_level is not None and str(s.log_level).lower() not in LOG_LEVELS:
        raise ValueError(f"log_level={s.log_level!r}: use one of {LOG_LEVELS}")
    if s.exporter not in EXPORTERS:
        raise ValueError(f"exporter={s.exporter!r}: use one of {EXPORTERS}")
    if s.cache_dir is not None and not isinstance(s.cache_dir, (str, os.PathLike)):
        raise ValueError(f"cache_dir={s.cache_dir!r}: must be a path")
    if s.fix_inputs is not None:
        if not isinstance(s.fix_inputs, Mapping) or not all(isinstance(k, str) and k for k in s.fix_inputs):
            raise ValueError(f"fix_inputs={s.fix_inputs!r}: must map input names to values")
        fixed_values(s.fix_inputs)
    if s.soc_model is not None or s.htp_arch is not None:
        if s.soc_model is not None and not isinstance(s.soc_model, (int, str)):
            raise ValueError(f"soc_model={s.soc_model!r}: a SoC number or name; known: {_native.known_socs()}")
        if s.htp_arch is not None and not isinstance(s.htp_arch, int):
            raise ValueError(f"htp_arch={s.htp_arch!r}: use one of {_native.htp_archs()}")
        try:
            # One resolution of names and numbers for every front end: unknown SoCs, unknown
            # architectures and a SoC whose arch is not htp_arch are refused by the native module.
            soc, arch = _native.resolve_target("npu", s.soc_model, s.htp_arch)
        except ValueError as e:
            raise ValueError(f"soc_model={s.soc_model!r}, htp_arch={s.htp_arch!r}: {e}") from None
        s = dataclasses.replace(s, soc_model=soc, htp_arch=arch)
    # After the target is checked: the quantizer's configuration reads its arch.
    _check_quantize(s, options)
    return s


def check_partition_cost(c: Any) -> None:
    """ValueError unless ``c`` is "measure" or a finite number of microseconds >= 0."""
    if isinstance(c, str) and c == "measure":
        return
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c < 0:
        raise ValueError(
            f"partition_cost={c!r}: use \"measure\" (measure one QNN call on the backend) or a "
            "number of microseconds >= 0 (0: no cost rule, only min_partition_size)"
        )


_QUANTIZE_OPTIONS = (
    "calibration",
    "observer",
    "per_channel",
    "weight_rounding",
    "weight_block_size",
    "activation_headroom",
    "quantize_modules",
    "quantize_ops",
    "quantize_values",
    "target_sqnr_db",
    "tokenizer",
    "kv_cache_bits",
    "kv_cache_rotation",
    "kv_cache_observer",
)


def check_target_sqnr_db(t: Any) -> None:
    """ValueError unless ``t`` is a finite number of dB (the mixed-precision target)."""
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
        raise ValueError(f"target_sqnr_db={t!r}: give a number of dB, such as 30")


def _check_quantize(s: QnnSettings, given: Mapping[str, Any]) -> None:
    if s.quantize is None:
        stray = [k for k in _QUANTIZE_OPTIONS if k in given]
        if stray:
            raise ValueError(
                f"{', '.join(stray)}: used only for a quantized graph; also pass quantize "
                "(\"8a8w\", \"16a8w\", \"16a16w\" or \"16a4w\")"
            )
        return
    s.quantize_config()  # raises ValueError naming a bad scheme, observer or override
    if s.target_sqnr_db is not None:
        check_target_sqnr_db(s.target_sqnr_db)
        if s.quantize != "8a8w":
            raise ValueError(
                f"target_sqnr_db promotes 8-bit activations to 16 bits: use it with quantize='8a8w', not {s.quantize!r}"
            )
    if s.calibration is None:
        raise ValueError(
            f"quantize={s.quantize!r} needs calibration data: pass calibration=[sample, ...] (each "
            "sample a tensor, a tuple of positional arguments or a dict of keyword arguments, "
            "like a call of the model) or a callable calibrate(forward)"
        )
    c = s.calibration
    if isinstance(c, (str, bytes)) or not (callable(c) or hasattr(c, "__iter__")):
        raise ValueError(
            f"calibration={type(c).__name__}: give an iterable of samples (a list, a DataLoader) or a "
            "callable calibrate(forward)"
        )
    if isinstance(c, Sized) and not callable(c) and len(c) == 0:
        raise ValueError("calibration is empty: give at least one sample, ideally a few dozen of the data the model sees")
    if s.device == "gpu":
        raise ValueError(
            f"quantize={s.quantize!r} compiles for the NPU (HTP): use device='npu' or 'auto', or "
            "drop quantize for the GPU"
        )
    if s.kv_cache and callable(c) and not hasattr(c, "__iter__"):
        raise ValueError(
            "quantize with kv_cache=True calibrates on text: give calibration=[token ids or strings, ...] "
            "(strings with options={'tokenizer': tokenizer}), not a callable"
        )
    if s.kv_cache_bits not in (8, 16) or isinstance(s.kv_cache_bits, bool):
        raise ValueError(f"kv_cache_bits={s.kv_cache_bits!r}: use 8 or 16")
    if s.kv_cache_rotation is not None and not isinstance(s.kv_cache_rotation, bool):
        raise ValueError(f"kv_cache_rotation={s.kv_cache_rotation!r}: use True, False or None (the default)")
    if s.kv_cache_rotation and (s.kv_cache_bits != 8 or not s.kv_cache):
        raise ValueError("kv_cache_rotation rotates the 8-bit KV cache: use it with kv_cache=True and kv_cache_bits=8")
    quant_config.check_observer("kv_cache_observer", s.kv_cache_observer)
    if s.kv_cache_observer != "minmax" and (s.kv_cache_bits != 8 or not s.kv_cache):
        raise ValueError("kv_cache_observer fits the 8-bit KV cache's encodings: use it with kv_cache=True and kv_cache_bits=8")
    if s.tokenizer is not None and not s.kv_cache:
        raise ValueError("tokenizer: used to tokenize calibration text for kv_cache=True graphs; also pass kv_cache=True")
