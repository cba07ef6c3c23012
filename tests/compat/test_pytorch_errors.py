"""Errors that help a PyTorch user (issue 13, item 13): a PyTorch name ferro lacks says so and
names the ferro way; other unknown names stay plain AttributeErrors. Also the small Tensor
methods PyTorch programs call that ferro now has (stride, element_size, in-place unary ops)."""

import re
from pathlib import Path

import numpy as np
import pytest

import ferro
from ferro import _missing
from ferro.errors import DeviceError, MissingFeatureError, NotSupportedError

DOC = (Path(__file__).parents[2] / "docs" / "pytorch.md").read_text()


@pytest.mark.parametrize("name", sorted(_missing.TENSOR))
def test_missing_tensor_names_explain_themselves(name):
    with pytest.raises(MissingFeatureError, match=f"ferro has no Tensor.'{name}'") as info:
        getattr(ferro.ones(2), name)
    assert isinstance(info.value, AttributeError) and isinstance(info.value, NotSupportedError)
    assert not hasattr(ferro.ones(2), name)


@pytest.mark.parametrize("name", sorted(_missing.MODULE))
def test_missing_module_names_explain_themselves(name):
    with pytest.raises(MissingFeatureError, match=f"ferro has no '{name}'"):
        getattr(ferro, name)


def test_other_unknown_names_are_plain_attribute_errors():
    with pytest.raises(AttributeError) as info:
        ferro.ones(2).no_such_method  # noqa: B018
    assert type(info.value) is AttributeError
    with pytest.raises(AttributeError) as info:
        ferro.no_such_function  # noqa: B018
    assert type(info.value) is AttributeError
    assert getattr(ferro.ones(2), "__cuda_array_interface__", None) is None


def test_every_message_points_at_a_section_of_the_migration_page():
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", line[3:].strip().lower()).replace(" ", "-")
        for line in DOC.splitlines()
        if line.startswith("## ")
    }
    for table in (_missing.TENSOR, _missing.MODULE, _missing.NN_MODULE, {"d": _missing._NO_DEVICE}):
        for _why, _instead, section in table.values():
            assert section in anchors, section


@pytest.mark.parametrize("name", ["xpu", "mps"])
def test_absent_device_families_answer_probes_and_explain_the_rest(name):
    # pytorch/examples choose their device with `torch.xpu.is_available()` and friends.
    family = getattr(ferro, name)
    assert family.is_available() is False and family.device_count() == 0
    with pytest.raises(MissingFeatureError, match=f"ferro has no {name}.'synchronize'"):
        family.synchronize()


def test_half_and_cuda_without_a_gpu_say_why():
    with pytest.raises(NotSupportedError, match="float16"):
        ferro.ones(2).half()
    if not ferro.cuda.is_available():
        with pytest.raises(DeviceError, match="CUDA is not available"):
            ferro.ones(2).cuda()


def test_small_tensor_methods_pytorch_programs_call():
    t = ferro.ones(2, 3)
    assert t.stride() == (3, 1) and t.T.stride() == (1, 3) and t.stride(0) == 3
    assert t.element_size() == 4 and t.itemsize == 4 and t.nbytes == 24
    assert t.is_floating_point() and not t.is_complex() and not t.is_sparse
    assert t.get_device() == -1 and t.ndimension() == 2 and t.to_dense() is t
    assert t.data_ptr() == np.asarray(t).ctypes.data
    assert t.type_as(ferro.zeros(1, dtype=ferro.float64)).dtype == ferro.float64
    assert t.H.shape == (3, 2) and t.mH.shape == (3, 2)


def test_in_place_unary_ops_record_the_right_gradient():
    x = ferro.tensor([-1.0, 4.0], requires_grad=True)
    y = x * 1.0
    y.abs_().sqrt_()
    y.sum().backward()
    assert y.tolist() == [1.0, 2.0] and x.grad.tolist() == [-0.5, 0.25]
    z = ferro.tensor([0.5, -2.0])
    z.relu_().exp_()
    np.testing.assert_allclose(z.numpy(), np.exp([0.5, 0.0]), rtol=1e-6)
    z **= 2
    np.testing.assert_allclose(z.numpy(), np.exp([1.0, 0.0]), rtol=1e-6)
