"""The hook contract (docs/hooks.md): one documented order, handles, errors naming the hook."""

import numpy as np
import pytest

import ferro
from ferro.errors import GradientError


def test_documented_order_of_every_hook_kind():
    events = []
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2.0
    y = (h * h).sum()
    h.register_hook(lambda g: events.append("h tensor hook 1"))
    h.register_hook(lambda g: events.append("h tensor hook 2"))
    h.retain_grad()
    node = h.grad_fn  # MulBackward of x * 2
    node.register_prehook(lambda gys: events.append("node pre-hook"))
    node.register_hook(lambda gxs, gys: events.append("node post-hook"))
    x.register_hook(lambda g: events.append("x tensor hook"))

    def post_acc(t):
        events.append(("x post-accumulate", t.grad.tolist(), h.grad))

    x.register_post_accumulate_grad_hook(post_acc)
    y.backward()
    assert events == [
        "h tensor hook 1",
        "h tensor hook 2",
        "node pre-hook",
        "node post-hook",
        "x tensor hook",
        ("x post-accumulate", [8.0, 16.0], None),  # .grad accumulated; retain_grad not yet
    ]
    assert h.grad.tolist() == [4.0, 8.0]  # retain_grad is stored last


def test_tensor_hook_runs_once_on_the_summed_gradient():
    seen = []
    x = ferro.tensor([1.0], requires_grad=True)
    h = x * 1.0
    h.register_hook(lambda g: seen.append(g.tolist()))
    (h * 2.0 + h * 3.0 + h).sum().backward()
    assert seen == [[6.0]]


def test_hook_can_replace_the_gradient():
    x = ferro.tensor([1.0, 1.0], requires_grad=True)
    h = x * 3.0
    h.register_hook(lambda g: g * 10.0)
    h.sum().backward()
    assert x.grad.tolist() == [30.0, 30.0]


def test_node_prehook_and_posthook_can_replace_gradients():
    x = ferro.tensor([1.0], requires_grad=True)
    y = x * 2.0
    y.grad_fn.register_prehook(lambda gys: (gys[0] * 5.0,))
    y.grad_fn.register_hook(lambda gxs, gys: (gxs[0] + 1.0, None))
    y.sum().backward()
    assert x.grad.tolist() == [11.0]


def test_handles_remove_and_removal_during_backward_is_safe():
    calls = []
    x = ferro.tensor([1.0], requires_grad=True)
    h = x * 1.0
    handles = []

    def first(g):
        calls.append("first")
        handles[1].remove()  # remove the second hook while hooks are running

    handles.append(h.register_hook(first))
    handles.append(h.register_hook(lambda g: calls.append("second")))
    h.sum().backward(retain_graph=True)
    assert calls == ["first", "second"]  # this walk had already listed both
    handles[0].remove()
    handles[0].remove()  # removing twice is harmless
    h.sum().backward()
    assert calls == ["first", "second"]


def test_hook_returning_wrong_shape_or_dtype_names_the_hook():
    x = ferro.ones(3, requires_grad=True)

    def bad_shape(g):
        return ferro.ones(2)

    h = x * 1.0
    h.register_hook(bad_shape)
    with pytest.raises(GradientError, match=r"bad_shape.*\(2,\).*\(3,\)"):
        h.sum().backward()
    assert x.grad is None

    def bad_dtype(g):
        return ferro.ones(3, dtype=ferro.float64)

    x.register_hook(bad_dtype)
    with pytest.raises(GradientError, match=r"bad_dtype.*float64"):
        (x * 1.0).sum().backward()


def test_post_accumulate_hook_sees_the_accumulated_grad():
    seen = []
    w = ferro.ones(2, requires_grad=True)
    w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.tolist()))
    (w * 2.0).sum().backward()
    (w * 3.0).sum().backward()
    assert seen == [[2.0, 2.0], [5.0, 5.0]]


def test_next_functions_and_name_for_introspection():
    a = ferro.ones(2, requires_grad=True)
    y = (a.exp() * 2.0).sum()
    assert y.grad_fn.name() == "SumBackward"
    ((mul, _),) = y.grad_fn.next_functions
    assert mul.name() == "MulBackward"
    exp_node, _ = mul.next_functions[0]
    assert exp_node.name() == "ExpBackward" and exp_node.next_functions[0][0] is a
    assert mul.next_functions[1] == (None, 0)  # the scalar 2.0


def test_register_hook_on_tensor_without_grad_raises():
    with pytest.raises(ferro.errors.GraphError):
        ferro.ones(2).register_hook(lambda g: g)
    assert np.isfinite(1.0)
