"""PyTorch's remaining losses and activations, the activations' ``inplace=True``, and
``median``/``diff``/``repeat_interleave``/``Tensor.unfold``, checked against PyTorch (skipped
without it) and, for the gradients, against central differences."""

import warnings

import numpy as np
import pytest

import ferro
import ferro.nn as nn
import ferro.nn.functional as F
from ferro.errors import ArgumentError, GraphError, ShapeError
from ferro.testing.gradcheck import gradcheck

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
A, P, N = (RNG.standard_normal((4, 5)) for _ in range(3))
V = RNG.standard_normal(4)
SIGN = np.array([1.0, -1.0, 1.0, -1.0])
CLASSES = np.array([0, 2, 4, 1])

# (module, constructor arguments, inputs, how many leading inputs PyTorch differentiates)
LOSSES = [
    ("TripletMarginLoss", {}, (A, P, N), 3),
    ("TripletMarginLoss", {"swap": True, "p": 1.0, "reduction": "none"}, (A, P, N), 3),
    ("MarginRankingLoss", {"margin": 0.3}, (V, V[::-1].copy(), SIGN), 2),
    ("HingeEmbeddingLoss", {"reduction": "sum"}, (V, SIGN), 1),
    ("SoftMarginLoss", {}, (V, SIGN), 1),
    ("CosineEmbeddingLoss", {"margin": 0.1}, (A, P, SIGN), 2),
    ("GaussianNLLLoss", {"full": True}, (A, P, np.abs(N) + 0.1), 3),
    ("GaussianNLLLoss", {}, (A, P, np.abs(V)[:, None] * 1e-9), 3),
    ("GaussianNLLLoss", {"reduction": "none"}, (A, P, np.abs(V) + 0.5), 3),
    ("PoissonNLLLoss", {"full": True}, (A, np.abs(P) * 3), 2),
    ("PoissonNLLLoss", {"log_input": False}, (np.abs(A), np.abs(P)), 2),
    ("MultiLabelSoftMarginLoss", {}, (A, (P > 0).astype(float)), 1),
    ("MultiMarginLoss", {}, (A, CLASSES), 1),
    ("MultiMarginLoss", {"p": 2, "margin": 0.5, "weight": np.arange(1.0, 6.0)}, (A, CLASSES), 1),
]


def _kw(kw, lib):
    return {k: lib.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}


@pytest.mark.parametrize(("name", "kw", "arrays", "n_diff"), LOSSES, ids=lambda v: str(v)[:40])
def test_loss_matches_pytorch_value_and_gradient(name, kw, arrays, n_diff):
    ours = [ferro.tensor(a, requires_grad=i < n_diff) for i, a in enumerate(arrays)]
    theirs = [torch.tensor(a, requires_grad=i < n_diff) for i, a in enumerate(arrays)]
    got = getattr(nn, name)(**_kw(kw, ferro))(*ours)
    want = getattr(torch.nn, name)(**_kw(kw, torch))(*theirs)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-10)
    got.sum().backward()
    want.sum().backward()
    for o, t in zip(ours, theirs, strict=True):
        if t.grad is not None:
            np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bce_at_saturated_probabilities_matches_pytorch(dtype):
    # The siamese network example feeds 0-255 pixels: its sigmoid gives exactly 0 and 1, where
    # ferro's gradient was NaN; PyTorch's divides by max(p (1 - p), 1e-12).
    p = np.array([0.0, 1e-30, 0.3, 1 - 1e-7, 1.0, 1.0, 0.0], dtype)
    t = np.array([0.0, 1.0, 0.4, 0.0, 1.0, 0.0, 1.0], dtype)
    w = np.linspace(0.5, 2.0, 7).astype(dtype)
    for kw in ({}, {"weight": w}):
        ours = [ferro.tensor(x, requires_grad=True) for x in (p, t)]
        theirs = [torch.tensor(x, requires_grad=True) for x in (p, t)]
        got = F.binary_cross_entropy(*ours, **_kw(kw, ferro))
        want = torch.nn.functional.binary_cross_entropy(*theirs, **_kw(kw, torch))
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-6)
        got.backward()
        want.backward()
        for o, th in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(o.grad.numpy(), th.grad.numpy(), rtol=1e-6)
    a = ferro.tensor(np.array([0.2, 0.7, 0.9]), requires_grad=True)
    assert gradcheck(lambda a: F.binary_cross_entropy(a, ferro.tensor([0.0, 1.0, 0.5])), (a,))
    with pytest.raises(ArgumentError, match=r"probabilities in \[0, 1\], got values in \[1.5"):
        F.binary_cross_entropy(ferro.tensor([1.5]), ferro.tensor([1.0]))


