"""ferro.Generator, the default generator's functions, generator= on random functions, fork_rng."""

import threading

import numpy as np
import pytest

import ferro
from ferro import cuda, nn
from ferro.errors import ArgumentError, ArgumentTypeError, DeviceError, NotSupportedError


def _pcg(seed):
    return np.random.Generator(np.random.PCG64(seed))


def test_generator_starts_from_pytorchs_default_seed_and_manual_seed_returns_it():
    g = ferro.Generator()
    assert g.initial_seed() == 67280421310721 and g.device == "cpu"
    assert g.manual_seed(5) is g and g.initial_seed() == 5
    np.testing.assert_array_equal(
        ferro.rand(4, generator=g).numpy(), _pcg(5).random(4, dtype=np.float32)
    )


def test_generator_draws_do_not_touch_the_default_generator():
    ferro.manual_seed(1)
    expected = ferro.rand(3).numpy()
    ferro.manual_seed(1)
    g = ferro.Generator().manual_seed(1)
    a = ferro.randn(2, 3, generator=g)
    b = ferro.rand(5, generator=g, dtype=ferro.float64)
    np.testing.assert_array_equal(ferro.rand(3).numpy(), expected)
    ref = _pcg(1)
    np.testing.assert_array_equal(a.numpy(), ref.standard_normal((2, 3), dtype=np.float32))
    np.testing.assert_array_equal(b.numpy(), ref.random(5))


def test_state_round_trips_and_a_bad_state_changes_nothing():
    g = ferro.Generator().manual_seed(3)
    state = g.get_state()
    first = ferro.rand(4, generator=g).numpy()
    assert g.set_state(state) is g
    np.testing.assert_array_equal(ferro.rand(4, generator=g).numpy(), first)
    before = g.get_state()
    for bad in ({"bit_generator": "PCG64", "state": {}}, {"bad": 1}, "state", None):
        with pytest.raises(ArgumentTypeError, match="set_state"):
            g.set_state(bad)
        assert g.get_state() == before
    state["state"]["state"] = 12345  # get_state hands out a copy
    assert g.get_state() == before


def test_default_generator_functions():
    assert ferro.manual_seed(7) is ferro.default_generator is ferro.random.default_generator
    assert ferro.initial_seed() == 7
    state = ferro.get_rng_state()
    assert state == ferro.default_generator.get_state() and state["bit_generator"] == "PCG64"
    a = ferro.rand(3).numpy()
    ferro.set_rng_state(state)
    np.testing.assert_array_equal(ferro.rand(3).numpy(), a)
    s1, s2 = ferro.seed(), ferro.seed()
    assert s1 != s2 and ferro.initial_seed() == s2 and 0 <= s2 < 2**64
    np.testing.assert_array_equal(ferro.rand(2).numpy(), _pcg(s2).random(2, dtype=np.float32))


def test_seed_range_and_negative_seeds_as_pytorch():
    assert ferro.Generator().manual_seed(-1).initial_seed() == 2**64 - 1
    for s in (-(2**63), 2**64 - 1):
        ferro.manual_seed(s)
    a = ferro.rand(3, generator=ferro.Generator().manual_seed(-1)).numpy()
    np.testing.assert_array_equal(a, _pcg(2**64 - 1).random(3, dtype=np.float32))
    before = ferro.get_rng_state()
    for bad in (2**64, -(2**63) - 1):
        with pytest.raises(ArgumentError, match="seed must be in"):
            ferro.manual_seed(bad)
    for bad in (1.5, "3", True, None):
        with pytest.raises(ArgumentTypeError, match="seed must be an int"):
            ferro.manual_seed(bad)
    assert ferro.get_rng_state() == before


def test_generator_argument_is_type_checked():
    with pytest.raises(ArgumentTypeError, match="randn: generator must be a ferro.Generator"):
        ferro.randn(2, generator=np.random.default_rng(0))
    with pytest.raises(NotSupportedError, match="CPU"):
        ferro.Generator("cuda")
    w = ferro.zeros(3, 4)
    with pytest.raises(ArgumentTypeError, match="uniform_"):
        nn.init.xavier_uniform_(w, generator=0)
    assert not w.numpy().any()


