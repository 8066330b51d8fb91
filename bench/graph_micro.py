"""Micro models behind docs/graph-quality.md's findings.

- `fc_tanhgelu`, `fc_erfgelu`: a FullyConnected ([1, 32, 128] x [128, 512] + bias) followed by
  GELU written out in elementwise ops, in the tanh form GPT-2's `gelu_new` exports and the erf
  form torch's `nn.GELU()` exports;
- `relu40`, `reshape40`: 41 Relus of [1, 17, 64] in a row, and the same with a Reshape
  ([17, 64] / [1, 17, 64]) between each two (what a Reshape costs on the emulated HTP).

```sh
python3 bench/graph_micro.py --out bench/work/graph-micro
cd bench/work/graph-micro
for m in fc_tanhgelu fc_erfgelu; do for p in fp16 fp32; do
  ../../../target/release/qnnx --json run $m.onnx --precision $p --soc-model 60 --htp-arch v73 \
      --profile detailed --runs 5 > $m.$p.json
done; done
for m in relu40 reshape40; do
  ../../../target/release/qnnx compile $m.onnx -o $m.bin --soc-model 60 --htp-arch v73 --precision fp16
  ../../../target/release/examples/exec_timer $m.bin --runs 100 --warmup 3 --soc 60 --arch 73
done
```

Each `run` JSON has `median_ms` and the per-op cycles (`profile.ops`). Build with the lowering
you want to look at (before the tanh-GELU fusion, the tanh form lowers op by op).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def model(path: Path, nodes: list, consts: dict, w: np.ndarray, b: np.ndarray) -> None:
    inits = [nh.from_array(np.array(v, dtype=np.float32), k) for k, v in {**consts, "W": w, "B": b}.items()]
    fc = [h.make_node("MatMul", ["x", "W"], ["mm"]), h.make_node("Add", ["mm", "B"], ["x0"])]
    g = h.make_graph(fc + nodes, path.stem, [h.make_tensor_value_info("x", T.FLOAT, [1, 32, 128])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 32, 512])], inits)
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("bench/work/graph-micro"))
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((128, 512)).astype(np.float32) * 0.1
    b = rng.standard_normal(512).astype(np.float32) * 0.1
    n = h.make_node
    k = (2 / np.pi) ** 0.5
    model(a.out / "fc_tanhgelu.onnx",
          [n("Mul", ["x0", "half"], ["m"]), n("Pow", ["x0", "three"], ["p"]), n("Mul", ["p", "c"], ["pc"]),
           n("Add", ["x0", "pc"], ["a"]), n("Mul", ["a", "k"], ["ak"]), n("Tanh", ["ak"], ["t"]),
           n("Add", ["t", "one"], ["t1"]), n("Mul", ["m", "t1"], ["y"])],
          {"half": 0.5, "three": 3.0, "c": 0.044715, "k": k, "one": 1.0}, w, b)
    model(a.out / "fc_erfgelu.onnx",
          [n("Div", ["x0", "s2"], ["a"]), n("Erf", ["a"], ["e"]), n("Add", ["e", "one"], ["c"]),
           n("Mul", ["x0", "c"], ["d"]), n("Mul", ["d", "half"], ["y"])],
          {"s2": 2 ** 0.5, "one": 1.0, "half": 0.5}, w, b)
    chain(a.out / "relu40.onnx", 40, reshapes=False)
    chain(a.out / "reshape40.onnx", 40, reshapes=True)
    print(f"wrote fc_tanhgelu, fc_erfgelu, relu40, reshape40 .onnx to {a.out}")


def chain(path: Path, n: int, reshapes: bool) -> None:
    nodes = [h.make_node("Relu", ["x"], ["v0"])]
    inits = []
    for i in range(n):
        src = f"v{i}"
        if reshapes:
            shape = [17, 64] if i % 2 == 0 else [1, 17, 64]
            inits.append(nh.from_array(np.array(shape, dtype=np.int64), f"s{i}"))
            nodes.append(h.make_node("Reshape", [src, f"s{i}"], [f"r{i}"]))
            src = f"r{i}"
        nodes.append(h.make_node("Relu", [src], [f"v{i + 1}"]))
    inits.append(nh.from_array(np.array([1, 17, 64], dtype=np.int64), "sf"))
    nodes.append(h.make_node("Reshape", [f"v{n}", "sf"], ["y"]))
    g = h.make_graph(nodes, path.stem, [h.make_tensor_value_info("x", T.FLOAT, [1, 17, 64])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 17, 64])], inits)
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), path)


if __name__ == "__main__":
    main()