LEGACY = [
    ("nll_loss", lambda lib, x: (lib.log_softmax(x, 1), lib.tensor([0, 2, 1, 0]))),
    ("cross_entropy", lambda lib, x: (x, lib.tensor([0, 2, 1, 0]))),
    ("mse_loss", lambda lib, x: (x, x.detach() * 0.5)),
    ("l1_loss", lambda lib, x: (x, x.detach() * 0.5)),
    ("smooth_l1_loss", lambda lib, x: (x, x.detach() * 0.5)),
    ("binary_cross_entropy", lambda lib, x: (lib.sigmoid(x), lib.full_like(x, 0.25))),
    ("binary_cross_entropy_with_logits", lambda lib, x: (x, lib.full_like(x, 0.25))),
    ("kl_div", lambda lib, x: (lib.log_softmax(x, 1), lib.softmax(x.detach() * 2, 1))),
]


@pytest.mark.parametrize(("name", "args"), LEGACY, ids=[n for n, _ in LEGACY])
@pytest.mark.parametrize(
    "kw",
    [{"size_average": False}, {"reduce": False}, {"size_average": True, "reduce": True}],
    ids=str,
)
def test_functional_losses_take_the_legacy_size_average_and_reduce(name, args, kw):
    x = np.random.default_rng(0).standard_normal((4, 3))
    ours = getattr(F, name)(*args(ferro, ferro.tensor(x)), **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's deprecation warning
        want = getattr(torch.nn.functional, name)(*args(torch, torch.tensor(x)), **kw)
    np.testing.assert_allclose(ours.numpy(), want.numpy(), rtol=1e-12)


def test_losses_pass_gradcheck():
    a, p, n = (ferro.tensor(x, requires_grad=True) for x in (A, P, N))
    assert gradcheck(lambda a, p, n: F.triplet_margin_loss(a, p, n, swap=True), (a, p, n))
    assert gradcheck(lambda a, p: F.cosine_embedding_loss(a, p, ferro.tensor(SIGN)), (a, p))
    var = ferro.tensor(np.abs(N) + 0.1, requires_grad=True)
    assert gradcheck(lambda a, v: F.gaussian_nll_loss(a, ferro.tensor(P), v), (a, var))
    assert gradcheck(lambda a: F.multi_margin_loss(a, ferro.tensor(CLASSES), p=2), (a,))


def test_loss_bad_reduction_is_a_typed_error():
    a = ferro.tensor(A)
    with pytest.raises(ArgumentError, match="triplet_margin_loss"):
        F.triplet_margin_loss(a, a, a, reduction="avg")
    with pytest.raises(ArgumentError, match="negative"):
        F.gaussian_nll_loss(a, a, -ferro.ones(4, 5))


ACTIVATIONS = [
    ("relu6", ()),
    ("celu", (0.7,)),
    ("threshold", (0.1, 20.0)),
    ("hardshrink", (0.3,)),
    ("softshrink", (0.3,)),
    ("softmin", (1,)),
    ("leaky_relu", (0.2,)),
]


@pytest.mark.parametrize(("name", "args"), ACTIVATIONS, ids=lambda v: str(v))
def test_activation_matches_pytorch(name, args):
    x = RNG.standard_normal((3, 4)) * 4
    got = getattr(F, name)(ferro.tensor(x), *args).numpy()
    np.testing.assert_allclose(got, getattr(torch.nn.functional, name)(torch.tensor(x), *args))


def test_rrelu_eval_uses_the_mean_slope_and_training_draws_slopes_in_range():
    x = ferro.tensor([-2.0, 3.0])
    assert F.rrelu(x, 0.1, 0.3).tolist() == pytest.approx([-0.4, 3.0])
    ferro.manual_seed(0)
    y = F.rrelu(-ferro.ones(1000), 0.1, 0.3, training=True).numpy()
    assert (y <= -0.1).all() and (y >= -0.3).all() and y.std() > 0.03


@pytest.mark.parametrize("name", ["relu", "relu6", "elu", "leaky_relu", "hardtanh", "silu"])
def test_inplace_true_writes_into_the_input_and_returns_it(name):
    x = ferro.tensor([-1.0, 0.5, 7.0])
    want = getattr(torch.nn.functional, name)(torch.tensor([-1.0, 0.5, 7.0]))
    y = getattr(F, name)(x, inplace=True)
    assert y is x
    np.testing.assert_allclose(x.numpy(), want.numpy(), rtol=1e-6)


def test_inplace_positional_and_underscore_forms():
    x = ferro.tensor([-1.0, 2.0])
    assert F.relu(x, True) is x and x.tolist() == [0.0, 2.0]
    z = ferro.tensor([-1.0, 2.0])
    assert F.leaky_relu_(z, 0.5) is z and z.tolist() == [-0.5, 2.0]


def test_inplace_activation_is_recorded_and_differentiable():
    x = ferro.tensor([-1.0, 2.0, 7.0], requires_grad=True)
    y = x * 2
    z = F.relu6(y, inplace=True)
    assert z is y and y.grad_fn is not None
    z.sum().backward()
    assert x.grad.tolist() == [0.0, 2.0, 0.0]


def test_inplace_module_chain_refuses_a_clobbered_saved_output_as_pytorch_does():
    # ReLU saves its output; Dropout(inplace=True) overwrites it: PyTorch raises here too.
    def step(lib):
        lib.manual_seed(0)
        m = lib.nn.Sequential(
            lib.nn.Linear(3, 4), lib.nn.ReLU(inplace=True), lib.nn.Dropout(0.5, inplace=True)
        )
        m(lib.randn(5, 3)).sum().backward()

    with pytest.raises(RuntimeError):
        step(torch)
    with pytest.raises(GraphError, match="modified in place"):
        step(ferro)


def test_resnet_block_with_inplace_relus_matches_pytorch():
    def run(lib, weights=None):
        conv1, bn1 = lib.nn.Conv2d(3, 4, 3, padding=1), lib.nn.BatchNorm2d(4)
        conv2, bn2 = lib.nn.Conv2d(4, 3, 3, padding=1), lib.nn.BatchNorm2d(3)
        mods = [conv1, bn1, conv2, bn2]
        if weights is not None:
            for m, w in zip(mods, weights, strict=True):
                m.load_state_dict({k: lib.tensor(v) for k, v in w.items()})
        x = lib.tensor(RNG_X, requires_grad=True)
        y = bn2(conv2(lib.nn.ReLU(inplace=True)(bn1(conv1(x)))))
        y += x
        lib.nn.functional.relu(y, inplace=True).square().sum().backward()
        return [{k: v.detach().numpy() for k, v in m.state_dict().items()} for m in mods], x.grad

    weights, gx_torch = run(torch)
    _, gx = run(ferro, weights)
    np.testing.assert_allclose(gx.numpy(), gx_torch.numpy(), rtol=1e-4, atol=1e-5)


RNG_X = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)


