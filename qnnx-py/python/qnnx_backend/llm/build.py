"""Building an LLM artifact: a folder that ``qnnx generate`` (and ``qnnx_engine::llm::Artifact``)
opens without Python. Layout (docs/llm.md):

* ``manifest.json``: format, model shape, cache layout and dtype, graphs with their I/O (dtypes,
  shapes, encodings), prefill buckets, special and stop tokens, target SoC, QNN build, qnnx
  version, and the size and sha256 of every other file;
* ``decode.qnnx`` and ``prefill-<N>.qnnx``: one saved model (``qnnx_engine::saved``) per graph,
  each with its own copy of the weights (the default, ``contexts="per-graph"``); or
  ``model.qnnx``, every graph in one context (``one``), with HTP weight sharing storing the
  weights once (``shared``), which only a device library loads: the x86_64 HTP library refuses
  weight-shared contexts (docs/llm.md, "Prefill and decode graphs in one context");
* ``tokenizer.json`` (Hugging Face ``tokenizers``) and ``chat_template.jinja`` (when the model
  has one).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch

from .. import _native
from ..buildcache import sha256_file
from ..quantization import config as quant_config
from ..quantization import rotation
from . import export, quantized
from . import shards as shards_

#: The manifest's ``format``; ``qnnx_engine::llm`` refuses another.
FORMAT = "qnnx-llm/1"
#: How the graphs are put in contexts (``build_from``).
CONTEXTS = ("per-graph", "one", "shared")


def split_calibration(text: str) -> list[str]:
    """The samples of a calibration file (``build --calibration``): its paragraphs, separated by
    blank lines."""
    return [s.strip() for s in text.split("\n\n") if s.strip()]


def load_source(source: str) -> tuple[torch.nn.Module, Any]:
    """The float32 model (eager attention) and tokenizer of a ``from_pretrained`` folder or a
    GGUF file (its weights dequantized to float32). Offline: nothing is downloaded."""
    import transformers  # the builder's own dependency; the package does not need it

    path = Path(source)
    kw: dict[str, Any] = {}
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ValueError(f"{source}: a model is a from_pretrained folder or a .gguf file")
        folder, kw["gguf_file"] = str(path.parent), path.name
    elif path.is_dir():
        folder = str(path)
    else:
        raise FileNotFoundError(f"{source}: no such file or folder")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True, **kw)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, local_files_only=True, dtype=torch.float32, **kw
    )
    model.config._attn_implementation = "eager"
    return model.eval(), tokenizer


def special_tokens(model: torch.nn.Module, tokenizer: Any) -> dict[str, Any]:
    """BOS, EOS and the stop tokens (the generation config's EOS ids and the tokenizer's)."""
    stop: list[int] = []
    gen = getattr(model, "generation_config", None)
    for ids in (getattr(gen, "eos_token_id", None), tokenizer.eos_token_id):
        for i in ids if isinstance(ids, (list, tuple)) else [ids]:
            if i is not None and int(i) not in stop:
                stop.append(int(i))
    if not stop:
        raise ValueError("the model and tokenizer name no EOS token: generation could not stop")
    return {"bos": tokenizer.bos_token_id, "eos": stop[0], "stop": stop, "pad": tokenizer.pad_token_id}


def _graph_io(saved: dict, index: int, layers: int) -> dict[str, Any]:
    """A saved graph's I/O in the manifest's order, the ONNX model's (``export.io_names``): the
    saved graph lists them in QNN's order (that of tensor creation, which a quantized graph's
    cache outputs can lead)."""
    g = saved["graphs"][index]
    names_in, names_out = export.io_names(layers)

    def side(ts: list, names: list[str]) -> list[dict]:
        by = {t["name"]: {k: t[k] for k in ("name", "dtype", "dims", "encoding")} for t in ts}
        return [by[n] for n in names if n in by] + [v for n, v in by.items() if n not in names]

    return {"inputs": side(g["inputs"], names_in), "outputs": side(g["outputs"], names_out)}


def _cache_inputs(graphs: list[dict], layers: int) -> list[dict]:
    """The cache inputs in ``past_key_0, past_value_0, ...`` order, from the graphs of one step
    (each shard takes its own layers'; a saved graph lists its I/O in QNN's order, not the ONNX
    model's)."""
    by_name = {i["name"]: i for g in graphs for i in g["inputs"]}
    return [by_name[n] for n in export.io_names(layers)[0][3:]]


def _graph_maker(
    model: torch.nn.Module,
    tokenizer: Any,
    cache_len: int,
    soc_model: int,
    quantize: Optional[str],
    calibration: Any,
    kv_cache_bits: int,
    progress: Callable[[str], None],
    quantize_modules: Optional[dict] = None,
    kv_cache_rotation: Optional[bool] = None,
    kv_cache_observer: str = "minmax",
) -> tuple[Callable[[export.DecoderStep], tuple[bytes, dict]], dict]:
    """The function making each graph's ONNX model (float, or quantized on the calibration run
    here once), and what the manifest says of the quantization."""
    if quantize is None:
        if calibration is not None or quantize_modules or kv_cache_rotation:
            given = "calibration" if calibration is not None else "quantize_modules" if quantize_modules else "kv_cache_rotation"
            raise ValueError(f"{given} is given without quantize: name a scheme such as quantize='16a8w'")
        return (lambda step: (export.onnx_bytes(step), {})), {}
    if kv_cache_bits not in (8, 16):
        raise ValueError(f"kv_cache_bits={kv_cache_bits}: use 8 (uint8 codes) or 16")
    if kv_cache_rotation and kv_cache_bits != 8:
        raise ValueError("kv_cache_rotation rotates the 8-bit KV cache's rows: use it with kv_cache_bits=8")
    quant_config.check_observer("kv_cache_observer", kv_cache_observer)
    if calibration is None:
        raise ValueError("quantize needs calibration: strings of the text the model sees (a few dozen), or token ids")
    cfg = quantized.config(quantize, soc_model)
    # Checked before anything is calibrated: each override's scheme, and that its pattern names a
    # module of the model. Each graph gets the overrides in its own paths (make, below).
    quantized.config(quantize, soc_model, quantize_modules)
    quantized.step_modules(model, model, quantize_modules)
    progress(f"calibrating: float prefills of {len(calibration)} sequence(s)")
    calib = quantized.Calibration.run(model, calibration, tokenizer, cache_len)
    cache = None
    info = {"quantization": {"scheme": quantize, "kv_cache_bits": kv_cache_bits, "calibration_sequences": len(calib.seqs),
                             "calibration_prefill_s": round(calib.seconds, 2)}}
    if kv_cache_bits == 8:
        cache = calib.cache_encodings(cfg.kv_cache_rotation(kv_cache_rotation), kv_cache_observer)
        info["quantization"]["kv_cache_observer"] = kv_cache_observer
    if cache and any(e.rotation is not None for e in cache):
        # The host copies the codes and never reads them: a note for people, not for the runner.
        info["quantization"]["kv_cache_rotation"] = "randomized Hadamard, seed 0 (quantization.kv8.rotation_matrix)"
    if quantize_modules:
        info["quantization"]["quantize_modules"] = dict(quantize_modules)

    def make(step: export.DecoderStep) -> tuple[bytes, dict]:
        own = quantized.step_modules(model, step, quantize_modules)
        step_cfg = quantized.config(quantize, soc_model, own) if own else cfg
        data, seconds = quantized.graph_onnx(step, calib, step_cfg, cache, progress)
        return data, {"quantize_s": {k: round(v, 2) for k, v in seconds.items()}, "calibration_samples": calib.counts[step.tokens]}

    return make, info


def build_from(
    model: torch.nn.Module,
    tokenizer: Any,
    output: os.PathLike | str,
    *,
    soc_model: int = 60,
    cache_len: int = 256,
    prefill: Sequence[int] = (32,),
    source: str = "",
    keep_onnx: bool = False,
    contexts: str = "per-graph",
    quantize: Optional[str] = None,
    calibration: Any = None,
    kv_cache_bits: int = 8,
    quantize_modules: Optional[dict] = None,
    rotate: bool = False,
    kv_cache_rotation: Optional[bool] = None,
    kv_cache_observer: str = "minmax",
    progress: Callable[[str], None] = lambda _: None,
    shards: int = 1,
    jobs: int = 1,
    max_memory: Optional[int] = None,
    cache_dir: Optional[str] = None,
    opt_level: Optional[int] = None,
) -> dict:
    """Writes the artifact of ``model`` (a float32 Hugging Face decoder) and ``tokenizer`` (a
    fast tokenizer) to the folder ``output`` (replaced if it is an artifact, refused if it is
    another non-empty folder) and returns its manifest. Graphs are compiled in fp16 for the HTP
    of ``soc_model``; the cache holds ``cache_len`` positions (prompt plus new tokens).
    ``contexts``: ``per-graph`` (a saved model per graph, each with its weights: what the x86_64
    emulator runs), ``one`` (every graph in one context of ``model.qnnx``, weights still per
    graph) or ``shared`` (one context with HTP weight sharing, weights stored once: only a
    device library loads it). ``quantize`` (``"16a8w"``, ``"16a4w"``, ...): quantized graphs
    calibrated in prefill mode on ``calibration`` (strings through ``tokenizer``, or token id
    sequences), with the KV cache held at ``kv_cache_bits`` (8: uint8 codes; 16: float on the
    host) (``llm/quantized.py``); ``quantize_modules`` overrides the scheme per module, paths as
    ``model.named_modules()`` spells them (``decoder_recipe(...).options(keep)``'s).
    ``rotate``: the model's residual stream and value heads are rotated first, in place
    (``rotate_decoder``, docs/llm.md: it pays with 16-bit weights); the manifest records it.
    ``kv_cache_rotation``: the 8-bit cache's rows are held times a randomized Hadamard matrix
    (``quantization.kv8``; inside the graphs, so the host still copies codes): True, False, or
    None (the default) as ``torch.compile``'s option has it (``QnnSettings.kv_cache_rotation``:
    on v73 and newer). ``kv_cache_observer``: how the 8-bit cache's encodings are fitted to the
    calibration rows, "minmax" (the default) or "histogram" (``QnnSettings.kv_cache_observer``).

    ``opt_level``: QNN's graph optimization level (1 to 3; None is QNN's default, 2), for every
    graph. ``shards``, ``jobs``, ``max_memory``, ``cache_dir``: each graph split into ``shards``
    graphs of consecutive layers, compiled in child processes, up to ``jobs`` at once within
    ``max_memory`` bytes (default 80% of the available memory), keeping finished graphs in the
    cache folder ``cache_dir`` (a build killed midway resumes from them)
    (``shards.build_graphs``, docs/building.md). Any of them given, the build takes that path
    (``per-graph`` contexts only)."""
    if contexts not in CONTEXTS:
        raise ValueError(f"contexts {contexts!r}: one of {', '.join(CONTEXTS)}")
    shape = export.Shape.of(model)
    buckets = sorted({int(n) for n in prefill})
    if not buckets or buckets[0] < 2:
        raise ValueError(f"prefill buckets {list(prefill)}: give at least one length of 2 or more tokens")
    if cache_len < buckets[-1] + 1:
        raise ValueError(f"cache_len {cache_len} must exceed the longest prefill bucket {buckets[-1]}")
    if shape.max_positions and cache_len > shape.max_positions:
        raise ValueError(f"cache_len {cache_len} exceeds the model's {shape.max_positions} positions")
    out = Path(output)
    if out.exists() and any(out.iterdir()) and not (out / "manifest.json").exists():
        raise FileExistsError(f"{out} is a non-empty folder that is not an LLM artifact; choose another -o")
    spec = _native.Spec("npu", soc_model, None, True, opt_level)
    if quantize is None and not spec.float_path:
        # Before the first export: the compile would refuse the float graph minutes later.
        raise ValueError(
            f"{spec.describe()} has no float path (its HTP runs quantized graphs only), so an fp16 "
            "artifact cannot run there: build a quantized one with --quantize 16a8w --calibration "
            "FILE (Python: quantize='16a8w', calibration=[texts]), or target an FP16-capable SoC"
        )
    started = time.perf_counter()
    precision = quantize or "fp16"
    options = {"precision": precision, "soc_model": str(soc_model), "contexts": contexts}
    if opt_level is not None:
        options["opt_level"] = str(opt_level)
    in_children = shards > 1 or jobs > 1 or any(x is not None for x in (max_memory, cache_dir))
    if in_children and quantize is not None:
        raise ValueError(
            "quantize with shards, jobs, max_memory or a cache is not built yet: the child "
            "processes compile fp16 graphs; build a quantized artifact in one process"
        )
    if in_children and contexts != "per-graph":
        raise ValueError(f"shards, jobs or a cache build per-graph contexts, not {contexts!r}")
    rotated = None
    if rotate:
        # Before calibration (the encodings are the rotated model's); an unsupported family is
        # refused before the model changes.
        r = rotation.rotate_decoder(model)
        rotated = {"residual": r.kind, "hidden": r.hidden, "value_heads": r.head_kind, "seed": 0}
    # Before the folder is made: a bad option or calibration leaves nothing behind.
    make_onnx, quant_info = _graph_maker(
        model, tokenizer, cache_len, soc_model, quantize, calibration, kv_cache_bits, progress, quantize_modules,
        kv_cache_rotation, kv_cache_observer,
    )
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        kinds = [("decode", 1)] + [("prefill", n) for n in buckets]
        graphs, pending, saved = [], [], None
        figures = None
        if in_children:
            graphs, saved, figures = shards_.build_graphs(
                model, tmp, kinds, cache_len, soc_model=soc_model, options=options, shards=shards, jobs=jobs,
                max_memory=max_memory, cache_dir=cache_dir, opt_level=opt_level, keep_onnx=keep_onnx, progress=progress,
            )  # fmt: skip
            kinds = []
        for kind, tokens in kinds:
            name = "decode" if kind == "decode" else f"prefill-{tokens}"
            progress(f"exporting {name}")
            t0 = time.perf_counter()
            onnx, stages = make_onnx(export.DecoderStep(model, cache_len, tokens))
            entry = {"name": name, "kind": kind, "tokens": tokens, "export_s": round(time.perf_counter() - t0, 2), **stages}
            if keep_onnx:
                (tmp / f"{name}.onnx").write_bytes(onnx)
            if contexts == "per-graph":
                progress(f"compiling {name} ({len(onnx) / 1e6:.0f} MB of ONNX)")
                t0 = time.perf_counter()
                compiled = _native.compile(onnx, spec, name=name)
                entry["compile_s"] = round(time.perf_counter() - t0, 2)
                del onnx
                entry["file"] = f"{name}.qnnx"
                saved = json.loads(_native.save(compiled, str(tmp / entry["file"]), options, {}))
                del compiled
                graphs.append({**entry, **_graph_io(saved, 0, shape.layers)})
            else:
                pending.append(onnx)
                graphs.append(entry)
        if contexts != "per-graph":
            progress(f"compiling {len(pending)} graphs into one context" + (" with shared weights" if contexts == "shared" else ""))
            t0 = time.perf_counter()
            compiled = _native.compile_many(pending, [g["name"] for g in graphs], spec, weight_sharing=contexts == "shared")
            del pending
            saved = json.loads(_native.save_many(compiled, str(tmp / "model.qnnx"), options, {}))
            del compiled
            for i, g in enumerate(graphs):
                g.update(file="model.qnnx", **_graph_io(saved, i, shape.layers))
            graphs[0]["compile_s"] = round(time.perf_counter() - t0, 2)
        build_id, qnnx_version, htp_arch = saved["qnn_build_id"], saved["qnnx_version"], saved.get("htp_arch")
        tokenizer.backend_tokenizer.save(str(tmp / "tokenizer.json"))
        template = tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else None
        if template:
            (tmp / "chat_template.jinja").write_text(template)
        files = sorted(p.name for p in tmp.iterdir() if p.suffix != ".onnx")
        cache_io = _cache_inputs([g for g in graphs if g["kind"] == graphs[0]["kind"] and g["tokens"] == graphs[0]["tokens"]], shape.layers)
        manifest = {
            "format": FORMAT,
            "qnnx_version": qnnx_version,
            "source": source,
            "model": {"family": shape.family, **{k: v for k, v in vars(shape).items() if k != "family"}},
            "precision": precision,
            **quant_info,
            **({"rotation": rotated} if rotated else {}),
            "target": {"backend": "htp", "soc_model": soc_model, "htp_arch": htp_arch, "qnn_build_id": build_id},
            "cache": {
                "length": cache_len,
                "layout": "[1, kv_heads, length, head_dim] per layer and per K/V; keys after the rotary "
                "embedding; slot p holds position p"
                + ("; each row held times an orthogonal matrix (quantization.kv_cache_rotation)"
                   if "kv_cache_rotation" in quant_info.get("quantization", {}) else ""),
                "dtype": cache_io[0]["dtype"],
                # One encoding per cache tensor (past_key_0, past_value_0, ...) when quantized.
                "encoding": [i["encoding"] for i in cache_io] if quantize else cache_io[0]["encoding"],
            },
            "attention_mask": {"kind": "additive", "masked": quantized.MASKED if quantize else export.MASKED},
            "prefill_buckets": buckets,
            "contexts": contexts,
            **({"shards": shards, "build": figures} if figures else {}),
            "graphs": graphs,
            "tokens": special_tokens(model, tokenizer),
            "tokenizer": "tokenizer.json",
            "chat_template": "chat_template.jinja" if template else None,
            "build_s": round(time.perf_counter() - started, 1),
            "files": {n: {"size": (tmp / n).stat().st_size, "sha256": sha256_file(tmp / n)} for n in files},
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    except BaseException:
        # A failed build leaves no work folder behind (GBs of graphs) and an artifact already at
        # ``out`` untouched. (A killed build leaves the work folder, which the next build
        # empties; sharded builds resume from ``cache_dir``.)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return manifest


def build(
    source: str,
    output: os.PathLike | str,
    *,
    soc_model: int = 60,
    cache_len: int = 256,
    prefill: Sequence[int] = (32,),
    keep_onnx: bool = False,
    contexts: str = "per-graph",
    quantize: Optional[str] = None,
    calibration: Any = None,
    kv_cache_bits: int = 8,
    quantize_modules: Optional[dict] = None,
    rotate: bool = False,
    kv_cache_rotation: Optional[bool] = None,
    kv_cache_observer: str = "minmax",
    progress: Optional[Callable[[str], None]] = None,
    **children: Any,
) -> dict:
    """``build_from`` for a ``from_pretrained`` folder or GGUF file (``load_source``);
    ``children`` are ``build_from``'s ``shards``, ``jobs``, ``max_memory``, ``cache_dir`` and
    ``opt_level``."""
    say = progress or (lambda _: None)
    say(f"loading {source}")
    model, tokenizer = load_source(source)
    return build_from(
        model,
        tokenizer,
        output,
        soc_model=soc_model,
        cache_len=cache_len,
        prefill=prefill,
        source=str(source),
        keep_onnx=keep_onnx,
        contexts=contexts,
        quantize=quantize,
        calibration=calibration,
        kv_cache_bits=kv_cache_bits,
        quantize_modules=quantize_modules,
        rotate=rotate,
        kv_cache_rotation=kv_cache_rotation,
        kv_cache_observer=kv_cache_observer,
        progress=say,
        **children,
    )
