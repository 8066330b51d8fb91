"""Support queries (qnnx_backend.partitioning.plan): the per-node answer for a model and the op tables,
as records. The native queries do not open QNN, so no QNN library is needed."""

import onnx
import onnx.helper as oh
import pytest

from qnnx_backend import UnsupportedOpError
from qnnx_backend.partitioning.plan import (
    OpSupport,
    UnsupportedNode,
    op_support,
    parse_op_table,
    parse_unsupported,
    unsupported_error,
    unsupported_nodes,
)
from qnnx_backend.exceptions import QnnxError

STATUSES = {"supported", "decomposed", "fallback", "planned"}


def model(*nodes, shape=(2, 2, 2)):
    """A float model over input `x` whose last node writes `y`."""
    graph = oh.make_graph(
        list(nodes),
        "g",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(shape))],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]).SerializeToString()


def test_records_from_triples():
    rows = [("/a/Det", "Det", 'Node "/a/Det" (Det): no'), ["/b", "Foo", "r"]]
    got = parse_unsupported(rows)
    assert got == [UnsupportedNode("/a/Det", "Det", 'Node "/a/Det" (Det): no'), UnsupportedNode("/b", "Foo", "r")]
    assert got[0].node == "/a/Det" and got[0].op_type == "Det" and got[1].reason == "r"
    assert parse_unsupported([]) == []
    with pytest.raises(ValueError):
        parse_unsupported([("only", "two")])


@pytest.mark.parametrize("device", ["npu", "gpu"])
def test_unsupported_nodes_of_a_model(device):
    m = model(oh.make_node("Relu", ["x"], ["r"], name="relu"), oh.make_node("Det", ["r"], ["y"], name="det"))
    [n] = unsupported_nodes(m, device)
    assert isinstance(n, UnsupportedNode)
    assert (n.node, n.op_type) == ("det", "Det") and "Det" in n.reason


def test_a_supported_model_has_no_unsupported_nodes():
    assert unsupported_nodes(model(oh.make_node("Relu", ["x"], ["y"], name="relu")), "npu") == []


def test_an_invalid_model_is_a_qnnx_error():
    with pytest.raises(QnnxError):
        unsupported_nodes(b"not onnx", "npu")


def test_unsupported_error_has_every_attribute():
    nodes = [UnsupportedNode("d1", "Det", 'Node "d1" (Det): no'), ("d2", "Det", 'Node "d2" (Det): no'), ("t", "Foo", "t: no")]
    err = unsupported_error(nodes, "gpu")
    assert type(err) is UnsupportedOpError
    assert str(err) == '3 unsupported node(s):\n  Node "d1" (Det): no\n  Node "d2" (Det): no\n  t: no'
    assert err.nodes == [("d1", "Det", 'Node "d1" (Det): no'), ("d2", "Det", 'Node "d2" (Det): no'), ("t", "Foo", "t: no")]
    assert all(type(n) is tuple for n in err.nodes)
    assert err.operators == {"Det", "Foo"} and err.device == "gpu"
    assert (err.node, err.code, err.call, err.graph) == (None, None, None, None)


ENTRY = {
    "status": "supported",
    "runs": True,
    "family": "activation",
    "opset": (13, 23),
    "dtypes": ["f16", "f32"],
    "qnn": ["Softmax"],
    "layout": "agnostic",
    "constraints": ["axis == rank - 1"],
}


def test_op_table_records():
    [(op, s)] = parse_op_table({"Softmax": ENTRY}).items()
    assert op == "Softmax"
    assert s == OpSupport(
        op_type="Softmax",
        status="supported",
        runs=True,
        family="activation",
        opset=(13, 23),
        dtypes=("f16", "f32"),
        qnn=("Softmax",),
        layout="agnostic",
        constraints=("axis == rank - 1",),
    )
    hash(s)  # frozen: usable as a key


@pytest.mark.parametrize("change", ["extra", "missing"])
def test_an_op_table_field_this_side_does_not_know_is_an_error(change):
    entry = dict(ENTRY)
    if change == "extra":
        entry["since"] = "2.51"
    else:
        del entry["layout"]
    with pytest.raises(QnnxError, match="Softmax"):
        parse_op_table({"Softmax": entry})


@pytest.mark.parametrize("device", ["npu", "gpu"])
def test_the_real_op_tables_parse(device):
    table = op_support(device)
    assert table and all(op == s.op_type for op, s in table.items())
    for s in table.values():
        assert s.status in STATUSES, s
        assert s.runs == (s.status in ("supported", "decomposed")), s
        assert s.opset[0] <= s.opset[1], s
    assert table["Relu"].runs
    assert "Det" not in table or not table["Det"].runs