def test_median_matches_pytorch():
    x = RNG.permutation(20).reshape(4, 5).astype(float)
    assert ferro.tensor(x).median().item() == torch.tensor(x).median().item()
    got, want = ferro.tensor(x).median(1), torch.tensor(x).median(1)
    assert got.values.tolist() == want.values.tolist()
    assert got.indices.tolist() == want.indices.tolist()
    x[1, 2] = np.nan
    assert np.isnan(ferro.tensor(x).median().item())
    np.testing.assert_array_equal(
        ferro.tensor(x).median(1, keepdim=True).values.numpy(),
        torch.tensor(x).median(1, keepdim=True).values.numpy(),
    )
    assert np.isnan(ferro.tensor([]).median().item())


def test_repeat_interleave_and_diff_match_pytorch():
    x = RNG.standard_normal((3, 4))
    for args, kw in [((2,), {}), ((3,), {"dim": 1}), (([1, 0, 2],), {"dim": 0})]:
        ours = tuple(ferro.tensor(a) if isinstance(a, list) else a for a in args)
        theirs = tuple(torch.tensor(a) if isinstance(a, list) else a for a in args)
        np.testing.assert_array_equal(
            ferro.tensor(x).repeat_interleave(*ours, **kw).numpy(),
            torch.tensor(x).repeat_interleave(*theirs, **kw).numpy(),
        )
    assert ferro.repeat_interleave(ferro.tensor([2, 0, 1])).tolist() == [0, 0, 2]
    got = ferro.diff(ferro.tensor(x), 2, 0, append=ferro.tensor(x[:1])).numpy()
    np.testing.assert_allclose(got, torch.diff(torch.tensor(x), 2, 0, append=torch.tensor(x[:1])))
    with pytest.raises(ShapeError, match="repeat_interleave"):
        ferro.tensor(x).repeat_interleave(ferro.tensor([1, 2]), dim=0)


