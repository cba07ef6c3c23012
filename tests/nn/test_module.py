"""ferro.nn: module registration, modes, state dicts, hooks, layers, init, clipping."""

import numpy as np
import pytest

import ferro
import ferro.nn as nn
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DtypeError,
    GraphError,
    ReadOnlyError,
    ShapeError,
)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 3)
        self.act = nn.ReLU()
        self.blocks = nn.ModuleList([nn.Linear(3, 3), nn.Linear(3, 2)])
        self.scale = nn.Parameter(ferro.ones(1))
        self.register_buffer("steps", ferro.zeros(1))

    def forward(self, x):
        h = self.act(self.fc1(x))
        for b in self.blocks:
            h = b(h)
        return h * self.scale


def test_registration_and_traversal():
    m = Net()
    names = [n for n, _ in m.named_parameters()]
    assert names == [
        "scale",
        "fc1.weight",
        "fc1.bias",
        "blocks.0.weight",
        "blocks.0.bias",
        "blocks.1.weight",
        "blocks.1.bias",
    ]
    assert [n for n, _ in m.named_buffers()] == ["steps"]
    assert len(list(m.children())) == 3 and len(list(m.modules())) == 6
    assert m(ferro.randn(5, 4)).shape == (5, 2)
    shared = nn.Linear(2, 2)
    seq = nn.Sequential(shared, shared)
    assert len(list(seq.parameters())) == 2  # each parameter once


def test_train_eval_and_dropout():
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    m.eval()
    assert not m[1].training
    x = ferro.ones(2, 4)
    assert np.array_equal(m(x).detach().numpy(), m(x).detach().numpy())
    m.train()
    assert m[1].training


