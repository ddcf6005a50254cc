"""torch.compile on a model built with groupnorm_inline.GroupNorm: one graph (fullgraph=True, zero graph breaks),
our two operators in the traced forward and backward graphs, and the same output and gradients as eager."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from groupnorm_inline import GroupNorm
from groupnorm_inline.csrc.group_norm_cpu import OP_NAMESPACE
from utils import assert_close_report

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


class SmallNet(nn.Module):
    """conv -> GroupNorm -> SiLU -> conv -> GroupNorm (no affine) -> pool -> linear: affine and plain GroupNorm,
    4-D activations, and a gradient that reaches the input through both normalisations."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 12, 3, padding=1)
        self.norm1 = GroupNorm(4, 12)
        self.conv2 = nn.Conv2d(12, 8, 3, padding=1)
        self.norm2 = GroupNorm(2, 8, affine=False)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        x = torch.nn.functional.silu(self.norm1(self.conv1(x)))
        x = self.norm2(self.conv2(x))
        return self.head(x.mean(dim=(2, 3)))


class GraphRecorder:
    """An aot_autograd backend (eager execution) that keeps the forward and backward FX graphs it is given."""

    def __init__(self):
        from torch._dynamo.backends.common import aot_autograd

        self.forward_graphs, self.backward_graphs = [], []
        self.backend = aot_autograd(fw_compiler=self._keep(self.forward_graphs),
                                    bw_compiler=self._keep(self.backward_graphs))

    @staticmethod
    def _keep(store):
        from torch._functorch.aot_autograd import make_boxed_func

        def compiler(graph_module, example_inputs):
            store.append(graph_module)
            return make_boxed_func(graph_module.forward)

        return compiler


def _targets(graphs):
    return {str(node.target) for g in graphs for node in g.graph.nodes if node.op == "call_function"}


def _run(model, x, call=None):
    """Output and gradients of model (called through `call`, e.g. its compiled wrapper) for loss = sum(out^2)."""
    model.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    out = (model if call is None else call)(x)
    out.square().sum().backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    grads["input"] = x.grad
    return out, grads


def _compile_and_compare(device, backend, dynamic=False, batches=(3,), tol=1e-5):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    eager = SmallNet().to(device)
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, backend=backend, fullgraph=True, dynamic=dynamic)
    for batch in batches:
        x = torch.randn(batch, 3, 9, 11, device=device)
        ref_out, ref_grads = _run(eager, x)
        out, grads = _run(compiled_model, x, compiled)
        assert_close_report(out, ref_out, tol, tol, f"compiled output (batch {batch})")
        for name, ref in ref_grads.items():
            scale = max(1.0, ref.abs().max().item())
            assert_close_report(grads[name], ref, tol * scale, tol, f"compiled grad {name} (batch {batch})")
    graph_breaks = sum(counters["graph_break"].values())
    assert graph_breaks == 0, f"{graph_breaks} graph breaks: {dict(counters['graph_break'])}"


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_graphs_hold_our_operators(device):
    """Forward graph: group_norm_forward (twice); backward graph: group_norm_backward (twice), no fallback."""
    recorder = GraphRecorder()
    _compile_and_compare(device, recorder.backend)
    forward_ops, backward_ops = _targets(recorder.forward_graphs), _targets(recorder.backward_graphs)
    assert f"{OP_NAMESPACE}.group_norm_forward.default" in forward_ops, sorted(forward_ops)
    assert f"{OP_NAMESPACE}.group_norm_backward.default" in backward_ops, sorted(backward_ops)
    assert not any("native_group_norm" in t for t in forward_ops | backward_ops)
    calls = sum(1 for g in recorder.backward_graphs for n in g.graph.nodes
                if str(n.target) == f"{OP_NAMESPACE}.group_norm_backward.default")
    assert calls == 2, f"expected one backward call per GroupNorm, found {calls}"


@pytest.mark.parametrize("device", DEVICES)
def test_compile_dynamic_batch(device):
    """dynamic=True: the fake kernels run on symbolic shapes; two batch sizes, one graph each way."""
    _compile_and_compare(device, "aot_eager", dynamic=True, batches=(2, 5))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_inference(device):
    """Under no_grad: one graph holding our forward operator, no backward graph, eager's output."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    recorder = GraphRecorder()
    model = SmallNet().to(device)
    compiled = torch.compile(model, backend=recorder.backend, fullgraph=True)
    x = torch.randn(3, 3, 9, 11, device=device)
    with torch.no_grad():
        out, ref = compiled(x), model(x)
    assert_close_report(out, ref, 1e-5, 1e-5, "compiled no_grad output")
    assert f"{OP_NAMESPACE}.group_norm_forward.default" in _targets(recorder.forward_graphs)
    assert not recorder.backward_graphs
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])


@pytest.mark.parametrize("device", DEVICES)
def test_compile_parameter_gradients_only(device):
    """GroupNorm straight on an input that needs no gradient: the backward graph asks the operator for the
    weight and bias gradients only, and they equal eager nn.GroupNorm's."""
    torch._dynamo.reset()
    recorder = GraphRecorder()
    ours, ref = GroupNorm(4, 12).to(device), nn.GroupNorm(4, 12).to(device)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(12))
        ours.bias.copy_(torch.randn(12))
    ref.load_state_dict(ours.state_dict())
    compiled = torch.compile(ours, backend=recorder.backend, fullgraph=True)
    x = torch.randn(3, 12, 5, 7, device=device)
    compiled(x).square().sum().backward()
    ref(x).square().sum().backward()
    for name in ("weight", "bias"):
        got, expected = getattr(ours, name).grad, getattr(ref, name).grad
        assert_close_report(got, expected, 1e-5 * expected.abs().max().item(), 1e-5, f"compiled grad {name}")
    masks = [n.args[-1] for g in recorder.backward_graphs for n in g.graph.nodes
             if str(n.target) == f"{OP_NAMESPACE}.group_norm_backward.default"]
    assert masks == [[False, True, True]], masks


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_autograd_over_an_eager_graph(device):
    """Compiled autograd (the backward pass traced by Dynamo) over a graph recorded by an eager forward: our
    C++ node runs inside it and gives eager's gradients."""
    from torch._dynamo import compiled_autograd

    torch._dynamo.reset()
    model = SmallNet().to(device)
    x = torch.randn(3, 3, 9, 11, device=device)
    ref_out, ref_grads = _run(model, x)
    model.zero_grad(set_to_none=True)
    xl = x.detach().requires_grad_()
    out = model(xl)
    with compiled_autograd._enable(torch.compile(backend="aot_eager")):
        out.square().sum().backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    grads["input"] = xl.grad
    for name, ref in ref_grads.items():
        assert_close_report(grads[name], ref, 1e-5 * max(1.0, ref.abs().max().item()), 1e-5, f"grad {name}")


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_compile_inductor(device):
    """The default backend (Inductor generates C++/Triton around our operators)."""
    _compile_and_compare(device, "inductor", tol=1e-4)


def test_explain_reports_one_graph():
    torch._dynamo.reset()
    model = SmallNet()
    explanation = torch._dynamo.explain(model)(torch.randn(2, 3, 9, 11))
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