@pytest.mark.parametrize(
    "init, kwargs",
    [
        (nn.init.uniform_, {"a": -2.0, "b": 3.0}),
        (nn.init.normal_, {"std": 0.5}),
        (nn.init.xavier_uniform_, {}),
        (nn.init.xavier_normal_, {}),
        (nn.init.kaiming_uniform_, {"nonlinearity": "relu"}),
        (nn.init.kaiming_normal_, {}),
    ],
)
def test_init_functions_take_a_generator(init, kwargs):
    ferro.manual_seed(0)
    w1, w2 = ferro.empty(20, 10), ferro.empty(20, 10)
    init(w1, **kwargs, generator=ferro.Generator().manual_seed(4))
    init(w2, **kwargs, generator=ferro.Generator().manual_seed(4))
    np.testing.assert_array_equal(w1.numpy(), w2.numpy())
    assert np.unique(w1.numpy()).size == 200
    default = ferro.empty(20, 10)
    ferro.manual_seed(4)
    init(default, **kwargs)
    np.testing.assert_array_equal(default.numpy(), w1.numpy())  # the same stream as seed 4


def test_fork_rng_restores_the_cpu_and_device_states_even_after_an_error(monkeypatch):
    def no_cupy():
        raise AssertionError("fork_rng() imported CuPy without a device named")

    monkeypatch.setattr(ferro.backend, "cupy_or_none", no_cupy)
    monkeypatch.setattr(cuda, "_states", {})
    cuda.set_rng_state((3, 10), 0)
    ferro.manual_seed(2)
    expected = ferro.rand(3).numpy()
    ferro.manual_seed(2)
    with pytest.raises(KeyError):
        with ferro.random.fork_rng():
            ferro.rand(5)
            cuda.set_rng_state((9, 99), 0)
            cuda.set_rng_state((1, 1), 1)
            raise KeyError("inside")
    np.testing.assert_array_equal(ferro.rand(3).numpy(), expected)
    assert cuda.get_all_rng_states() == {0: (3, 10)}
    with ferro.random.fork_rng(enabled=False):
        ferro.rand(1)
    ferro.manual_seed(2)
    with ferro.random.fork_rng(devices=[]):
        ferro.rand(5)
    np.testing.assert_array_equal(ferro.rand(3).numpy(), expected)


def test_fork_rng_checks_the_devices_it_is_given():
    missing = cuda.device_count()
    with pytest.raises(DeviceError, match=f"no CUDA device {missing}"):
        with ferro.random.fork_rng(devices=[missing]):
            pass
    with pytest.raises(ArgumentTypeError, match="devices"):
        with ferro.random.fork_rng(devices=["tpu"]):
            pass
    with pytest.raises(NotSupportedError, match="device_type"):
        with ferro.random.fork_rng(device_type="mps"):
            pass


def test_a_shared_generator_gives_each_draw_a_whole_block_of_the_stream():
    g = ferro.Generator().manual_seed(11)
    blocks, n_threads, draws, size = [], 4, 200, 64

    def work():
        mine = [ferro.rand(size, generator=g, dtype=ferro.float64).numpy() for _ in range(draws)]
        blocks.extend(mine)

    threads = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ref = _pcg(11)
    serial = {ref.random(size).tobytes() for _ in range(n_threads * draws)}
    assert {b.tobytes() for b in blocks} == serial


def test_get_state_while_other_threads_draw_sees_a_state_between_two_draws():
    g = ferro.Generator().manual_seed(0)
    n_threads, draws, size = 2, 300, 4096
    started = threading.Barrier(n_threads + 1)

    def draw():
        started.wait()
        for _ in range(draws):
            ferro.rand(size, generator=g, dtype=ferro.float64)

    workers = [threading.Thread(target=draw) for _ in range(n_threads)]
    for t in workers:
        t.start()
    started.wait()
    seen = []
    while any(t.is_alive() for t in workers):
        seen.append(g.get_state()["state"]["state"])
    for t in workers:
        t.join()
    ref = np.random.PCG64(0)
    boundaries = {ref.state["state"]["state"]}
    for _ in range(n_threads * draws):
        np.random.Generator(ref).random(size)
        boundaries.add(ref.state["state"]["state"])
    assert seen and set(seen) <= boundaries  # never a state from the middle of a draw


@pytest.mark.torch
def test_generator_surface_matches_pytorch():
    import torch

    tg, fg = torch.Generator(), ferro.Generator()
    assert fg.initial_seed() == tg.initial_seed()
    assert type(fg.manual_seed(3)) is ferro.Generator and type(tg.manual_seed(3)) is torch.Generator
    for s in (-1, -(2**63), 2**64 - 1, 0):
        assert fg.manual_seed(s).initial_seed() == tg.manual_seed(s).initial_seed()
    assert str(fg.device) == str(tg.device) == "cpu"
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(-7)
        ferro.manual_seed(-7)
        assert ferro.initial_seed() == torch.initial_seed()
    finally:
        torch.random.set_rng_state(state)
