"""Small ONNX models for the `qnnx` end-to-end tests, with inputs and reference outputs.

Requires: onnx==1.22.0, numpy>=1.26 (requirements-test.txt).

Usage: python3 make_models.py OUTDIR

Writes into OUTDIR, for each model NAME: NAME.onnx, NAME.in.<input>.npy and NAME.ref.<output>.npy
(the output of onnx.reference.ReferenceEvaluator on those inputs), and prints a JSON summary
with the reference outputs.

- mlp: MatMul + Add + Relu + MatMul + Softmax (last axis), float32 [2, 8] -> [2, 4].
- cnn: Conv 3x3 (pad 1) + Relu + GlobalAveragePool + Flatten + Gemm, float32 [1, 3, 8, 8] -> [1, 5].
- int: (ids + 3) * 2 in int64 (narrowed to int32 on the HTP), [1, 6] -> [1, 6].
"""

import json
import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator


def model(nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(a, n) for n, a in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="qnnx-cli-tests")
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m


def mlp(rng):
    inits = {
        "w1": rng.standard_normal((8, 16)).astype(np.float32) * 0.5,
        "b1": rng.standard_normal(16).astype(np.float32) * 0.1,
        "w2": rng.standard_normal((16, 4)).astype(np.float32) * 0.5,
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="bias1"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu1"),
        helper.make_node("MatMul", ["h2", "w2"], ["logits"], name="fc2"),
        helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1),
    ]
    m = model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        inits,
    )
    return m, {"x": rng.standard_normal((2, 8)).astype(np.float32)}


def cnn(rng):
    inits = {
        "cw": rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3,
        "cb": rng.standard_normal(4).astype(np.float32) * 0.1,
        "fw": rng.standard_normal((5, 4)).astype(np.float32) * 0.5,
        "fb": rng.standard_normal(5).astype(np.float32) * 0.1,
    }
    nodes = [
        helper.make_node("Conv", ["img", "cw", "cb"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="gap"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["scores"], name="fc", transB=1),
    ]
    m = model(
        nodes,
        [helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 5])],
        inits,
    )
    return m, {"img": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}


def int_model(rng):
    nodes = [
        helper.make_node("Add", ["ids", "off"], ["s"], name="add"),
        helper.make_node("Mul", ["s", "two"], ["out"], name="mul"),
    ]
    m = model(
        nodes,
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 6])],
        [helper.make_tensor_value_info("out", TensorProto.INT64, [1, 6])],
        {"off": np.array([3], np.int64), "two": np.array([2], np.int64)},
    )
    return m, {"ids": np.array([[0, 1, 2, -5, 100, 7]], np.int64)}


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    summary = {}
    for name, make in [("mlp", mlp), ("cnn", cnn), ("int", int_model)]:
        m, inputs = make(rng)
        path = out / f"{name}.onnx"
        onnx.save(m, path)
        ref = ReferenceEvaluator(m).run(None, inputs)
        outputs = [o.name for o in m.graph.output]
        for k, v in inputs.items():
            np.save(out / f"{name}.in.{k}.npy", v)
        for k, v in zip(outputs, ref):
            np.save(out / f"{name}.ref.{k}.npy", v)
        summary[name] = {k: v.tolist() for k, v in zip(outputs, ref)}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