def test_zero_grad_and_requires_grad():
    m = Net()
    m(ferro.randn(2, 4)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad(set_to_none=False)
    assert all(float(np.abs(p.grad.numpy()).sum()) == 0 for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())


def test_state_dict_round_trip_and_strict_checks():
    a, b = Net(), Net()
    result = b.load_state_dict(a.state_dict())
    assert result == ([], []) and repr(result) == "<All keys matched successfully>"
    x = ferro.randn(3, 4)
    np.testing.assert_array_equal(a(x).detach().numpy(), b(x).detach().numpy())
    sd = a.state_dict()
    assert "steps" in sd
    del sd["fc1.bias"], sd["blocks.1.weight"]
    sd["extra"] = ferro.zeros(1)
    sd["more"] = ferro.zeros(2)
    with pytest.raises(
        ArgumentError,
        match=r"missing keys \['fc1.bias', 'blocks.1.weight'\], "
        r"unexpected keys \['extra', 'more'\]",
    ):
        b.load_state_dict(sd)
    result = b.load_state_dict(sd, strict=False)
    assert result.missing_keys == ["fc1.bias", "blocks.1.weight"]
    assert result.unexpected_keys == ["extra", "more"]
    missing, unexpected = result
    assert (missing, unexpected) == (result.missing_keys, result.unexpected_keys)
    sd = a.state_dict()
    sd["fc1.weight"] = ferro.zeros(2, 2)
    with pytest.raises(ShapeError, match=r"fc1.weight.*\(2, 2\).*\(3, 4\)"):
        b.load_state_dict(sd)


def _snapshot(m):
    return {k: v.numpy().copy() for k, v in m.state_dict().items()}


def _assert_unchanged(m, before):
    after = _snapshot(m)
    assert after.keys() == before.keys()
    for k in before:
        np.testing.assert_array_equal(after[k], before[k], err_msg=k)


@pytest.mark.parametrize("strict", [True, False])
def test_load_state_dict_with_a_bad_last_key_loads_nothing(strict):
    a, b = Net(), Net()
    before = _snapshot(b)
    sd = a.state_dict()
    last = list(sd)[-1]
    assert last == "blocks.1.bias"
    sd[last] = ferro.zeros(5)
    with pytest.raises(ShapeError, match=r"'blocks.1.bias' has shape \(5,\)"):
        b.load_state_dict(sd, strict=strict)
    _assert_unchanged(b, before)
    sd[last] = [0.0, 0.0]
    with pytest.raises(ArgumentTypeError, match=r"'blocks.1.bias' must be a tensor or an array"):
        b.load_state_dict(sd, strict=strict)
    _assert_unchanged(b, before)


class _Counted(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.register_buffer("count", ferro.tensor([3]))  # int64


def test_load_state_dict_checks_dtypes_before_copying_anything():
    m = _Counted()
    before = _snapshot(m)
    sd = {k: v.numpy().astype(np.float64) + 1 for k, v in m.state_dict().items()}
    sd["count"] = np.array([4.5])  # a float cannot go into an int64 buffer
    with pytest.raises(DtypeError, match=r"'count' has dtype float64.*int64"):
        m.load_state_dict(sd)
    _assert_unchanged(m, before)
    sd["count"] = np.array([7], dtype=np.int32)  # a narrower int, a wider float: both cast
    m.load_state_dict(sd)
    assert m.count.dtype == np.int64 and m.count.tolist() == [7]
    assert m.fc.weight.dtype == np.float32
    np.testing.assert_allclose(m.fc.weight.detach().numpy(), before["fc.weight"] + 1, rtol=1e-6)


def test_load_state_dict_refuses_a_read_only_target_before_copying_anything():
    m = nn.Linear(2, 2)
    before = _snapshot(m)
    m.bias._data.flags.writeable = False
    sd = {k: v + 1 for k, v in m.state_dict().items()}
    with pytest.raises(ReadOnlyError, match="'bias'"):
        m.load_state_dict(sd)
    _assert_unchanged(m, before)


def test_load_state_dict_refuses_non_mappings():
    with pytest.raises(ArgumentTypeError, match="expected a mapping"):
        nn.Linear(2, 2).load_state_dict([("weight", ferro.zeros(2, 2))])


def test_load_state_dict_invalidates_graphs_that_saved_the_old_values():
    m = nn.Linear(2, 1)
    loss = m(ferro.ones(1, 2, requires_grad=True)).sum()  # saves the weight for backward
    m.load_state_dict({k: v + 1 for k, v in m.state_dict().items()})
    with pytest.raises(GraphError, match="modified in place"):
        loss.backward()


@pytest.mark.torch
def test_load_state_dict_returns_what_pytorch_returns():
    import torch

    t = torch.nn.Linear(2, 2)
    f = nn.Linear(2, 2)
    t_sd = dict(t.state_dict())
    f_sd = dict(f.state_dict())
    assert repr(f.load_state_dict(f_sd)) == repr(t.load_state_dict(t_sd))
    del t_sd["bias"], f_sd["bias"]
    t_sd["extra"], f_sd["extra"] = torch.zeros(1), ferro.zeros(1)
    t_res, f_res = t.load_state_dict(t_sd, strict=False), f.load_state_dict(f_sd, strict=False)
    assert f_res._fields == t_res._fields
    assert tuple(f_res) == tuple(t_res) == (["bias"], ["extra"])


def test_repr_is_readable():
    text = repr(nn.Sequential(nn.Linear(2, 3), nn.ReLU()))
    assert "(0): Linear(in_features=2, out_features=3, bias=True)" in text and "(1): ReLU()" in text


def test_forward_hooks():
    m = nn.Linear(2, 2)
    calls = []
    h1 = m.register_forward_pre_hook(lambda mod, args: (args[0] * 0.0,))
    h2 = m.register_forward_hook(lambda mod, args, out: calls.append(out.shape) or out + 1.0)
    y = m(ferro.ones(1, 2))
    np.testing.assert_allclose(y.detach().numpy(), m.bias.detach().numpy()[None] + 1.0)
    assert calls == [(1, 2)]
    h1.remove()
    h2.remove()
    m(ferro.ones(1, 2))
    assert calls == [(1, 2)]


@pytest.mark.parametrize("input_requires_grad", [True, False])
def test_full_backward_hook_runs_once_with_both_gradients(input_requires_grad):
    m = nn.Linear(3, 2)
    seen = []
    m.register_full_backward_hook(
        lambda mod, gi, go: seen.append((None if gi[0] is None else gi[0].shape, go[0].shape))
    )
    x = ferro.randn(4, 3, requires_grad=input_requires_grad)
    m(x).sum().backward()
    assert seen == [((4, 3) if input_requires_grad else None, (4, 2))]
    assert m.weight.grad is not None


def test_full_backward_hook_can_replace_grad_input():
    m = nn.Identity()
    m.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 10.0,))
    x = ferro.ones(2, requires_grad=True)
    m(x * 1.0).sum().backward()
    assert x.grad.tolist() == [10.0, 10.0]


