"""``python -m qnnx_backend.llm build MODEL -o ARTIFACT [--soc 60] [--cache-len 256] [--prefill 32]``:
the one command that makes an LLM artifact for ``qnnx generate`` (docs/llm.md)."""

from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    from ..quantization import config as quant_config

    p = argparse.ArgumentParser(prog="python -m qnnx_backend.llm", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build an LLM artifact from a Hugging Face folder or a GGUF file")
    b.add_argument("model", help="a from_pretrained folder or a .gguf file (read offline)")
    b.add_argument("-o", "--output", required=True, help="the artifact folder to write")
    b.add_argument("--soc", type=int, default=60, help="the target SoC model number (default 60)")
    b.add_argument("--cache-len", type=int, default=256, help="positions the KV cache holds: prompt plus new tokens")
    b.add_argument(
        "--prefill", default="32", help="prefill bucket lengths in tokens, comma-separated (default 32)"
    )
    b.add_argument("--keep-onnx", action="store_true", help="leave the exported ONNX graphs in the folder")
    b.add_argument(
        "--contexts",
        choices=("per-graph", "one", "shared"),
        default="per-graph",
        help="per-graph: a context per graph, each with its weights (runs on the x86_64 emulator); one: "
        "every graph in one context; shared: one context with the weights stored once (devices only)",
    )
    b.add_argument("--quantize", help="a quantization scheme (16a8w, 16a4w, 8a8w, 16a16w); default fp16 graphs")
    b.add_argument(
        "--calibration",
        help="with --quantize: a UTF-8 text file of calibration samples, separated by blank lines "
        "(a few dozen paragraphs of the text the model will see)",
    )
    b.add_argument("--kv-cache-bits", type=int, choices=(8, 16), default=8, help="with --quantize: the KV cache's width")
    b.add_argument(
        "--kv-cache-rotation",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --quantize and an 8-bit cache: hold each cached row times a randomized Hadamard matrix, "
        "which spreads the few wide key and value channels before the 8-bit encoding covers them "
        "(default: on HTP v73 and newer; docs/llm.md)",
    )
    b.add_argument(
        "--kv-cache-observer",
        choices=quant_config.OBSERVERS,
        default="minmax",
        help="with --quantize and an 8-bit cache: how its encodings are fitted to the calibration rows "
        "(minmax: covering every row; histogram: the least quantization error, docs/llm-accuracy.md)",
    )
    b.add_argument(
        "--quantize-modules",
        metavar="JSON",
        help="with --quantize: per-module schemes, a JSON object or a file holding one, such as "
        '\'{"model.layers.11.mlp.down_proj": "16a16w"}\' (decoder_recipe(...).options(keep)["quantize_modules"])',
    )
    b.add_argument(
        "--rotate",
        action="store_true",
        help="rotate the residual stream and value heads by Hadamard matrices first (rotate_decoder; "
        "Llama, Mistral, Qwen2/3, Phi-3): pays with 16-bit weights (docs/llm.md)",
    )
    b.add_argument(
        "--shards", type=int, default=1, help="split each graph into this many graphs of consecutive layers (default 1)"
    )
    b.add_argument(
        "--jobs", type=int, default=1, help="graphs compiled at once, each in a child process (default 1)"
    )
    b.add_argument(
        "--max-memory",
        default=None,
        help="memory the compiling children may use together, such as 12G (default 80%% of the available memory)",
    )
    b.add_argument(
        "--cache",
        default=None,
        help="where finished graphs are kept: a graph compiled before, by a build that was killed too, is "
        "taken from it (default with --shards/--jobs: qnnx-llm-graphs beside qnnx's cache folder)",
    )
    b.add_argument("--no-cache", action="store_true", help="compile every graph again")
    b.add_argument("--opt-level", type=int, choices=(1, 2, 3), default=None, help="QNN's graph optimization level")
    b.add_argument("--timings", action="store_true", help="print each stage's time and peak memory on stderr")
    b.add_argument("--json", action="store_true", help="print the build's figures as JSON on stdout, no progress")
    args = p.parse_args(argv)
    if args.quantize and not args.calibration:
        p.error("--quantize needs --calibration FILE (text samples separated by blank lines)")
    from . import build  # torch and transformers: after the arguments parse

    calibration = None
    if args.calibration:
        try:
            with open(args.calibration, encoding="utf-8") as f:
                calibration = build.split_calibration(f.read())
        except (OSError, UnicodeDecodeError) as e:
            p.error(f"--calibration {args.calibration}: {e}")
    modules = None
    if args.quantize_modules:
        text = args.quantize_modules
        try:
            if not text.lstrip().startswith(("{", "[")):
                with open(text, encoding="utf-8") as f:
                    text = f.read()
            modules = json.loads(text)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            p.error(f"--quantize-modules: {e}")
        modules = modules.get("quantize_modules", modules) if isinstance(modules, dict) else modules
        if not isinstance(modules, dict):
            p.error('--quantize-modules: give a JSON object of module path -> scheme, such as {"lm_head": "16a16w"}')
    from .shards import default_cache_dir, parse_size
    from .timings import Progress, timings, timings_text

    try:
        prefill = [int(x) for x in args.prefill.split(",") if x.strip()]
    except ValueError:
        p.error(f"--prefill {args.prefill!r}: give token counts such as 32 or 32,128")
    children: dict = {}
    if args.shards != 1 or args.jobs != 1 or args.cache or args.max_memory:
        try:
            children["max_memory"] = parse_size(args.max_memory) if args.max_memory else None
        except ValueError as e:
            p.error(str(e))
        cache = None if args.no_cache else (args.cache or default_cache_dir())
        children.update(shards=args.shards, jobs=args.jobs, cache_dir=cache)
    start = time.perf_counter()
    say = Progress(sys.stderr, quiet=args.json)
    try:
        say(f"loading {args.model}")
        model, tokenizer = build.load_source(args.model)
        load_s = time.perf_counter() - start
        m = build.build_from(
            model,
            tokenizer,
            args.output,
            soc_model=args.soc,
            cache_len=args.cache_len,
            prefill=prefill,
            source=args.model,
            keep_onnx=args.keep_onnx,
            contexts=args.contexts,
            quantize=args.quantize,
            calibration=calibration,
            kv_cache_bits=args.kv_cache_bits,
            quantize_modules=modules,
            rotate=args.rotate,
            kv_cache_rotation=args.kv_cache_rotation,
            kv_cache_observer=args.kv_cache_observer,
            opt_level=args.opt_level,
            progress=say,
            **children,
        )
    except (ValueError, FileNotFoundError, FileExistsError, build.shards_.ChildFailed) as e:
        say.close()
        print(f"qnnx llm: error: {e}", file=sys.stderr)
        return 1
    say.close()
    figures = timings(m, load_s, time.perf_counter() - start)
    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    if args.timings:
        print(timings_text(figures), file=sys.stderr)
    size = sum(f["size"] for f in m["files"].values())
    print(
        f"wrote {args.output}: {size / 1e6:.1f} MB, graphs "
        f"{', '.join(g['name'] for g in m['graphs'])} for SoC {m['target']['soc_model']} "
        f"(QNN {m['target']['qnn_build_id']}) in {time.perf_counter() - start:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
