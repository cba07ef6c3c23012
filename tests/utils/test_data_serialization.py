"""ferro.save/load (npz, no pickle) and in-memory data loading."""

import numpy as np
import pytest

import ferro
from ferro.errors import SerializationError
from ferro.utils.data import DataLoader, TensorDataset


def test_save_load_round_trip_of_nested_state(tmp_path):
    m = ferro.nn.Linear(3, 2)
    opt = ferro.optim.Adam(m.parameters())
    m(ferro.ones(1, 3)).sum().backward()
    opt.step()
    obj = {
        "model": m.state_dict(),
        "opt": opt.state_dict(),
        "epoch": 3,
        "note": "hi",
        "tuple": (1.5, None, True),
    }
    path = tmp_path / "ckpt.npz"
    ferro.save(obj, path)
    back = ferro.load(path)
    assert back["epoch"] == 3 and back["note"] == "hi" and back["tuple"] == (1.5, None, True)
    for k, v in m.state_dict().items():
        assert isinstance(back["model"][k], ferro.Tensor)
        np.testing.assert_array_equal(back["model"][k].numpy(), v.numpy())
    opt2 = ferro.optim.Adam(m.parameters())
    opt2.load_state_dict(back["opt"])
    assert opt2.state_dict()["state"][0]["step"] == 1


def test_truncated_and_foreign_files_raise_clear_errors(tmp_path):
    good = tmp_path / "good.npz"
    ferro.save({"w": ferro.ones(100)}, good)
    data = good.read_bytes()
    (tmp_path / "trunc.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(SerializationError, match="cannot read"):
        ferro.load(tmp_path / "trunc.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip at all")
    with pytest.raises(SerializationError):
        ferro.load(tmp_path / "junk.npz")
    np.savez(tmp_path / "plain.npz", a=np.ones(2))
    with pytest.raises(SerializationError, match="not a file saved by ferro.save"):
        ferro.load(tmp_path / "plain.npz")


def test_load_never_unpickles(tmp_path):
    # An object array would need pickle; ferro.load refuses it instead of running anything.
    path = tmp_path / "evil.npz"
    np.savez(
        path,
        __ferro_meta__=np.frombuffer(
            b'{"format": "ferro-state-v1", "root": {"array": "a0"}}', np.uint8
        ),
        a0=np.array([object()], dtype=object),
    )
    with pytest.raises(SerializationError):
        ferro.load(path)


def test_save_refuses_arbitrary_objects(tmp_path):
    with pytest.raises(TypeError, match="cannot save"):
        ferro.save({"f": lambda: 1}, tmp_path / "x.npz")


def test_dataloader_batches_shuffle_and_drop_last():
    x = ferro.arange(10).float()
    y = ferro.arange(10)
    ds = TensorDataset(x, y)
    assert len(ds) == 10 and ds[3][1].item() == 3
    batches = list(DataLoader(ds, batch_size=4))
    assert [b[0].shape[0] for b in batches] == [4, 4, 2]
    assert len(DataLoader(ds, batch_size=4, drop_last=True)) == 2
    ferro.manual_seed(0)
    order1 = np.concatenate([b[1].numpy() for b in DataLoader(ds, 3, shuffle=True)])
    ferro.manual_seed(0)
    order2 = np.concatenate([b[1].numpy() for b in DataLoader(ds, 3, shuffle=True)])
    assert np.array_equal(order1, order2) and sorted(order1) == list(range(10))
    assert not np.array_equal(order1, np.arange(10))


def test_dataloader_collates_generic_datasets():
    class Squares:
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return ferro.tensor([float(i)]), i * i

    xb, yb = next(iter(DataLoader(Squares(), batch_size=5)))
    assert xb.shape == (5, 1) and yb.tolist() == [0, 1, 4, 9, 16]
