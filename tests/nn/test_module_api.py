"""ferro.nn.Module's PyTorch surface: registration rules, traversal, apply, get_*, conversion
(to/float/double/half), state_dict options, reprs, containers, and the layers' PyTorch
signatures (device/dtype keywords, positional arguments, initialization)."""

import copy
from collections import OrderedDict

import numpy as np
import pytest

import ferro
import ferro.nn as nn
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DeviceError,
    DtypeError,
    IndexOutOfRangeError,
    NotSupportedError,
    ShapeError,
)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.register_buffer("count", ferro.tensor([5]))  # int64
        self.register_buffer("scratch", ferro.zeros(2), persistent=False)

    def forward(self, x):
        return self.fc(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Block()
        self.b = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
        self.shared = self.a  # one module under two names
        self.register_buffer("mean", ferro.ones(2))


def test_buffers_persistent_and_not():
    m = Net()
    assert [n for n, _ in m.named_buffers()] == ["mean", "a.count", "a.scratch"]
    assert list(m.state_dict()) == [
        "mean",
        "a.count",
        "a.fc.weight",
        "a.fc.bias",
        "b.0.weight",
        "b.0.bias",
        "shared.count",
        "shared.fc.weight",
        "shared.fc.bias",
    ]
    # registering again switches persistence; assigning a tensor keeps it a buffer
    m.a.register_buffer("scratch", ferro.zeros(2))
    assert "a.scratch" in m.state_dict()
    m.a.register_buffer("scratch", ferro.zeros(2), persistent=False)
    m.a.scratch = ferro.full((2,), 7.0)
    assert "a.scratch" not in m.state_dict() and m.a.get_buffer("scratch").tolist() == [7.0, 7.0]
    assert [n for n, _ in m.named_buffers(recurse=False)] == ["mean"]
    assert len(list(m.buffers())) == 3
    # a parameter assigned over a non-persistent buffer's name drops it from the set
    m.a.scratch = nn.Parameter(ferro.zeros(2))
    assert "scratch" not in m.a._non_persistent_buffers_set and "a.scratch" in m.state_dict()


def test_assignment_to_registered_names_keeps_their_kind():
    m = Block()
    with pytest.raises(ArgumentTypeError, match="as parameter 'weight'"):
        m.fc.weight = ferro.zeros(2, 3)
    with pytest.raises(ArgumentTypeError, match="as buffer 'count'"):
        m.count = np.zeros(1)
    with pytest.raises(ArgumentTypeError, match="as child module 'fc'"):
        m.fc = ferro.zeros(1)
    m.fc.bias = None  # declared but absent, still a parameter name
    assert "bias" in m.fc._parameters and m.fc.bias is None
    assert [n for n, _ in m.named_parameters()] == ["fc.weight"]
    m.fc = None
    assert m.fc is None and list(m.children()) == []
    del m.count
    assert not hasattr(m, "count")


def test_register_checks_names():
    m = Block()
    with pytest.raises(ArgumentError, match="cannot contain '.'"):
        m.register_buffer("a.b", ferro.zeros(1))
    with pytest.raises(ArgumentError, match="empty string"):
        m.register_parameter("", None)
    with pytest.raises(ArgumentTypeError, match="must be a str"):
        m.add_module(3, nn.ReLU())
    with pytest.raises(ArgumentError, match="already has an attribute 'forward'"):
        m.register_module("forward", nn.ReLU())
    with pytest.raises(ArgumentTypeError, match="must be a Tensor or None"):
        m.register_buffer("x", [1.0])
    with pytest.raises(ArgumentTypeError, match="must be a ferro.nn.Parameter"):
        m.register_parameter("w", ferro.zeros(1))
    m.register_module("act", nn.Tanh())
    assert m.act is m.get_submodule("act") and "act" in dir(m)


def test_traversal_options():
    m = Net()
    assert [n for n, _ in m.named_modules()] == ["", "a", "a.fc", "b", "b.0", "b.1"]
    every = [n for n, _ in m.named_modules(remove_duplicate=False)]
    assert every == ["", "a", "a.fc", "b", "b.0", "b.1", "shared", "shared.fc"]
    assert [n for n, _ in m.named_modules(prefix="net")][:2] == ["net", "net.a"]
    assert [n for n, _ in m.named_modules(memo={m.b})] == ["", "a", "a.fc"]
    assert [n for n, _ in m.named_children()] == ["a", "b"]  # "shared" is "a" again
    names = [n for n, _ in m.named_parameters(prefix="p", remove_duplicate=False)]
    assert names[-2:] == ["p.shared.fc.weight", "p.shared.fc.bias"] and len(names) == 6
    assert [n for n, _ in m.a.named_parameters(recurse=False)] == []


def test_apply_visits_children_first():
    m = Net()
    seen = []
    assert m.apply(lambda mod: seen.append(type(mod).__name__)) is m
    assert seen == ["Linear", "Block", "Linear", "ReLU", "Sequential", "Net"]
    m.apply(lambda mod: nn.init.zeros_(mod.bias) if isinstance(mod, nn.Linear) else None)
    assert m.a.fc.bias.tolist() == [0.0, 0.0] and m.b[0].bias.tolist() == [0.0, 0.0]


def test_get_submodule_parameter_buffer():
    m = Net()
    assert m.get_submodule("") is m and m.get_submodule("b.0") is m.b[0]
    assert m.get_parameter("a.fc.weight") is m.a.fc.weight
    assert m.get_buffer("a.count").tolist() == [5]
    with pytest.raises(AttributeError, match="Sequential has no attribute `7`"):
        m.get_submodule("b.7")
    with pytest.raises(AttributeError, match="`mean` is not an nn.Module"):
        m.get_submodule("mean.x")
    with pytest.raises(AttributeError, match="`count` is not an nn.Parameter"):
        m.get_parameter("a.count")
    with pytest.raises(AttributeError, match="`fc` is not a buffer"):
        m.get_buffer("a.fc")


class _Recorder(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = []

    def train(self, mode=True):
        self.calls.append(mode)
        return super().train(mode)


def test_train_eval_reach_overrides_and_requires_grad_freezes():
    m = nn.Sequential(nn.Linear(2, 2), _Recorder())
    m.eval()
    m.train()
    assert m[1].calls == [False, True] and m[0].training
    with pytest.raises(ArgumentTypeError, match="mode must be a bool"):
        m.train(1)
    assert m.requires_grad_(False) is m
    assert not any(p.requires_grad for p in m.parameters())


def test_float_double_convert_floats_keep_parameters_and_grads():
    m = Block()
    w = m.fc.weight
    m(ferro.ones(1, 3)).sum().backward()
    assert m.double() is m
    assert m.fc.weight is w and w.dtype == np.float64 and w.grad.dtype == np.float64
    assert m.count.dtype == np.int64 and m.scratch.dtype == np.float64
    np.testing.assert_array_equal(w.grad.numpy(), [[1, 1, 1], [1, 1, 1]])
    assert m(ferro.ones(1, 3, dtype=ferro.float64)).dtype == np.float64
    m.float()
    assert w.dtype == np.float32 and m.count.dtype == np.int64
    with pytest.raises(NotSupportedError, match="no float16"):
        m.half()
    with pytest.raises(NotSupportedError, match="no bfloat16"):
        m.bfloat16()


def test_to_accepts_pytorchs_forms():
    m = Block()
    m.to(ferro.float64)
    assert m.fc.weight.dtype == np.float64
    m.to("cpu", np.float32)
    assert m.fc.weight.dtype == np.float32
    m.to(ferro.zeros(1, dtype=ferro.float64))  # a tensor's device and dtype
    assert m.fc.bias.dtype == np.float64
    m.to(device="cpu", dtype="float32", non_blocking=True)
    assert m.fc.bias.dtype == np.float32 and m.cpu() is m
    with pytest.raises(DtypeError, match="only floating point"):
        m.to(ferro.int64)
    with pytest.raises(NotSupportedError, match="float16"):
        m.to(np.float16)
    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        m.to("tpu")
    with pytest.raises(ArgumentTypeError, match="expected"):  # PyTorch: TypeError too
        m.to(np.float32, np.float64)
    with pytest.raises(ArgumentTypeError, match="memory_format"):
        m.to(memory_format=None)


@pytest.mark.skipif(ferro.cuda.is_available(), reason="checks the no-CUDA refusal")
def test_failed_move_leaves_the_module_as_it_was():
    m = Block()
    before = {k: v.numpy().copy() for k, v in m.state_dict().items()}
    with pytest.raises(DeviceError, match="CUDA is not available"):
        m.to("cuda", ferro.float64)
    with pytest.raises(DeviceError, match="CUDA is not available"):
        m.cuda(0)
    for k, v in m.state_dict().items():
        assert v.dtype == before[k].dtype and v.device == "cpu"
    with pytest.raises(DeviceError, match="CUDA is not available"):
        nn.Linear(2, 2, device="cuda")


def test_state_dict_prefix_keep_vars_destination():
    m = Block()
    sd = m.state_dict(prefix="enc.")
    assert list(sd) == ["enc.count", "enc.fc.weight", "enc.fc.bias"]
    assert not sd["enc.fc.weight"].requires_grad
    kept = m.state_dict(keep_vars=True)
    assert kept["fc.weight"] is m.fc.weight
    dest = {"other": 1}
    assert m.state_dict(destination=dest) is dest and list(dest)[0] == "other"


def test_load_state_dict_assign_replaces_tensors():
    m = Block()
    m.fc.weight.requires_grad_(False)
    w, b = np.full((2, 3), 2.0), np.arange(2.0)
    res = m.load_state_dict(
        {"fc.weight": w, "fc.bias": ferro.tensor(b), "count": np.array([9])}, assign=True
    )
    assert tuple(res) == ([], [])
    assert isinstance(m.fc.weight, nn.Parameter) and not m.fc.weight.requires_grad
    assert m.fc.bias.requires_grad and m.fc.weight.dtype == np.float64  # the value's dtype
    assert np.shares_memory(m.fc.weight._data, w) and m.count.tolist() == [9]
    with pytest.raises(ShapeError, match="'fc.bias' has shape"):
        m.load_state_dict({"fc.bias": np.zeros(3)}, strict=False, assign=True)


def test_deepcopy_gives_an_independent_module():
    m = Net()
    c = copy.deepcopy(m)
    assert c.shared is c.a and c.a.fc.weight is not m.a.fc.weight
    np.testing.assert_array_equal(c.a.fc.weight.detach().numpy(), m.a.fc.weight.detach().numpy())
    c.a.fc.weight._data[...] = 0
    assert m.a.fc.weight.detach().numpy().any()


REPR = """Net(
  (a): Block(
    (fc): Linear(in_features=3, out_features=2, bias=True)
  )
  (b): Sequential(
    (0): Linear(in_features=2, out_features=2, bias=True)
    (1): ReLU()
  )
  (shared): Block(
    (fc): Linear(in_features=3, out_features=2, bias=True)
  )
)"""


def test_repr_nests_like_pytorch():
    assert repr(Net()) == REPR
    lst = nn.ModuleList([nn.Linear(1, 1), nn.Linear(1, 1), nn.Tanh()])
    assert repr(lst) == (
        "ModuleList(\n  (0-1): 2 x Linear(in_features=1, out_features=1, bias=True)\n"
        "  (2): Tanh()\n)"
    )

    class Multi(nn.Module):
        def extra_repr(self):
            return "a=1\nb=2"

    assert repr(Multi()) == "Multi(\n  a=1\n  b=2\n)"


def _torch_pair():
    import torch

    def build(nn_):
        return nn_.Sequential(
            OrderedDict(
                fc=nn_.Linear(4, 3, bias=False),
                act=nn_.LeakyReLU(0.2, True),
                inner=nn_.Sequential(nn_.GELU("tanh"), nn_.Dropout(0.25), nn_.Softmax(dim=1)),
                emb=nn_.Embedding(10, 3, padding_idx=-2),
                blocks=nn_.ModuleList([nn_.ReLU() for _ in range(3)] + [nn_.Identity()]),
                misc=nn_.ModuleDict(
                    {
                        "elu": nn_.ELU(),
                        "ht": nn_.Hardtanh(-2.0, 2.0),
                        "sp": nn_.Softplus(),
                        "pr": nn_.PReLU(3),
                        "fl": nn_.Flatten(),
                        "ls": nn_.LogSoftmax(-1),
                        "selu": nn_.SELU(inplace=True),
                        "loss": nn_.CrossEntropyLoss(),
                    }
                ),
            )
        )

    return build(nn), build(torch.nn)


@pytest.mark.torch
def test_repr_and_names_match_pytorch():
    f, t = _torch_pair()
    assert repr(f) == repr(t)
    assert [n for n, _ in f.named_modules()] == [n for n, _ in t.named_modules()]
    assert [n for n, _ in f.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert list(f.state_dict()) == list(t.state_dict())


@pytest.mark.torch
def test_state_dict_keys_with_shared_modules_match_pytorch():
    import torch

    class T(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(3, 2)
            self.b = torch.nn.Sequential(self.a, torch.nn.Linear(2, 2))
            self.register_buffer("m", torch.zeros(1))
            self.register_buffer("n", torch.zeros(1), persistent=False)

    class F(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(3, 2)
            self.b = nn.Sequential(self.a, nn.Linear(2, 2))
            self.register_buffer("m", ferro.zeros(1))
            self.register_buffer("n", ferro.zeros(1), persistent=False)

    t, f = T(), F()
    assert list(f.state_dict(prefix="x.")) == list(t.state_dict(prefix="x."))
    for kw in ({}, {"remove_duplicate": False}):
        assert [n for n, _ in f.named_modules(**kw)] == [n for n, _ in t.named_modules(**kw)]
        assert [n for n, _ in f.named_parameters(**kw)] == [n for n, _ in t.named_parameters(**kw)]
    order = []
    t.apply(lambda mod: order.append(type(mod).__name__))
    seen = []
    f.apply(lambda mod: seen.append(type(mod).__name__))
    assert seen[:-1] == order[:-1] == ["Linear", "Linear", "Linear", "Sequential"]


def test_linear_dtype_and_init_distribution():
    lin = nn.Linear(400, 300, dtype=ferro.float64)
    assert lin.weight.dtype == np.float64 and lin.bias.dtype == np.float64
    w, b = lin.weight.detach().numpy(), lin.bias.detach().numpy()
    bound = 1 / np.sqrt(400)
    # PyTorch's init: U(-bound, bound) for both (kaiming_uniform with a=sqrt(5))
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert abs(w.std() - bound / np.sqrt(3)) < 0.01 * bound and abs(w.mean()) < 0.01 * bound
    assert np.abs(b).max() <= bound and np.abs(b).max() > 0.9 * bound
    assert nn.Linear(0, 2).weight.shape == (2, 0)
    nobias = nn.Linear(2, 2, bias=False, device="cpu")
    assert nobias.bias is None and [n for n, _ in nobias.named_parameters()] == ["weight"]


def test_layers_take_device_and_dtype():
    emb = nn.Embedding(20, 4, padding_idx=-1, dtype=ferro.float64, device="cpu")
    assert emb.weight.dtype == np.float64 and emb.padding_idx == 19
    assert emb.weight.detach().numpy()[19].tolist() == [0.0] * 4
    pr = nn.PReLU(3, 0.1, dtype=ferro.float64)
    assert pr.weight.dtype == np.float64 and pr.weight.tolist() == [0.1] * 3
    with pytest.raises(NotSupportedError, match="max_norm"):
        nn.Embedding(3, 2, max_norm=1.0)
    pre = nn.Embedding.from_pretrained(ferro.ones(3, 2))
    assert not pre.weight.requires_grad and pre(ferro.tensor([1])).shape == (1, 2)


@pytest.mark.torch
def test_layer_init_matches_pytorchs_distribution():
    import torch

    torch.manual_seed(0)
    tw = torch.nn.Linear(256, 512).weight.detach().numpy()
    fw = nn.Linear(256, 512).weight.detach().numpy()
    for stat in (np.min, np.max, np.std):
        assert stat(fw) == pytest.approx(stat(tw), rel=0.02, abs=1e-3)
    te = torch.nn.Embedding(300, 300).weight.detach().numpy()
    fe = nn.Embedding(300, 300).weight.detach().numpy()
    assert fe.std() == pytest.approx(te.std(), rel=0.01)


def test_activation_modules_take_pytorchs_positional_arguments():
    x = ferro.tensor([[-2.0, 0.5, 3.0]])
    np.testing.assert_allclose(nn.LeakyReLU(0.2)(x).numpy(), [[-0.4, 0.5, 3.0]])
    np.testing.assert_allclose(nn.Hardtanh(-1.0, 2.0)(x).numpy(), [[-1.0, 0.5, 2.0]])
    np.testing.assert_allclose(nn.ReLU()(x).numpy(), [[0.0, 0.5, 3.0]])
    assert x.tolist() == [[-2.0, 0.5, 3.0]]
    assert nn.ReLU(inplace=True)(x) is x  # written into the input, as in PyTorch
    assert x.tolist() == [[0.0, 0.5, 3.0]]
    np.testing.assert_allclose(nn.Softmax(1)(x).numpy().sum(), 1.0, rtol=1e-6)
    with pytest.warns(UserWarning, match="implicit dimension"):
        y = nn.Softmax()(ferro.zeros(2, 3))  # PyTorch's legacy choice: dim 1 for 2-D
    np.testing.assert_allclose(y.numpy(), np.full((2, 3), 1 / 3), rtol=1e-6)
    with pytest.raises(ArgumentTypeError, match="unexpected keyword argument 'slope'"):
        nn.LeakyReLU(slope=0.1)
    with pytest.raises(ArgumentTypeError, match="multiple values for argument 'alpha'"):
        nn.ELU(0.5, alpha=0.5)
    with pytest.raises(ArgumentTypeError, match="at most 2 arguments"):
        nn.LeakyReLU(0.1, False, 3)


def test_loss_modules_take_weights_as_buffers_and_legacy_flags():
    w = ferro.tensor([1.0, 2.0, 0.5])
    ce = nn.CrossEntropyLoss(w)
    assert ce.weight is w and list(ce.state_dict()) == ["weight"]
    x, y = ferro.randn(4, 3), ferro.tensor([0, 1, 2, 1])
    np.testing.assert_allclose(ce(x, y).item(), ferro.cross_entropy(x, y, weight=w).item())
    a, b = ferro.tensor([1.0, 2.0]), ferro.tensor([0.0, 0.0])
    assert nn.MSELoss(reduce=False)(a, b).tolist() == [1.0, 4.0]
    assert nn.MSELoss(size_average=False)(a, b).item() == 5.0
    assert nn.L1Loss(None, None, "sum")(a, b).item() == 3.0


def test_sequential_container_operations():
    a, b, c = nn.Linear(1, 1), nn.ReLU(), nn.Tanh()
    s = nn.Sequential(OrderedDict(first=a, second=b, third=c))
    assert [n for n, _ in s[1:].named_children()] == ["second", "third"]  # names kept
    assert s[-1] is c and len(s) == 3
    with pytest.raises(IndexOutOfRangeError, match="index 3 is out of range"):
        s[3]
    s[0] = nn.Identity()
    assert isinstance(s.first, nn.Identity)
    seq = nn.Sequential(a, b)
    seq.insert(1, c)
    assert list(seq) == [a, c, b]
    assert seq.pop(0) is a and list(seq._modules) == ["0", "1"]
    seq.extend([a]).append(nn.ReLU())
    del seq[1:3]
    assert list(seq._modules) == ["0", "1"] and seq[0] is c
    assert len(seq + nn.Sequential(a)) == 3


def test_module_list_and_dict_operations():
    a, b, c = nn.ReLU(), nn.Tanh(), nn.Sigmoid()
    lst = nn.ModuleList([a])
    lst += [b]
    lst.insert(0, c)
    assert list(lst) == [c, a, b] and list(lst._modules) == ["0", "1", "2"]
    assert isinstance(lst[1:], nn.ModuleList) and list(lst[1:]) == [a, b]
    lst[-1] = c
    assert lst[2] is c and lst.pop() is c and len(lst) == 2
    del lst[0]
    assert list(lst) == [a] and len(lst + nn.ModuleList([b])) == 2
    d = nn.ModuleDict([("x", a)])
    d.update({"y": b})
    assert "y" in d and list(d) == ["x", "y"] and d.pop("x") is a
    del d["y"]
    assert len(d) == 0
