"""Lines from public PyTorch programs that broke on ferro with only the import changed. Each
missing piece is a strict xfail naming it: when it is added, the test XPASSes and fails, and its
mark is removed (the test then guards the fix)."""

import pytest

import ferro as torch
import ferro.nn as nn
import ferro.nn.functional as F


def test_torch_bmm_as_in_the_seq2seq_attention_tutorial():
    query, keys = torch.randn(2, 1, 4), torch.randn(2, 3, 4)
    assert tuple(torch.bmm(query, keys.permute(0, 2, 1)).shape) == (2, 1, 3)
    assert tuple(torch.mm(torch.ones(2, 3), torch.ones(3, 4)).shape) == (2, 4)


def test_torch_add_with_alpha():
    a = torch.ones(3)
    assert torch.add(a, a, alpha=2).tolist() == [3.0, 3.0, 3.0]
    assert torch.sub(a, a, alpha=2).tolist() == [-1.0, -1.0, -1.0]


def test_functional_relu_inplace_as_in_torchvision_resnets():
    x = torch.tensor([-1.0, 2.0])
    assert F.relu(x, inplace=True).tolist() == [0.0, 2.0]


def test_nanogpt_train_py_precision_flags():
    # nanoGPT train.py, run on CPU: these are no-ops there, but they raise AttributeError.
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    assert torch.get_float32_matmul_precision() == "high"
    assert torch.backends.cuda.matmul.allow_tf32 and not torch.backends.mps.is_available()
    torch.set_float32_matmul_precision("highest")


def test_triplet_margin_loss():
    a = torch.randn(3, 4)
    assert nn.TripletMarginLoss(margin=1.0)(a, a, a).item() == pytest.approx(1.0)


def test_repeat_interleave_as_in_grouped_query_attention():
    # Llama-style GQA: k = k.repeat_interleave(n_rep, dim=1)
    k = torch.randn(1, 2, 3, 4)
    assert tuple(k.repeat_interleave(2, dim=1).shape) == (1, 4, 3, 4)


def test_median_unfold_diff():
    x = torch.tensor([[3.0, 1.0, 2.0, 5.0]])
    assert x.median().item() == 2.0
    assert tuple(x.unfold(1, 2, 1).shape) == (1, 3, 2)
    assert torch.diff(x, dim=1).tolist() == [[-2.0, 1.0, 3.0]]


@pytest.mark.xfail(
    strict=True,
    reason="ferro holds no uint8 (float32, float64, int64, bool): torchvision's MNIST.data, "
    "which the siamese_network example indexes, is a uint8 tensor; from_numpy(uint8) raises "
    "DtypeError and ferro.tensor converts to int64 (test_resnet_port.py feeds int64)",
)
def test_uint8_tensors_as_torchvision_datasets_hold():
    import numpy as np

    data = torch.from_numpy(np.full((2, 28, 28), 255, np.uint8))
    assert data.dtype == torch.uint8
    assert data.unsqueeze(1).clone().float().max().item() == 255.0


# Tensor.__eq__ with an object that is not a number, array or tensor (pytest.approx, None)
# gives NotImplemented, as in PyTorch (a gap found by the ports, now fixed).
def test_comparing_a_tensor_with_pytest_approx():
    t = torch.tensor(5.0)
    assert (t == pytest.approx(5.0)) is True
    assert (t == None) is False  # noqa: E711


# The seq2seq translation tutorial's get_dataloader: torch.LongTensor(int32 ids) (a gap found
# by the ports, now ferro.legacy).
def test_legacy_typed_tensor_constructors():
    import numpy as np

    ids = torch.LongTensor(np.array([[2, 3, 1]], np.int32))
    assert ids.dtype == torch.long and ids.tolist() == [[2, 3, 1]]
    assert torch.FloatTensor([1, 2]).dtype == torch.float32


# pytorch/examples reinforcement_learning/reinforce.py and actor_critic.py sample actions with
# torch.distributions.Categorical(probs) and train on m.log_prob(action) (a gap until
# ferro.distributions landed; kept as the port's check).
def test_categorical_as_in_the_reinforce_example():
    from ferro.distributions import Categorical

    probs = F.softmax(torch.randn(1, 2, requires_grad=True), dim=1)
    m = Categorical(probs)
    action = m.sample()
    (-m.log_prob(action)).sum().backward()
    assert action.item() in (0, 1)
