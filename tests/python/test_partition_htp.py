"""Partitioning on the emulated HTP (SoC 60): a graph with nodes the lowering refuses runs its
supported parts as QNN partitions and the rest eagerly, in one stitched GraphModule; strict
still raises; islands below min_partition_size, or whose eager time is below the measured
cost of a QNN call (partition_cost), stay eager."""

import warnings

import pytest
import torch
import torch.nn as nn

import qnnx_backend
from conftest import assert_close_to_eager, compile_strict
from qnnx_backend.partitioning import plan as _partition

# The tests of the split itself use tiny inputs (fast on the emulator), whose islands take
# about as long eagerly as one QNN call: the cost rule is off for them (partition_cost=0) and
# tested on its own below, with models whose islands are far from the call cost either way.
OPTIONS = {"device": "npu", "soc_model": 60, "partition_cost": 0}
MEASURED = {"device": "npu", "soc_model": 60}


class DetCNN(nn.Module):
    """Two conv blocks with a matrix determinant (ONNX Det, which no QNN backend runs) between
    them: conv, relu, conv, relu, slice | det | sigmoid, unsqueeze, mul, conv, relu, mean."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.c3 = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.c2(torch.relu(self.c1(x))))
        d = torch.linalg.det(y[..., :3, :3])
        y = y * torch.sigmoid(d)[..., None, None]
        return torch.relu(self.c3(y)).mean((2, 3))


class Alternating(nn.Module):
    """A conv block, then asin (refused) alternating with single supported nodes."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = torch.tanh(torch.relu(self.c(x))) * 0.5
        for _ in range(3):
            y = torch.asin(y) * 0.5
        return y


def run_with_warnings(compiled, *args):
    with warnings.catch_warnings(record=True) as caught, torch.inference_mode():
        warnings.simplefilter("always")
        out = compiled(*args)
    return out, [str(w.message) for w in caught if "qnn backend" in str(w.message)]


@pytest.mark.htp
@pytest.mark.parametrize("device", ["npu", "auto"])
def test_det_in_the_middle_runs_two_qnn_partitions_and_one_eager_node(device):
    torch.manual_seed(0)
    m = DetCNN().eval()
    x = torch.randn(1, 3, 8, 8)
    compiled = torch.compile(m, backend="qnn", options={**OPTIONS, "device": device})
    got, ours = run_with_warnings(compiled, x)
    with torch.inference_mode():
        want = m(x)
        assert_close_to_eager(got, want, rel=2e-2)
        # A second call runs the compiled partitions again (no new compile, no new warning).
        got2 = compiled(x)
        assert_close_to_eager(got2, want, rel=2e-2)
    stats = qnnx_backend.STATS
    # One compile: both partitions are graphs of one QNN context.
    assert (stats["partitions"], stats["compiles"], stats["fallbacks"]) == (2, 1, 0), stats
    assert len(ours) == 1, ours
    assert "2 QNN partition(s)" in ours[0] and "1 FX node(s) on the CPU" in ours[0], ours[0]
    assert "Det" in ours[0], ours[0]


@pytest.mark.htp
def test_strict_still_raises_naming_the_node():
    compiled = compile_strict(DetCNN().eval(), soc_model=60)
    with pytest.raises(qnnx_backend.UnsupportedOpError) as info, torch.inference_mode():
        compiled(torch.randn(1, 3, 8, 8))
    assert info.value.operators == {"Det"}
    assert qnnx_backend.STATS["partitions"] == 0 and qnnx_backend.STATS["compiles"] == 0


@pytest.mark.htp
def test_alternating_nodes_do_not_make_a_partition_per_node():
    torch.manual_seed(0)
    m = Alternating().eval()
    x = torch.randn(1, 3, 8, 8)
    compiled = torch.compile(m, backend="qnn", options=OPTIONS)
    got, ours = run_with_warnings(compiled, x)
    with torch.inference_mode():
        assert_close_to_eager(got, m(x), rel=2e-2)
    # Only the conv block (conv, relu, tanh, mul) is a partition; each `* 0.5` between two
    # asin is a run of one node and stays eager with its reason.
    assert qnnx_backend.STATS["partitions"] == 1, qnnx_backend.STATS
    [msg] = ours
    assert "1 QNN partition(s) with 4 of" in msg, msg
    assert msg.count("fewer than min_partition_size=3") == 3, msg
    assert msg.count("Asin") >= 3, msg