def test_module_to_dtype_and_containers():
    m = nn.Sequential(nn.Linear(2, 2))
    m.to(dtype=ferro.float64)
    assert m[0].weight.dtype == np.float64
    assert m(ferro.ones(1, 2, dtype=ferro.float64)).dtype == np.float64
    if not ferro.cuda.is_available():
        with pytest.raises(ferro.errors.DeviceError, match="CUDA is not available"):
            m.to("cuda")
    d = nn.ModuleDict({"a": nn.ReLU()})
    d["b"] = nn.Tanh()
    assert list(d.keys()) == ["a", "b"]
    assert len(list(nn.Sequential(nn.ReLU()).append(d).modules())) == 5


def test_layers_and_activation_modules():
    lin = nn.Linear(5, 3)
    bound = 1 / np.sqrt(5)
    assert np.abs(lin.weight.detach().numpy()).max() <= bound + 1e-6
    emb = nn.Embedding(10, 4, padding_idx=0)
    assert emb(ferro.tensor([[0, 3]])).shape == (1, 2, 4) and emb.weight.tolist()[0] == [0.0] * 4
    x = ferro.randn(2, 3)
    for mod, fn in [
        (nn.GELU(), ferro.gelu),
        (nn.LeakyReLU(negative_slope=0.2), lambda t: ferro.leaky_relu(t, 0.2)),
        (nn.Softmax(axis=1), lambda t: ferro.softmax(t, 1)),
    ]:
        np.testing.assert_allclose(mod(x).numpy(), fn(x).numpy())
    loss = nn.CrossEntropyLoss(label_smoothing=0.1)(x, ferro.tensor([0, 2]))
    np.testing.assert_allclose(
        loss.item(), ferro.cross_entropy(x, ferro.tensor([0, 2]), label_smoothing=0.1).item()
    )
    assert nn.Flatten()(ferro.ones(2, 3, 4)).shape == (2, 12)
    assert nn.PReLU(3)(ferro.randn(2, 3)).shape == (2, 3)


def test_init_functions_use_ferro_generator():
    w = nn.Parameter(ferro.empty(200, 100))
    ferro.manual_seed(3)
    nn.init.xavier_uniform_(w)
    a = w.detach().numpy().copy()
    bound = np.sqrt(6 / 300)
    assert np.abs(a).max() <= bound and np.abs(a).max() > 0.9 * bound
    ferro.manual_seed(3)
    nn.init.xavier_uniform_(w)
    assert np.array_equal(a, w.detach().numpy())
    nn.init.kaiming_normal_(w, nonlinearity="relu")
    assert abs(w.detach().numpy().std() - np.sqrt(2 / 100)) < 0.01
    nn.init.zeros_(w)
    assert not w.detach().numpy().any()


def test_clip_grad_norm_and_value():
    a = nn.Parameter(ferro.zeros(2))
    b = nn.Parameter(ferro.zeros(2))
    a.grad, b.grad = ferro.tensor([3.0, 0.0]), ferro.tensor([0.0, 4.0])
    total = nn.utils.clip_grad_norm_([a, b], 1.0)
    assert isinstance(total, ferro.Tensor) and total.item() == pytest.approx(5.0)
    np.testing.assert_allclose(
        np.sqrt((a.grad.numpy() ** 2).sum() + (b.grad.numpy() ** 2).sum()), 1.0, rtol=1e-4
    )
    nn.utils.clip_grad_value_([a, b], 0.1)
    assert np.abs(np.concatenate([a.grad.numpy(), b.grad.numpy()])).max() <= 0.1


