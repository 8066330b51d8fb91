"""One measurement of qnnx (torch.compile(backend="qnn")) in this fresh process.

cold:   empty cache folder; torch.compile to first output, with the time split into stages.
warm:   populated cache folder (an earlier cold run); the same, through the cache.
steady: after the first output, `--calls` timed calls; then the same number of calls with the
        native `.run` timed inside each call (our per-call overhead, paired call by call); then
        `.run` alone on preallocated buffers (the raw path).

Writes one JSON object to --out. Never imports ONNX Runtime.
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

STAGES: dict = {}
EVENTS: dict = {}
GRAPHS: list = []


def _add(name: str, ms: float) -> None:
    STAGES[name] = STAGES.get(name, 0.0) + ms


def _wrap_function(owner, attr: str, stage: str, after=None):
    orig = getattr(owner, attr)

    def wrapper(*a, **k):
        t0 = time.perf_counter()
        try:
            r = orig(*a, **k)
        finally:
            _add(stage, (time.perf_counter() - t0) * 1e3)
        if after is not None:
            after(r)
        return r

    setattr(owner, attr, wrapper)


def instrument() -> None:
    """Stage timers around the package's own functions (nothing in the package changes)."""
    global qnnx_backend, _export, _native, _policy, _runtime, _backend_module
    import qnnx_backend
    from qnnx_backend import _native
    from qnnx_backend.compiling import call as _runtime, qnn_callable as _policy, to_onnx as _export
    from qnnx_backend import backend as _backend_module

    ORIG["qnn_call"] = _policy.QnnCallable.__call__
    ORIG["cg_call"] = _runtime.CompiledGraph.__call__
    _wrap_function(_native, "is_available", "backend_open_ms")
    _wrap_function(_export, "onnx_bytes", "export_ms")
    _wrap_function(_native, "check", "check_ms")

    def compiled(native):
        _add("lower_ms", native.lower_ms)
        _add("finalize_ms", native.finalize_ms)
        # The engine's own breakdown (qnnx compile --timings), as engine_<stage>_ms.
        for stage, ms in getattr(native, "timings", []):
            _add("engine_" + stage.lower().replace(" ", "_") + "_ms", ms)

    _wrap_function(_native, "compile", "native_compile_ms", after=compiled)

    def loaded(native):
        if native is not None:
            _add("load_ms", native.load_ms)

    _wrap_function(_native, "load_cached", "cache_lookup_ms", after=loaded)

    orig_fp = _policy.QnnCallable.fx_fingerprint

    def fx_fingerprint(self, *a, **k):
        t0 = time.perf_counter()
        try:
            return orig_fp(self, *a, **k)
        finally:
            _add("fingerprint_ms", (time.perf_counter() - t0) * 1e3)

    _policy.QnnCallable.fx_fingerprint = fx_fingerprint

    orig_backend = _policy.compile_graph

    def compile_graph(*a, **k):
        EVENTS.setdefault("backend_enter", time.perf_counter())
        t0 = time.perf_counter()
        try:
            return orig_backend(*a, **k)
        finally:
            _add("backend_ctor_ms", (time.perf_counter() - t0) * 1e3)

    _policy.compile_graph = compile_graph
    _backend_module.compile_graph = compile_graph

    orig_call = _policy.QnnCallable.__call__

    def qnn_call(self, *a):
        if "callable_enter" not in EVENTS:
            EVENTS["callable_enter"] = time.perf_counter()
            try:
                return orig_call(self, *a)
            finally:
                EVENTS["callable_exit"] = time.perf_counter()
        return orig_call(self, *a)

    _policy.QnnCallable.__call__ = qnn_call

    orig_cg_init = _runtime.CompiledGraph.__init__

    def cg_init(self, *a, **k):
        orig_cg_init(self, *a, **k)
        GRAPHS.append(self)

    _runtime.CompiledGraph.__init__ = cg_init

    orig_cg_call = _runtime.CompiledGraph.__call__

    def cg_call(self, *a, **k):
        if "first_execute_ms" in STAGES:
            return orig_cg_call(self, *a, **k)
        t0 = time.perf_counter()
        try:
            return orig_cg_call(self, *a, **k)
        finally:
            _add("first_execute_ms", (time.perf_counter() - t0) * 1e3)

    _runtime.CompiledGraph.__call__ = cg_call