@pytest.mark.parametrize(("dim", "size", "step"), [(0, 2, 1), (1, 3, 2), (-1, 4, 4), (1, 0, 1)])
def test_tensor_unfold_matches_pytorch_and_its_gradient_is_right(dim, size, step):
    x = RNG.standard_normal((3, 5))
    got = ferro.tensor(x).unfold(dim, size, step).numpy()
    np.testing.assert_array_equal(got, torch.tensor(x).unfold(dim, size, step).numpy())
    t = ferro.tensor(x, requires_grad=True)
    assert gradcheck(lambda t: t.unfold(dim, size, step), (t,))


def test_tensor_unfold_bad_sizes_are_typed_errors():
    with pytest.raises(ShapeError, match="unfold"):
        ferro.ones(3, 4).unfold(1, 5, 1)
    with pytest.raises(ShapeError, match="unfold"):
        ferro.ones(3, 4).unfold(1, 2, 0)


def test_new_modules_repr_and_defaults_match_pytorch():
    for name, args in [
        ("ReLU6", ()),
        ("CELU", (0.5,)),
        ("Threshold", (0.1, 20.0)),
        ("Hardshrink", ()),
        ("Softshrink", ()),
        ("Softmin", (1,)),
        ("RReLU", ()),
        ("TripletMarginLoss", ()),
        ("FeatureAlphaDropout", (0.2,)),
    ]:
        ours, theirs = getattr(nn, name)(*args), getattr(torch.nn, name)(*args)
        assert type(ours).__name__ == type(theirs).__name__
    x = ferro.tensor(RNG.standard_normal((2, 3, 4)))
    assert nn.Softmin(1)(x).sum(1).numpy() == pytest.approx(np.ones((2, 4)))


SPECIAL = [
    ("tan", (-1.2, 1.2)),
    ("sinh", (-3, 3)),
    ("cosh", (-3, 3)),
    ("asin", (-0.95, 0.95)),
    ("acos", (-0.95, 0.95)),
    ("atan", (-3, 3)),
    ("asinh", (-3, 3)),
    ("acosh", (1.05, 4)),
    ("atanh", (-0.95, 0.95)),
    ("erf", (-3, 3)),
    ("erfc", (-3, 3)),
    ("logit", (0.05, 0.95)),
    ("deg2rad", (-360, 360)),
    ("rad2deg", (-7, 7)),
    ("arcsin", (-0.95, 0.95)),
]


