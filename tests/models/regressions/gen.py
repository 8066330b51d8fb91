"""Reduced ONNX models of crashes and miscompilations found in real models, one folder per case
(model.onnx, input_*.npy, and output_*.npy from onnx's reference evaluator). The folders are
committed; engine/tests/regressions_htp.rs runs each case on the emulated HTP in a child
process and compares with the reference, so a case that kills the process fails its test.

Regenerate: python3 tests/models/regressions/gen.py   (onnx==1.22.0, numpy; fixed seeds)
"""

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

HERE = Path(__file__).resolve().parent


def save(name: str, graph: onnx.GraphProto, inputs: dict) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    out = HERE / name
    out.mkdir(exist_ok=True)
    onnx.save(model, out / "model.onnx")
    for i, v in enumerate(inputs.values()):
        np.save(out / f"input_{i}.npy", v)
    for i, v in enumerate(ReferenceEvaluator(model).run(None, inputs)):
        np.save(out / f"output_{i}.npy", v)
    print(f"{name}: {len(graph.node)} nodes")


def mqa_repeat_kv() -> None:
    """Issue 13: the value path of transformers' repeat_kv with one KV head (seq 32, head_dim
    32): the square projection read as a rank-5 tensor crashed libQnnHtp 2.51 with SIGSEGV."""
    rng = np.random.default_rng(13)
    consts = {
        "w": rng.standard_normal((64, 32)).astype(np.float32) * 0.2,
        "split_heads": np.array([1, 32, 1, 32], np.int64),
        "axis": np.array([2], np.int64),
        "expand_to": np.array([1, 1, 2, 32, 32], np.int64),
        "merge_heads": np.array([1, 2, 32, 32], np.int64),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["v"], name="v_proj"),
        helper.make_node("Reshape", ["v", "split_heads"], ["v_heads"], name="split"),
        helper.make_node("Transpose", ["v_heads"], ["v_t"], perm=[0, 2, 1, 3], name="to_bhsd"),
        helper.make_node("Unsqueeze", ["v_t", "axis"], ["v_u"], name="unsqueeze"),
        helper.make_node("Expand", ["v_u", "expand_to"], ["v_e"], name="repeat"),
        helper.make_node("Reshape", ["v_e", "merge_heads"], ["y"], name="merge"),
    ]
    graph = helper.make_graph(
        nodes,
        "mqa_repeat_kv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 32, 32])],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    save("mqa_repeat_kv", graph, {"x": rng.standard_normal((1, 32, 64)).astype(np.float32)})


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(__doc__)
    mqa_repeat_kv()
