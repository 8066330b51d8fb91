# /// script
# dependencies = ["onnx==1.22.0", "numpy"]
# ///
"""Writes the loader fixtures in this folder (small, committed):

- relu_ir13.onnx: onnx 1.22 defaults (IR 13, opset 27 clamped to 21 for the table range).
- relu_ir10.onnx: IR 10 / opset 17, as torch.onnx.export writes.
- mlp_external.onnx + mlp_external.bin: MatMul+Add+Relu with weights in an external file at a
  non-zero offset.

Run: python3 tests/models/load/gen.py
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(0)


def relu(ir, opset):
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    return m


onnx.save(relu(13, 21), os.path.join(HERE, "relu_ir13.onnx"))
onnx.save(relu(10, 17), os.path.join(HERE, "relu_ir10.onnx"))

w = rng.standard_normal((4, 3)).astype(np.float32)
b = rng.standard_normal((3,)).astype(np.float32)
with open(os.path.join(HERE, "mlp_external.bin"), "wb") as f:
    f.write(b"\0" * 16)
    f.write(w.tobytes())
    f.write(b.tobytes())


def ext(name, arr, offset):
    t = numpy_helper.from_array(arr, name)
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "mlp_external.bin"), ("offset", str(offset)), ("length", str(arr.nbytes))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


g = helper.make_graph(
    [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ],
    "mlp",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    initializer=[ext("w", w, 16), ext("b", b, 16 + w.nbytes)],
)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 10
onnx.save(m, os.path.join(HERE, "mlp_external.onnx"))
x = rng.standard_normal((2, 4)).astype(np.float32)
print("reference mlp output:", np.maximum(x @ w + b, 0).tolist())
