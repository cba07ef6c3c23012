"""ferro.save / ferro.load as PyTorch programs call them (issue 13, item 11): a path or a binary
file object, a checkpoint dict with the epoch and the optimizer's state, PyTorch's keyword
arguments, and a clear error for a whole Module."""

import io

import numpy as np
import pytest

import ferro
from ferro.errors import ArgumentTypeError


def _trained():
    ferro.manual_seed(0)
    model = ferro.nn.Sequential(ferro.nn.Linear(3, 4), ferro.nn.ReLU(), ferro.nn.Linear(4, 1))
    opt = ferro.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(3):
        opt.zero_grad()
        model(ferro.randn(5, 3)).pow(2).mean().backward()
        opt.step()
    return model, opt


def _checkpoint(model, opt):
    return {
        "epoch": 7,
        "model_state_dict": model.state_dict(),
        "optimizer_state_dict": opt.state_dict(),
        "loss": 0.25,
        "history": [1.0, 0.5, (0.25, None)],
        "note": "best",
        "done": False,
        "raw": np.arange(3),
    }


@pytest.mark.parametrize("target", ["path", "file", "bytesio"])
def test_a_checkpoint_round_trips_and_resumes_training(tmp_path, target):
    model, opt = _trained()
    ck = _checkpoint(model, opt)
    path = tmp_path / "ck.pt"
    if target == "path":
        ferro.save(ck, path)
        back = ferro.load(path)
    elif target == "file":
        with open(path, "wb") as f:
            ferro.save(ck, f)
        with open(path, "rb") as f:
            back = ferro.load(f, map_location="cpu", weights_only=True)
    else:
        buf = io.BytesIO()
        ferro.save(ck, buf, pickle_protocol=2)
        buf.seek(0)
        back = ferro.load(buf)
    assert back["epoch"] == 7 and back["loss"] == 0.25 and back["note"] == "best"
    assert back["history"] == [1.0, 0.5, (0.25, None)] and back["done"] is False
    assert back["raw"].tolist() == [0, 1, 2]
    model2 = ferro.nn.Sequential(ferro.nn.Linear(3, 4), ferro.nn.ReLU(), ferro.nn.Linear(4, 1))
    model2.load_state_dict(back["model_state_dict"])
    opt2 = ferro.optim.Adam(model2.parameters(), lr=0.01)
    opt2.load_state_dict(back["optimizer_state_dict"])
    x = ferro.randn(5, 3)
    for m, o in ((model, opt), (model2, opt2)):
        o.zero_grad()
        m(x).pow(2).mean().backward()
        o.step()
    for a, b in zip(model.parameters(), model2.parameters(), strict=True):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


def test_saving_a_module_or_optimizer_names_state_dict():
    model, opt = _trained()
    for obj in (model, opt, {"model": model}):
        with pytest.raises(ArgumentTypeError, match=r"state_dict\(\)"):
            ferro.save(obj, io.BytesIO())


def test_load_reads_from_the_current_position_of_a_stream():
    buf = io.BytesIO(b"header")
    buf.seek(6)
    ferro.save({"w": ferro.ones(2)}, buf)
    buf.seek(6)
    assert ferro.load(buf)["w"].tolist() == [1.0, 1.0]


@pytest.mark.torch
def test_a_pytorch_state_dict_loads_as_it_is():
    import torch

    tm = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    fm = ferro.nn.Sequential(ferro.nn.Linear(4, 3), ferro.nn.ReLU(), ferro.nn.Linear(3, 2))
    fm.load_state_dict(tm.state_dict())  # torch tensors, no .numpy() needed
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    want = tm(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(fm(ferro.from_numpy(x)).detach().numpy(), want, rtol=1e-5, atol=1e-6)