@pytest.mark.htp
def test_nothing_large_enough_falls_back_whole_with_the_reasons():
    m = DetCNN().eval()
    x = torch.randn(1, 3, 8, 8)
    compiled = torch.compile(m, backend="qnn", options={**OPTIONS, "min_partition_size": 100})
    got, ours = run_with_warnings(compiled, x)
    with torch.inference_mode():
        torch.testing.assert_close(got, m(x))
    assert qnnx_backend.STATS["fallbacks"] == 1 and qnnx_backend.STATS["partitions"] == 0
    [msg] = ours
    assert "eager PyTorch on the CPU" in msg and "Det" in msg and "min_partition_size=100" in msg, msg


@pytest.mark.htp
def test_dry_run_warns_the_plan_runs_eagerly_and_compiles_nothing():
    m = DetCNN().eval()
    x = torch.randn(1, 3, 8, 8)
    compiled = torch.compile(m, backend="qnn", options={**OPTIONS, "dry_run": True})
    got, ours = run_with_warnings(compiled, x)
    with torch.inference_mode():
        torch.testing.assert_close(got, m(x))
    [msg] = ours
    assert "dry run on npu: this graph would be split" in msg and "2 QNN partition(s)" in msg, msg
    stats = qnnx_backend.STATS
    assert (stats["compiles"], stats["partitions"], stats["fallbacks"]) == (0, 0, 0), stats


@pytest.mark.htp
def test_explain_reports_the_partitions_without_compiling():
    m = DetCNN().eval()
    [report] = qnnx_backend.explain(m, (torch.randn(1, 3, 8, 8),), OPTIONS)
    assert report["device"] == "npu" and not report["whole"]
    assert [len(p) for p in report["partitions"]] == [5, 6], report
    # c1 and c2 (8*3*9+8 + 8*8*9+8 = 808 elements) against c3 (4*8*9+4 = 292) of 1100.
    assert report["param_shares"] == pytest.approx([808 / 1100, 292 / 1100]), report
    [(node, why)] = report["eager"].items()
    assert node == "d" and why.startswith("linalg_det: ") and "Det is not supported" in why, report
    assert "qnnx_scope" not in why, why
    assert qnnx_backend.STATS["compiles"] == 0


@pytest.mark.htp
def test_explain_of_a_supported_model_is_whole():
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()
    [report] = qnnx_backend.explain(m, torch.randn(2, 4), OPTIONS)
    assert report["whole"] and report["partitions"] == [] and report["eager"] == {}


def test_onnx_names_of_a_scoped_export_map_back_to_fx_nodes():
    names = {f"{_partition.SCOPE_PREFIX}y": "y", f"{_partition.SCOPE_PREFIX}y_1": "y_1"}
    assert _partition.fx_node_of(f"/gm/{_partition.SCOPE_PREFIX}y/Relu", names) == "y"
    assert _partition.fx_node_of(f"/gm/{_partition.SCOPE_PREFIX}y_1/Constant_1", names) == "y_1"
    assert _partition.fx_node_of("Constant_20", names) is None
    assert _partition.fx_node_of(f"/other/{_partition.SCOPE_PREFIX}y/Relu", names) is None


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "3"])
def test_min_partition_size_is_checked(bad):
    with pytest.raises(ValueError, match="min_partition_size"):
        qnnx_backend.parse_options({"min_partition_size": bad})


def compiled_graph(model, x, options):
    """(output, the compiled entry of ``model``'s one FX graph) after a call with ``options``."""
    made = []

    def backend(gm, inputs):
        made.append(qnnx_backend.qnn_backend(gm, inputs, options=options))
        return made[-1]

    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")
        out = torch.compile(model, backend=backend)(x)
    [callable_] = made
    [graph] = callable_.graphs.values()
    return out, graph


def compiled_partitions(model, x, **options):
    """The native graphs of the QNN partitions of ``model``'s one FX graph after a call."""
    out, graph = compiled_graph(model, x, {**OPTIONS, **options})
    parts = [m for name, m in graph.module.named_children() if name.startswith("qnn_partition_")]
    return out, [next(iter(p.callable.graphs.values())).native for p in parts]