@pytest.mark.parametrize(("name", "domain"), SPECIAL, ids=[s[0] for s in SPECIAL])
def test_special_functions_match_pytorch_as_functions_and_methods(name, domain):
    x = RNG.uniform(*domain, (3, 4))
    want = getattr(torch, name)(torch.tensor(x)).numpy()
    np.testing.assert_allclose(getattr(ferro, name)(ferro.tensor(x)).numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(getattr(ferro.tensor(x), name)().numpy(), want, rtol=1e-12)


@pytest.mark.parametrize("name", ["atan2", "hypot", "xlogy", "arctan2"])
def test_binary_special_functions_match_pytorch_with_broadcasting(name):
    x, y = RNG.uniform(-2, 2, (3, 4)), RNG.uniform(0.1, 2, (4,))
    want = getattr(torch, name)(torch.tensor(x), torch.tensor(y)).numpy()
    np.testing.assert_allclose(getattr(ferro, name)(ferro.tensor(x), ferro.tensor(y)).numpy(), want)


def test_xlogy_and_logit_edge_values_match_pytorch():
    x, y = [0.0, 0.0, 1.0, 2.0], [0.0, np.nan, 2.0, 0.0]
    np.testing.assert_array_equal(
        ferro.xlogy(ferro.tensor(x), ferro.tensor(y)).numpy(),
        torch.xlogy(torch.tensor(x), torch.tensor(y)).numpy(),
    )
    p = [0.0, 0.3, 1.0]
    np.testing.assert_allclose(
        ferro.logit(ferro.tensor(p), eps=1e-6).numpy(),
        torch.logit(torch.tensor(p), eps=1e-6).numpy(),
        rtol=1e-6,
    )
    assert ferro.xlogy(2.0, ferro.tensor([1.0, np.e])).tolist() == pytest.approx([0.0, 2.0])


def test_special_functions_are_twice_differentiable():
    from ferro.testing.gradcheck import gradgradcheck

    x = ferro.tensor(RNG.uniform(0.2, 0.8, (2, 3)), requires_grad=True)
    for name in ["tan", "sinh", "cosh", "asin", "atan", "erf", "erfc", "logit"]:
        assert gradgradcheck(getattr(ferro, name), (x,)), name
    y = ferro.tensor(RNG.uniform(0.5, 1.5, (3,)), requires_grad=True)
    for name in ["atan2", "hypot", "xlogy"]:
        assert gradgradcheck(getattr(ferro, name), (x, y)), name


def test_bool_masks_combine_with_python_operators_as_in_pytorch():
    x = RNG.standard_normal(8)
    ours, theirs = ferro.tensor(x), torch.tensor(x)
    for f in [
        lambda t: (t > 0) & (t < 1),
        lambda t: (t > 1) | (t < -1),
        lambda t: (t > 0) ^ (t > 0.5),
        lambda t: ~(t > 0),
        lambda t: (t > 0).logical_and(t < 1),
        lambda t: (t > 0).logical_not(),
    ]:
        np.testing.assert_array_equal(f(ours).numpy(), f(theirs).numpy())
    i = RNG.integers(-9, 9, (5,))
    for f in [lambda t: t & 3, lambda t: t | 8, lambda t: ~t, lambda t: t.bitwise_xor(t * 2)]:
        np.testing.assert_array_equal(f(ferro.tensor(i)).numpy(), f(torch.tensor(i)).numpy())


def test_bitwise_ops_refuse_float_tensors_with_a_typed_error():
    from ferro.errors import DtypeError

    with pytest.raises(DtypeError, match="bitwise_and"):
        ferro.ones(2) & ferro.ones(2)
    with pytest.raises(TypeError):
        ~ferro.ones(2)


def test_pytorch_spellings_of_elementwise_ops():
    a, b = ferro.tensor([1.0, -2.0]), ferro.tensor([3.0, 4.0])
    assert ferro.multiply(a, b).tolist() == [3.0, -8.0]
    assert ferro.subtract(a, b).tolist() == [-2.0, -6.0]
    assert ferro.true_divide(a, b).tolist() == pytest.approx([1 / 3, -0.5])
    assert a.absolute().tolist() == [1.0, 2.0] and ferro.negative(a).tolist() == [-1.0, 2.0]
    assert ferro.greater_equal(a, 1.0).tolist() == [True, False]
    assert a.not_equal(b).tolist() == [True, True] and ferro.positive(a) is a
