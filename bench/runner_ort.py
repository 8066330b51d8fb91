"""One measurement of the reference path (torch.compile -> ONNX -> ONNX Runtime QNN EP) in this
fresh process; run with bench/.venv-ort's Python.

cold:   empty cache folder: export, session creation (which writes the EPContext model) and first
        run; then `--calls` timed calls.
warm:   the EPContext model of an earlier cold run is loaded for the same FX fingerprint.

Writes one JSON object to --out.
"""

from __future__ import annotations

import common  # noqa: I001  (first: records the process start)

import importlib
import time

t = time.perf_counter()
import torch  # noqa: E402

T_IMPORT_TORCH = time.perf_counter() - t
import models  # noqa: E402

RSS: dict = {"after_import_torch_mb": common.rss_mb()}


def main() -> None:
    ap = common.parser(__doc__.split("\n\n")[0])
    ap.add_argument("--htp-lib", help="libQnnHtp.so to use (default: the onnxruntime-qnn wheel's own)")
    ap.add_argument("--no-mha-fastpath", action="store_true",
                    help="trace nn.MultiheadAttention/TransformerEncoderLayer without the fused fast path")
    args = ap.parse_args()

    model, inputs, desc = models.build(args.model)
    if args.no_mha_fastpath:
        torch.backends.mha.set_fastpath_enabled(False)
    importlib.import_module("torch._dynamo")  # before the clock, as in every runner

    RSS["after_build_mb"] = common.rss_mb()
    t_import = time.perf_counter()
    import onnxruntime

    import ort_ref_backend as ref

    name = ref.register()
    import_ms = (time.perf_counter() - t_import) * 1e3
    RSS["after_import_backend_mb"] = common.rss_mb()
    options = {"cache_dir": args.cache_dir, "htp_lib": args.htp_lib, "strict": False}
    result: dict = {
        "path": "ort",
        "model": args.model,
        "mode": args.mode,
        "desc": desc,
        "import_torch_s": T_IMPORT_TORCH,
        "onnxruntime": onnxruntime.__version__,
        "onnxruntime_file": onnxruntime.__file__,
        "provider_options": ref.provider_options(args.htp_lib),
        "mha_fastpath": not args.no_mha_fastpath,
    }
    with torch.inference_mode():
        t0 = time.perf_counter()
        compiled = torch.compile(model, backend=name, options=options)
        y = compiled(*inputs)
        t1 = time.perf_counter()
    result["compile_to_first_output_ms"] = (t1 - t0) * 1e3
    result["first_output_ms"] = import_ms + (t1 - t0) * 1e3
    RSS["after_first_output_mb"] = common.rss_mb()
    RSS["peak_after_first_output_mb"] = common.peak_rss_mb()
    result["stats"] = dict(ref.STATS)
    result["fallback"] = ref.STATS.get("fallbacks", 0) > 0
    stages = {"import_backend_ms": import_ms, **ref.TIMES}
    if "backend_enter" in ref.EVENTS:
        stages["dynamo_to_backend_ms"] = (ref.EVENTS["backend_enter"] - t0) * 1e3
    result["stages"] = stages
    if args.save_output:
        torch.save(common.first_tensor(y).detach().clone(), args.save_output)
    if args.calls > 0:
        with torch.inference_mode():
            result["steady"] = common.summarize(common.time_calls(compiled, inputs, args.calls, args.warmup))
    result["rss"] = RSS
    result["qnn_libraries_mapped"] = common.mapped("libQnn")
    common.write(args.out, result)


if __name__ == "__main__":
    main()