@pytest.mark.htp
def test_the_partitions_are_graphs_of_one_qnn_context():
    torch.manual_seed(0)
    _, natives = compiled_partitions(DetCNN().eval(), torch.randn(1, 3, 8, 8))
    assert len(natives) == 2
    # binary() of each graph of a context is the whole context binary.
    assert natives[0].binary() == natives[1].binary()
    assert [len(n.outputs) for n in natives] == [2, 1], [n.outputs for n in natives]


@pytest.mark.htp
def test_a_partitioned_graph_is_cached(tmp_path):
    torch.manual_seed(0)
    m, x = DetCNN().eval(), torch.randn(1, 3, 8, 8)
    first, cold = compiled_partitions(m, x, cache=True, cache_dir=str(tmp_path))
    assert qnnx_backend.STATS["compiles"] == 1 and not cold[0].from_cache
    torch._dynamo.reset()
    qnnx_backend.STATS.clear()
    again, warm = compiled_partitions(m, x, cache=True, cache_dir=str(tmp_path))
    # The warm start splits the graph from its split alias: no ONNX export, no lowering.
    stats = dict(qnnx_backend.STATS)
    assert (stats.get("compiles", 0), stats["cache_hits"], stats.get("exports", 0)) == (0, 1, 0), stats
    assert warm[0].from_cache and warm[0].cache_key == cold[0].cache_key
    torch.testing.assert_close(again, first)
    # A split alias that is not what qnnx wrote is ignored: the graph is exported and split
    # again (the context itself is still a cache hit), and the alias rewritten.
    [alias] = list((tmp_path / "fx").glob("*.split.json"))
    for bad in ['{"key": "00", "plan": {}}', '{"key": "%s", "plan": {"qnnx": "0", "refused": {}}}' % ("ab" * 32),
                "not json"]:
        alias.write_text(bad)
        torch._dynamo.reset()
        qnnx_backend.STATS.clear()
        out, _ = compiled_partitions(m, x, cache=True, cache_dir=str(tmp_path))
        torch.testing.assert_close(out, first)
        assert qnnx_backend.STATS["exports"] >= 1 and qnnx_backend.STATS.get("compiles", 0) == 0, qnnx_backend.STATS


