"""Python numbers a graph returns beside its tensors (qnnx_backend.compiling.scalars): dynamo
returns an int that the model bumps on an argument's attribute at every call (transformers'
sliding-window cache layers, Gemma 2/3, keep ``cumulative_length_int``). Both ONNX exporters
refused such a graph ("output 1 (7 ...", "'int' object has no attribute 'name'"); now the number
is computed on the host and the int leaves the compiled signature, so a new value compiles no
new graph."""

import pytest
import torch

import qnnx_backend

pytestmark = pytest.mark.htp


class State:
    def __init__(self):
        self.length = 0


class Stepper(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x, state):
        state.length = state.length + x.shape[0]
        return self.lin(x) * 2


def test_an_int_bumped_at_every_call_is_computed_on_the_host_with_one_graph():
    torch.manual_seed(0)
    m = Stepper().eval()
    compiled = torch.compile(m, backend="qnn", options={"strict": True, "device": "npu", "soc_model": 60})
    ours, eager = State(), State()
    with torch.no_grad():
        for _ in range(6):
            x = torch.randn(1, 8)
            got, want = compiled(x, ours), m(x, eager)
            assert ours.length == eager.length
            assert got.shape == want.shape and got.dtype == want.dtype
            assert (got - want).abs().max().item() < 1e-2 * want.abs().max().item()
    # The first call's graph specialises the int; after dynamo makes it dynamic, one graph
    # serves every later value (before: a compile per value, had the export worked).
    assert qnnx_backend.STATS["compiles"] == 2, qnnx_backend.STATS
    assert qnnx_backend.STATS["fallbacks"] == 0


def test_numbers_computed_from_tensor_values_are_refused_not_run_on_the_host():
    from qnnx_backend.compiling import scalars
    from qnnx_backend.exceptions import LoweringError

    seen = []

    def backend(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    def f(x, n):
        return x * 2, n + int(x.shape[0])

    torch.compile(f, backend=backend, dynamic=True)(torch.randn(3), 4)
    gm = seen[-1]
    reduced, host = scalars.split(gm)
    assert host is not None and host.positions == [1]
    out = next(n for n in reduced.graph.nodes if n.op == "output")
    assert len(out.args[0]) == 1
    # A number dynamo traced from a tensor's values (not its size) cannot leave the graph.
    g = torch.fx.Graph()
    x = g.placeholder("x")
    x.meta["example_value"] = torch.empty(2)
    s = g.call_method("sum", (x,))
    s.meta["example_value"] = torch.empty(())
    item = g.call_method("item", (s,))
    item.meta["example_value"] = 1.0
    g.output((x, item))
    with pytest.raises(LoweringError, match="computed from tensor values"):
        scalars.split(torch.fx.GraphModule(torch.nn.Module(), g))