def uninstrument_call_path() -> None:
    """The steady-state loop runs the package's own methods, not the wrappers."""
    _policy.QnnCallable.__call__ = ORIG["qnn_call"]
    _runtime.CompiledGraph.__call__ = ORIG["cg_call"]


ORIG: dict = {}


class _TimedRun:
    """Stands in for the native graph inside CompiledGraph: times `.run` inside each call."""

    def __init__(self, native):
        self._native = native
        self.samples: list = []

    def __getattr__(self, name):
        return getattr(self._native, name)

    def run(self, ins, outs, check_nan=True):
        t0 = time.perf_counter_ns()
        self._native.run(ins, outs, check_nan)
        self.samples.append(time.perf_counter_ns() - t0)


class _StubRun(_TimedRun):
    """A native graph whose .run does nothing (for the hot-cache overhead)."""

    def run(self, ins, outs, check_nan=True):
        return None


def raw_run_samples(native, calls: int, warmup: int) -> list:
    """`.run` on preallocated, contiguous buffers of the graph dtypes: no torch.compile, no
    dynamo guards, no checks or conversions in Python."""
    ins = [torch.zeros(tuple(shape), dtype=_runtime.torch_dtype(gd)) for (_, gd, shape, _) in native.inputs]
    outs = [torch.empty(tuple(shape), dtype=_runtime.torch_dtype(gd)) for (_, gd, shape, _) in native.outputs]
    ip = [(t.data_ptr(), t.numel() * t.element_size()) for t in ins]
    op = [(t.data_ptr(), t.numel() * t.element_size()) for t in outs]
    return common.time_calls(lambda: native.run(ip, op), (), calls, warmup)