class ArgsortCNN(nn.Module):
    """argsort over channels (ONNX TopK on a non-last axis, which the lowering refuses for that
    attribute, not for the op) between a conv block and a scatter plus conv block."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 4, 3, padding=1)
        self.c2 = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.c1(x)).flatten(2)
        idx = torch.argsort(y[:, :, :1], dim=1).expand_as(y)
        y = torch.scatter(y, 1, idx, y * 2)
        return torch.relu(self.c2(y.reshape(x.shape[0], 4, x.shape[2], x.shape[3]))).mean((2, 3))


@pytest.mark.htp
@pytest.mark.parametrize("dynamic", [False, True])
def test_an_attribute_refusal_is_partitioned_for_each_input_shape(dynamic):
    torch.manual_seed(0)
    m = ArgsortCNN().eval()
    compiled = torch.compile(m, backend="qnn", options=OPTIONS, dynamic=dynamic)
    for batch in (1, 2):
        x = torch.randn(batch, 3, 8, 8)
        got, ours = run_with_warnings(compiled, x)
        with torch.inference_mode():
            assert_close_to_eager(got, m(x), rel=2e-2)
        [msg] = ours
        assert "2 QNN partition(s)" in msg and "1 FX node(s) on the CPU" in msg, msg
        assert "argsort: " in msg and "only the last axis is supported" in msg, msg
    # Two signatures, each with its two partitions in one context; the scatter runs on QNN.
    assert (qnnx_backend.STATS["partitions"], qnnx_backend.STATS["compiles"]) == (4, 2), qnnx_backend.STATS
    assert qnnx_backend.STATS["fallbacks"] == 0


def test_nodes_computing_python_scalars_stay_eager():
    class M(nn.Module):
        def forward(self, x):
            return torch.relu(x).reshape(x.size(0) * 2, -1)

    made = []

    def capture(gm, inputs):
        made.append(gm)
        return gm.forward

    torch.compile(M(), backend=capture, dynamic=True)(torch.randn(4, 6))
    [gm] = made
    scalar = [n for n in gm.graph.nodes if n.op.startswith("call") and _partition.computes_scalar(n)]
    assert scalar, gm.graph
    p = _partition.plan(gm, {}, 1)
    assert all(n.name in p.eager and "Python scalar" in p.eager[n.name] for n in scalar), p
    assert not any(n.name in part for part in p.partitions for n in scalar), p


@pytest.mark.htp
def test_partitions_compile_one_by_one_when_the_joint_compile_fails(monkeypatch):
    from qnnx_backend import _native
    from qnnx_backend.partitioning import split

    def refuse(*args, **kwargs):
        raise qnnx_backend.QnnApiError("injected: the joint compile failed")

    # The failure is injected; every compile that then happens is the real library's.
    monkeypatch.setattr(_native, "compile_many", refuse)
    assert split._native.compile_many is refuse
    torch.manual_seed(0)
    m, x = DetCNN().eval(), torch.randn(1, 3, 8, 8)
    got, natives = compiled_partitions(m, x)
    with torch.inference_mode():
        assert_close_to_eager(got, m(x), rel=2e-2)
    stats = qnnx_backend.STATS
    assert (stats["partitions"], stats["compiles"], stats["fallbacks"]) == (2, 2, 0), stats
    # Two contexts now: each binary holds one graph.
    assert natives[0].binary() != natives[1].binary()


@pytest.mark.htp
def test_the_aot_path_refuses_a_partitioned_graph_by_name():
    from qnnx_backend.compiling.qnn_callable import QnnCallable

    made = []

    def backend(gm, inputs):
        made.append(qnnx_backend.qnn_backend(gm, inputs, options=OPTIONS))
        return made[-1]

    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")
        torch.compile(DetCNN().eval(), backend=backend)(torch.randn(1, 3, 8, 8))
    with pytest.raises(qnnx_backend.LoweringError, match="split into QNN partitions and eager nodes"):
        QnnCallable.serialize_compile_artifacts(made[0])


@pytest.mark.htp
def test_a_quantized_graph_is_split_into_calibrated_partitions_on_v68(tmp_path):
    # QCS6490 (v68) has no float path: the partitions around det are quantized, each calibrated
    # on what the calibration images give it in eager runs of the split graph; det stays eager.
    from conftest import structured_images

    torch.manual_seed(0)
    m = DetCNN().eval()
    images = structured_images(18, 16)
    options = {"soc_model": "QCS6490", "quantize": "8a8w", "calibration": images[:16], "cache": True,
               "cache_dir": str(tmp_path)}
    first, natives = compiled_partitions(m, images[16], **options)
    stats = dict(qnnx_backend.STATS)
    assert len(natives) == 2 and stats["partitions"] == 2 and stats["compiles"] == 1, stats
    # The whole graph once (refused for det), then each partition.
    assert stats["quantizations"] == 3, stats
    assert all(n.inputs[0][1] == "f32" for n in natives), "float boundaries, quantized inside"
    with torch.inference_mode():
        want = m(images[16])
    cos = float(torch.nn.functional.cosine_similarity(first.flatten().double(), want.flatten().double(), 0))
    assert cos >= 0.99, cos
    # A warm start splits it from its split alias: no export, no quantization, no compile.
    torch._dynamo.reset()
    qnnx_backend.STATS.clear()
    again, _ = compiled_partitions(m, images[16], **options)
    stats = dict(qnnx_backend.STATS)
    assert (stats.get("exports", 0), stats.get("quantizations", 0), stats.get("compiles", 0)) == (0, 0, 0), stats
    torch.testing.assert_close(again, first)


class WideDetCNN(DetCNN):
    """DetCNN with 32 channels throughout: on [1, 3, 48, 48] each conv island takes hundreds of
    us eagerly, several times a QNN call (tens of us on the emulator here)."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, padding=1)
        self.c2 = nn.Conv2d(32, 32, 3, padding=1)
        self.c3 = nn.Conv2d(32, 32, 3, padding=1)