@pytest.mark.parametrize("lib_name", ["ferro", "torch"])
def test_hook_options_match_pytorch(lib_name):
    # with_kwargs, prepend and always_call of the forward hooks; the full backward pre-hook.
    lib = pytest.importorskip(lib_name)

    class Scale(lib.nn.Module):
        def forward(self, x, *, factor=1.0):
            if factor == 0:
                raise ValueError("factor 0")
            return x * factor

    m, calls = Scale(), []
    m.register_forward_hook(lambda mod, a, k, o: calls.append(("kw", dict(k))), with_kwargs=True)
    m.register_forward_hook(lambda mod, a, o: calls.append("first"), prepend=True)
    m.register_forward_pre_hook(
        lambda mod, a, k: ((a[0] * 2,), {**k, "factor": 3.0}), with_kwargs=True
    )
    m.register_forward_hook(lambda mod, a, o: calls.append(("always", o)), always_call=True)
    x = lib.ones(2, requires_grad=True)
    y = m(x, factor=1.0)
    assert y.tolist() == [6.0, 6.0]
    assert calls[:2] == ["first", ("kw", {"factor": 3.0})] and calls[2][0] == "always"
    calls.clear()
    with pytest.raises(ValueError, match="factor 0"):
        m.register_forward_pre_hook(lambda mod, a, k: (a, {"factor": 0}), with_kwargs=True)
        m(x)
    assert calls == [("always", None)]

    n, seen = Scale(), []
    n.register_full_backward_pre_hook(lambda mod, go: (go[0] * 10,))
    n.register_full_backward_hook(lambda mod, gi, go: seen.append((gi[0].tolist(), go[0].tolist())))
    n.register_full_backward_pre_hook(lambda mod, go: seen.append(go[0].tolist()), prepend=True)
    x = lib.ones(2, requires_grad=True)
    n(x, factor=2.0).sum().backward()
    assert seen == [[1.0, 1.0], ([20.0, 20.0], [10.0, 10.0])]
    assert x.grad.tolist() == [20.0, 20.0]


def test_set_submodule_type_to_empty_and_missing_module_methods():
    from ferro.errors import ArgumentTypeError, MissingFeatureError

    net = ferro.nn.Sequential(ferro.nn.Linear(2, 3), ferro.nn.ReLU())
    net.set_submodule("1", ferro.nn.Tanh())
    assert isinstance(net[1], ferro.nn.Tanh)
    net.set_submodule("0.extra", ferro.nn.Identity())
    with pytest.raises(AttributeError):
        net.set_submodule("0.other", ferro.nn.Identity(), strict=True)
    with pytest.raises(AttributeError):
        net.set_submodule("5.x", ferro.nn.Identity())
    with pytest.raises(ArgumentTypeError, match="set_submodule"):
        net.set_submodule("1", lambda x: x)

    bn = ferro.nn.BatchNorm1d(3)  # num_batches_tracked is an int64 buffer
    bn.type(ferro.float64)
    assert bn.weight.dtype == ferro.float64 and bn.num_batches_tracked.dtype == ferro.float64
    bn.type("ferro.FloatTensor")
    assert bn.running_mean.dtype == ferro.float32

    w = net[0].weight
    net.to_empty(device="cpu")
    assert net[0].weight is w and w.shape == (3, 2) and w.dtype == ferro.float32

    for name in ("compile", "xpu"):
        with pytest.raises(MissingFeatureError, match=f"ferro has no Module.'{name}'"):
            getattr(net, name)
    with pytest.raises(AttributeError) as info:
        net.no_such_method  # noqa: B018
    assert type(info.value) is AttributeError