def main() -> None:
    ap = common.parser(__doc__.split("\n\n")[0])
    ap.add_argument("--binary", help="write the compiled context binary here (for the graphExecute timer)")
    ap.add_argument("--fp16", action="store_true")
    args = ap.parse_args()

    model, inputs, desc = models.build(args.model)
    # torch.compile's own machinery is loaded before the clock starts, in every runner
    # (torchvision imports it anyway): the timed part is the backend's import, torch.compile
    # and the first call.
    importlib.import_module("torch._dynamo")

    RSS["after_build_mb"] = common.rss_mb()
    t_import = time.perf_counter()
    instrument()
    import_ms = (time.perf_counter() - t_import) * 1e3
    RSS["after_import_backend_mb"] = common.rss_mb()
    options = {
        "device": "npu",
        "strict": False,
        "soc_model": 60,
        "htp_arch": 73,
        "fp16": args.fp16,
        "cache": args.cache_dir is not None,
    }
    if args.cache_dir:
        options["cache_dir"] = args.cache_dir
    result: dict = {
        "path": "qnnx",
        "model": args.model,
        "mode": args.mode,
        "desc": desc,
        "import_torch_s": T_IMPORT_TORCH,
        "options": options,
    }
    with torch.inference_mode():
        t0 = time.perf_counter()
        compiled = torch.compile(model, backend="qnn", options=options)
        y = compiled(*inputs)
        t1 = time.perf_counter()
    STAGES["import_backend_ms"] = import_ms
    result["compile_to_first_output_ms"] = (t1 - t0) * 1e3
    result["first_output_ms"] = import_ms + (t1 - t0) * 1e3
    RSS["after_first_output_mb"] = common.rss_mb()
    RSS["peak_after_first_output_mb"] = common.peak_rss_mb()
    result["stats"] = dict(qnnx_backend.STATS)
    result["fallback"] = qnnx_backend.STATS.get("fallbacks", 0) > 0 or not GRAPHS
    if "backend_enter" in EVENTS:
        STAGES["dynamo_to_backend_ms"] = (EVENTS["backend_enter"] - t0) * 1e3
    if "callable_enter" in EVENTS:
        inside = (EVENTS["callable_exit"] - EVENTS["callable_enter"]) * 1e3
        STAGES["in_backend_first_call_ms"] = inside
        STAGES["dynamo_other_ms"] = (t1 - t0) * 1e3 - inside - STAGES.get("dynamo_to_backend_ms", 0.0) - STAGES.get(
            "backend_ctor_ms", 0.0
        )
    if "native_compile_ms" in STAGES:
        STAGES["compile_other_ms"] = STAGES["native_compile_ms"] - STAGES.get("lower_ms", 0) - STAGES.get("finalize_ms", 0)
    result["stages"] = STAGES
    if args.save_output:
        torch.save(common.first_tensor(y).detach().clone(), args.save_output)

    native = GRAPHS[0].native if GRAPHS else None
    if native is not None and not native.from_cache:
        # (QNN refuses to serialise a context that was itself loaded from a binary.)
        t = time.perf_counter()
        binary = native.binary()
        result["serialize_ms"] = (time.perf_counter() - t) * 1e3
        result["binary_bytes"] = len(binary)
        if args.binary:
            with open(args.binary, "wb") as f:
                f.write(binary)
        del binary

    if args.calls > 0:
        uninstrument_call_path()
        with torch.inference_mode():
            samples = common.time_calls(compiled, inputs, args.calls, args.warmup)
            result["steady"] = common.summarize(samples)
            if native is not None:
                # Call by call: the whole compiled(x), the backend's own __call__ inside it, and
                # the native .run inside that. total - callable = dynamo (guards, argument
                # gathering); callable - run = qnnx's Python (checks, output allocation).
                cg = GRAPHS[0]
                timed = _TimedRun(native)
                cg.native = timed
                inner: list = []
                plain_call = _policy.QnnCallable.__call__

                def timed_call(self, *a):
                    t0 = time.perf_counter_ns()
                    r = plain_call(self, *a)
                    inner.append(time.perf_counter_ns() - t0)
                    return r

                _policy.QnnCallable.__call__ = timed_call
                total = []
                for _ in range(args.calls):
                    t = time.perf_counter_ns()
                    compiled(*inputs)
                    total.append(time.perf_counter_ns() - t)
                # The same with a .run that returns at once: the software cost with hot caches
                # (between real calls the emulator evicts Python's working set from the CPU
                # caches; an NPU would not).
                stub = _StubRun(native)
                cg.native = stub
                hot_total, hot_inner = [], []
                for _ in range(200):
                    compiled(*inputs)
                del inner[len(total):]
                for _ in range(max(args.calls, 1000)):
                    n0 = len(inner)
                    t = time.perf_counter_ns()
                    compiled(*inputs)
                    hot_total.append(time.perf_counter_ns() - t)
                    hot_inner.append(inner[n0])
                del inner[len(total):]
                _policy.QnnCallable.__call__ = plain_call
                cg.native = native
                result["overhead_hot"] = common.summarize(hot_total)
                result["overhead_hot_dynamo"] = common.summarize([a - b for a, b in zip(hot_total, hot_inner)])
                result["overhead_hot_qnnx"] = common.summarize(hot_inner)
                result["overhead_paired"] = common.summarize([a - b for a, b in zip(total, timed.samples)])
                result["overhead_paired_dynamo"] = common.summarize([a - b for a, b in zip(total, inner)])
                result["overhead_paired_qnnx"] = common.summarize([a - b for a, b in zip(inner, timed.samples)])
                result["steady_paired_total"] = common.summarize(total)
                result["run_in_call"] = common.summarize(timed.samples)
                result["raw_run"] = common.summarize(raw_run_samples(native, min(args.calls, 50), args.warmup))
    result["rss"] = RSS
    result["qnn_libraries_mapped"] = common.mapped("libQnn")
    common.write(args.out, result)


if __name__ == "__main__":
    main()