class PooledAlternating(nn.Module):
    """A wide conv block pooled to [1, 32], then asin (refused) alternating with islands of two
    elementwise ops on 32 numbers: each island takes a few us eagerly, well under one QNN call."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, padding=1)
        self.c2 = nn.Conv2d(32, 32, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.c2(torch.relu(self.c1(x)))).mean((2, 3))
        for _ in range(3):
            y = torch.asin(torch.tanh(y) * 0.5)
        return y


def split_of(model, x, **options):
    """(output, the Partitioned of ``model``'s one FX graph) after a call with ``options``."""
    return compiled_graph(model, x, {**MEASURED, **options})


@pytest.fixture
def fresh_call_cost(monkeypatch):
    """No call cost measured yet in this process (it is measured once per process and target)."""
    from qnnx_backend.partitioning import split

    monkeypatch.setattr(split, "_CALL_COSTS", {})


@pytest.mark.htp
def test_measured_cost_keeps_islands_far_above_a_qnn_call_on_qnn(fresh_call_cost):
    torch.manual_seed(0)
    m, x = WideDetCNN().eval(), torch.randn(1, 3, 48, 48)
    [report] = qnnx_backend.explain(m, (x,), MEASURED)
    cost = report["call_cost_us"]
    assert cost is not None and cost > 0, report
    assert [len(p) for p in report["partitions"]] == [5, 6], report
    assert all(t > cost for t in report["partition_eager_us"]), report
    assert list(report["eager"]) == ["d"], report
    # The compile in the same process weighs the islands against the same measurement.
    got, split = split_of(m, x)
    with torch.inference_mode():
        assert_close_to_eager(got, m(x), rel=2e-2)
    assert split.plan.call_cost_us == cost and split.plan.cost_source == "measured"
    stats = qnnx_backend.STATS
    assert (stats["call_cost_probes"], stats["partitions"], stats["compiles"]) == (1, 2, 1), stats
    assert "QNN call cost" in split.plan.text() and "eager " in split.plan.text()


@pytest.mark.htp
def test_islands_cheaper_than_a_qnn_call_stay_eager(fresh_call_cost):
    torch.manual_seed(0)
    m, x = PooledAlternating().eval(), torch.randn(1, 3, 48, 48)
    # min_partition_size=1: the node count lets every island through, so what keeps the small
    # ones eager is the measured cost alone.
    [off] = qnnx_backend.explain(m, (x,), {**MEASURED, "min_partition_size": 1, "partition_cost": 0})
    assert [len(p) for p in off["partitions"]] == [7, 2, 2] and off["call_cost_us"] is None, off
    [report] = qnnx_backend.explain(m, (x,), {**MEASURED, "min_partition_size": 1})
    cost = report["call_cost_us"]
    assert [len(p) for p in report["partitions"]] == [7], report
    assert report["partition_eager_us"][0] > cost, report
    small = [n for p in off["partitions"][1:] for n in p]
    for name in small:
        why = report["eager"][name]
        assert "island eager time " in why and f"< measured QNN call cost {cost:.1f} us" in why, why
        assert float(why.split("island eager time ")[1].split(" us")[0]) < cost, why
    got, split = split_of(m, x, min_partition_size=1)
    with torch.inference_mode():
        assert_close_to_eager(got, m(x), rel=2e-2)
    assert len(split.plan.partitions) == 1 and qnnx_backend.STATS["partitions"] == 1


@pytest.mark.htp
def test_a_fixed_partition_cost_is_the_threshold():
    torch.manual_seed(0)
    m, x = WideDetCNN().eval(), torch.randn(1, 3, 48, 48)
    [report] = qnnx_backend.explain(m, (x,), {**MEASURED, "partition_cost": 1e9})
    assert report["partitions"] == [] and report["call_cost_us"] == 1e9, report
    assert "< partition_cost 1000000000.0 us" in report["eager"]["conv2d"], report
    assert "stays eager" in report["reasons"][0] or "worth a QNN call" in report["reasons"][0], report
    assert qnnx_backend.STATS["call_cost_probes"] == 0


@pytest.mark.htp
def test_a_warm_start_reuses_the_cost_decision_without_measuring(tmp_path, fresh_call_cost):
    import json

    from qnnx_backend.partitioning import split

    torch.manual_seed(0)
    m, x = WideDetCNN().eval(), torch.randn(1, 3, 48, 48)
    options = {"cache": True, "cache_dir": str(tmp_path)}
    first, cold = split_of(m, x, **options)
    assert qnnx_backend.STATS["call_cost_probes"] == 1 and len(cold.plan.partitions) == 2
    [alias] = list((tmp_path / "fx").glob("*.split.json"))
    record = json.loads(alias.read_text())["plan"]
    assert record["rule"] == {"min_partition_size": 3, "partition_cost": "measure"}, record
    assert record["cost"]["call_cost_ns"] == round(cold.plan.call_cost_us * 1000), record
    # A new process: no measured cost, no dynamo cache.
    split._CALL_COSTS.clear()
    torch._dynamo.reset()
    qnnx_backend.STATS.clear()
    again, warm = split_of(m, x, **options)
    stats = dict(qnnx_backend.STATS)
    assert (stats.get("call_cost_probes", 0), stats.get("exports", 0), stats.get("compiles", 0)) == (0, 0, 0), stats
    # The same numbers (a new measurement would differ), so the same decision and report.
    assert warm.plan.report() == cold.plan.report()
    torch.testing.assert_close(again, first)
    # Another partition_cost may choose other partitions than the cached context holds: the
    # split alias is not used (the graph is exported and weighed again).
    torch._dynamo.reset()
    qnnx_backend.STATS.clear()
    _, other = split_of(m, x, partition_cost=0, **options)
    assert qnnx_backend.STATS["exports"] >= 1 and other.plan.call_cost_us is None


@pytest.mark.parametrize("bad", ["fast", -1, float("nan"), float("inf"), True, None, [1]])
def test_partition_cost_is_checked(bad):
    with pytest.raises(ValueError, match="partition_cost"):
        qnnx_backend.parse_options({"partition_cost": bad})


@pytest.mark.parametrize("good", ["measure", 0, 50, 12.5])
def test_partition_cost_values(good):
    assert qnnx_backend.parse_options({"partition_cost": good}).partition_cost == good


class ClampDet(nn.Module):
    """A conv clamped below by a tensor input (ONNX Clip whose `min` is a graph input: the HTP
    needs it as a constant, so only fix_inputs makes it run), a det, then a conv block."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x, lo):
        y = torch.relu(torch.clamp(self.c1(x), min=lo) * 2)
        d = torch.linalg.det(y[..., :3, :3])
        y = torch.tanh(y) * torch.sigmoid(d)[..., None, None]
        return torch.relu(self.c2(y)).mean((2, 3))


@pytest.mark.htp
@pytest.mark.parametrize("key", ["lo", "l_lo_", "input_1"])
def test_a_graph_with_fix_inputs_is_partitioned_with_the_value_bound_where_it_is_read(key):
    torch.manual_seed(0)
    m = ClampDet().eval()
    x, lo = torch.randn(1, 3, 8, 8), torch.tensor(0.1)
    # Without the fixed value the clamp is refused too and stays eager.
    [free] = qnnx_backend.explain(m, (x, lo), OPTIONS)
    assert "clamp" in free["eager"] and "must be a constant" in free["eager"]["clamp"], free
    made = []

    def backend(gm, inputs):
        made.append(qnnx_backend.qnn_backend(gm, inputs, options={**OPTIONS, "fix_inputs": {key: 0.1}}))
        return made[-1]

    compiled = torch.compile(m, backend=backend)
    got, ours = run_with_warnings(compiled, x, lo)
    with torch.inference_mode():
        assert_close_to_eager(got, m(x, lo), rel=2e-2)
    [msg] = ours
    assert "2 QNN partition(s)" in msg and "1 FX node(s) on the CPU" in msg and "Det" in msg, msg
    stats = qnnx_backend.STATS
    assert (stats["partitions"], stats["compiles"], stats["fallbacks"]) == (2, 1, 0), stats
    [graph] = made[0].graphs.values()
    parts = [p for name, p in graph.module.named_children() if name.startswith("qnn_partition_")]
    # The partition that reads lo has it fixed under its placeholder's name (a whole-graph
    # name such as input_1 would name another input of a partition); the other has none.
    assert [p.settings.fix_inputs for p in parts] == [{"l_lo_": 0.1}, None], [p.settings.fix_inputs for p in parts]
    # The value is still checked at each call of the partition.
    with torch.inference_mode(), pytest.raises(qnnx_backend.exceptions.InputError, match="assumes 0.1"):
        compiled(x, torch.tensor(0.5))


@pytest.mark.htp
@pytest.mark.parametrize("soc", [60, "QCS6490"])
def test_the_call_cost_is_measured_once_per_target_also_without_a_float_path(soc, fresh_call_cost):
    from qnnx_backend.compiling.qnn_callable import QnnCallable

    # QCS6490 (v68) runs quantized graphs only: the probe is an int32 graph, which it runs.
    s = qnnx_backend.parse_options({"device": "npu", "soc_model": soc})
    cost = QnnCallable.call_cost_us("npu", s)
    assert cost > 0 and qnnx_backend.STATS["call_cost_probes"] == 1
    assert QnnCallable.call_cost_us("npu", s) == cost and qnnx_backend.STATS["call_cost_probes"] == 1
