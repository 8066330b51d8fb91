"""Eager PyTorch on the CPU in this fresh process: the reference output (for max error) and
steady-state latency of `--calls` calls under torch.inference_mode(). Writes JSON to --out."""

from __future__ import annotations

import common  # noqa: I001

import time

import torch  # noqa: E402

import models  # noqa: E402


def main() -> None:
    ap = common.parser(__doc__.split("\n\n")[0])
    args = ap.parse_args()
    model, inputs, desc = models.build(args.model)
    result: dict = {"path": "eager", "model": args.model, "mode": "steady", "desc": desc,
                    "torch": torch.__version__, "threads": torch.get_num_threads()}
    with torch.inference_mode():
        t0 = time.perf_counter()
        y = model(*inputs)
        result["first_output_ms"] = (time.perf_counter() - t0) * 1e3
        if args.save_output:
            torch.save(common.first_tensor(y).detach().clone(), args.save_output)
        if args.calls > 0:
            result["steady"] = common.summarize(common.time_calls(model, inputs, args.calls, args.warmup))
        # dynamo's own per-call cost: torch.compile with a backend whose compiled function just
        # returns outputs computed once (guards, argument gathering, the call itself).
        def noop_backend(gm, example_inputs):
            outs = gm(*example_inputs)

            def constant(*args):
                return outs

            return constant

        compiled = torch.compile(model, backend=noop_backend)
        compiled(*inputs)
        n = max(args.calls, 1000)
        result["dynamo_noop"] = common.summarize(common.time_calls(compiled, inputs, n, 100))
    result["input_shapes"] = [list(x.shape) for x in inputs]
    result["input_dtypes"] = [str(x.dtype) for x in inputs]
    common.write(args.out, result)


if __name__ == "__main__":
    main()
