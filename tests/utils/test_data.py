"""ferro.utils.data in the main process: datasets, samplers, collation, DataLoader options.

PyTorch (where installed) is an oracle for semantics (lengths, coverage, collated structure and
dtypes), not for the random orders, which come from a different generator."""

import collections
import warnings

import numpy as np
import pytest

import ferro
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    IndexOutOfRangeError,
    NotSupportedError,
    ShapeError,
)
from ferro.utils.data import (
    BatchSampler,
    ChainDataset,
    ConcatDataset,
    DataLoader,
    Dataset,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
    Subset,
    SubsetRandomSampler,
    TensorDataset,
    WeightedRandomSampler,
    default_collate,
    default_convert,
    get_worker_info,
    random_split,
)

Point = collections.namedtuple("Point", "x y")


class Rows(Dataset[tuple]):
    """A map-style dataset of mixed samples, as real datasets return them."""

    def __init__(self, n=10):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        feats = np.arange(3, dtype=np.float32) + i
        return feats, i, {"w": float(i) / 2, "name": f"s{i}", "p": Point(i, np.int64(i))}


class Count(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        return self.n


def _gen(seed):
    return ferro.Generator().manual_seed(seed)


# Collation -------------------------------------------------------------------------------------


def test_default_collate_keeps_structure_and_follows_pytorchs_dtypes():
    batch = default_collate([Rows()[0], Rows()[1]])
    assert isinstance(batch, list) and len(batch) == 3  # a tuple sample gives a list
    feats, idx, d = batch
    assert feats.dtype == np.float32 and feats.tolist() == [[0, 1, 2], [1, 2, 3]]
    assert idx.dtype == np.int64 and idx.tolist() == [0, 1]
    assert d["w"].dtype == np.float64 and d["w"].tolist() == [0.0, 0.5]
    assert d["name"] == ["s0", "s1"]
    assert type(d["p"]) is Point and d["p"].x.tolist() == [0, 1] and d["p"].y.dtype == np.int64
    assert default_collate([True, False]).dtype == np.bool_
    assert default_collate([np.float32(1), np.float32(2)]).dtype == np.float32
    assert default_collate([[1, 2.5], [3, 4.5]])[1].dtype == np.float64  # lists by position
    stacked = default_collate([ferro.ones(2, 3), ferro.zeros(2, 3)])
    assert stacked.shape == (2, 2, 3) and stacked.numpy()[0].all() and not stacked.numpy()[1].any()


def test_default_collate_stacks_differentiably():
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    default_collate([x * 2, x * 3]).sum().backward()
    assert x.grad.tolist() == [5.0, 5.0]


def test_default_collate_refuses_what_it_cannot_batch():
    with pytest.raises(ArgumentTypeError, match="found NoneType"):
        default_collate([None, None])
    with pytest.raises(ArgumentTypeError, match="found <U1"):
        default_collate([np.array(["a"]), np.array(["b"])])
    with pytest.raises(ShapeError, match="equal size"):
        default_collate([[1, 2], [3]])
    with pytest.raises(ShapeError, match="shapes"):
        default_collate([ferro.ones(2), ferro.ones(3)])
    with pytest.raises(ShapeError, match="shapes"):
        default_collate([np.ones(2), np.ones(3)])


def test_default_convert_turns_arrays_into_tensors_and_keeps_the_rest():
    arr = np.arange(3)
    out = default_convert({"a": arr, "b": (np.float64(2.0), "s"), "c": 7, "p": Point(arr, 1)})
    assert isinstance(out["a"], ferro.Tensor) and out["a"].tolist() == [0, 1, 2]
    assert isinstance(out["b"], list) and out["b"][0].dtype == np.float64 and out["b"][1] == "s"
    assert out["c"] == 7 and isinstance(out["p"].x, ferro.Tensor) and out["p"].y == 1
    t = ferro.ones(2)
    assert default_convert(t) is t
    strings = np.array(["x"])
    assert default_convert(strings) is strings


# Datasets --------------------------------------------------------------------------------------


def test_dataset_base_classes():
    class Bare(Dataset):
        pass

    with pytest.raises(NotSupportedError, match="Bare must define __getitem__"):
        Bare()[0]
    with pytest.raises(NotSupportedError, match="__iter__"):
        iter(IterableDataset())
    assert Dataset[int] is not None and Sampler[int] is not None  # annotations as in PyTorch


def test_tensor_dataset_checks_its_tensors():
    with pytest.raises(ShapeError, match="first dimensions differ"):
        TensorDataset(ferro.ones(3), ferro.ones(4))
    with pytest.raises(ArgumentTypeError, match="Tensors"):
        TensorDataset(np.ones(3))
    with pytest.raises(ShapeError, match="0-d"):
        TensorDataset(ferro.tensor(1.0))
    with pytest.raises(ArgumentError):
        TensorDataset()


def test_concat_chain_and_subset():
    a, b = Rows(3), Rows(4)
    cat = a + b
    assert isinstance(cat, ConcatDataset) and len(cat) == 7 and cat.cumulative_sizes == [3, 7]
    assert [cat[i][1] for i in range(7)] == [0, 1, 2, 0, 1, 2, 3]
    assert cat[-1][1] == 3 and cat[-7][1] == 0
    for bad in (7, -8):
        with pytest.raises(IndexOutOfRangeError):
            cat[bad]
    with pytest.raises(ArgumentTypeError, match="ChainDataset"):
        ConcatDataset([a, Count(2)])
    chain = Count(2) + Count(3)
    assert isinstance(chain, ChainDataset) and list(chain) == [0, 1, 0, 1, 2] and len(chain) == 5
    sub = Subset(b, [3, 1])
    assert len(sub) == 2 and sub[0][1] == 3 and [s[1] for s in sub.__getitems__([1, 0])] == [1, 3]


def test_subset_subclass_getitem_is_not_bypassed():
    class Doubled(Subset):
        def __getitem__(self, i):
            return 2 * self.dataset[self.indices[i]][1]

    batch = next(iter(DataLoader(Doubled(Rows(), [4, 5]), batch_size=2)))
    assert batch.tolist() == [8, 10]


def test_random_split_by_counts_and_fractions():
    parts = random_split(range(10), [3, 7], generator=_gen(0))
    assert [len(p) for p in parts] == [3, 7]
    assert sorted(list(parts[0]) + list(parts[1])) == list(range(10))
    again = random_split(range(10), [3, 7], generator=_gen(0))
    assert [list(p) for p in again] == [list(p) for p in parts]
    # floor(len * frac), then the remainder one each to the first splits, as PyTorch.
    assert [len(p) for p in random_split(range(11), [0.3, 0.3, 0.4])] == [4, 3, 4]
    with pytest.warns(UserWarning, match="split 2 is empty"):
        random_split(range(2), [0.5, 0.5, 0.0])
    ferro.manual_seed(5)
    a = [list(p) for p in random_split(range(6), [0.5, 0.5])]
    ferro.manual_seed(5)
    assert a == [list(p) for p in random_split(range(6), [0.5, 0.5], generator=None)]
    with pytest.raises(ArgumentError, match="sum"):
        random_split(range(10), [3, 6])
    with pytest.raises(ArgumentError, match="fraction 0"):
        random_split(range(10), [1.5, -0.5])
    with pytest.raises(ArgumentTypeError):
        random_split(range(10), [3, 7], generator=np.random.default_rng())


# Samplers --------------------------------------------------------------------------------------


def test_sequential_and_batch_samplers():
    assert list(SequentialSampler(range(4))) == [0, 1, 2, 3]
    seq = SequentialSampler(range(10))
    assert list(BatchSampler(seq, 3, False)) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert list(BatchSampler(seq, 3, True)) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert len(BatchSampler(seq, 3, False)) == 4 and len(BatchSampler(seq, 3, True)) == 3
    assert list(BatchSampler(iter(range(4)), 2, False)) == [[0, 1], [2, 3]]  # any iterable
    with pytest.raises(ArgumentError, match="batch_size must be positive"):
        BatchSampler(seq, 0, False)
    with pytest.raises(ArgumentTypeError, match="drop_last must be a bool"):
        BatchSampler(seq, 2, 1)


def test_random_sampler_permutes_or_draws_with_replacement():
    perm = list(RandomSampler(range(50), generator=_gen(1)))
    assert sorted(perm) == list(range(50)) and perm != list(range(50))
    assert perm == list(RandomSampler(range(50), generator=_gen(1)))
    long = list(RandomSampler(range(5), num_samples=12, generator=_gen(2)))
    counts = np.bincount(long, minlength=5)  # two full permutations and 2 more
    assert len(long) == 12 and counts.min() >= 2 and counts.max() <= 3
    drawn = list(RandomSampler(range(4), replacement=True, num_samples=100, generator=_gen(3)))
    assert len(drawn) == 100 and set(drawn) == {0, 1, 2, 3}
    assert len(RandomSampler(range(4), replacement=True, num_samples=100)) == 100
    with pytest.raises(ArgumentError, match="num_samples"):
        RandomSampler(range(4), num_samples=0)
    with pytest.raises(ArgumentTypeError, match="replacement"):
        RandomSampler(range(4), replacement=1)
    with pytest.raises(ArgumentTypeError, match="generator"):
        RandomSampler(range(4), generator=3)


def test_random_sampler_without_generator_takes_one_draw_of_the_default_generator():
    ferro.manual_seed(9)
    first = list(RandomSampler(range(20)))
    after = ferro.rand(2).numpy()
    ferro.manual_seed(9)
    ferro.default_generator._np.integers(0, 2**63, dtype=np.int64)  # the one draw
    np.testing.assert_array_equal(ferro.rand(2).numpy(), after)
    ferro.manual_seed(9)
    assert list(RandomSampler(range(20))) == first
    assert list(RandomSampler(range(20))) != first  # a new order each pass


def test_subset_and_weighted_random_samplers():
    sub = list(SubsetRandomSampler([10, 20, 30, 40], generator=_gen(0)))
    assert sorted(sub) == [10, 20, 30, 40]
    w = WeightedRandomSampler([0.0, 1.0, 3.0], 4000, generator=_gen(0))
    freq = np.bincount(list(w), minlength=3) / 4000
    assert freq[0] == 0 and abs(freq[2] - 0.75) < 0.03 and len(w) == 4000
    distinct = list(WeightedRandomSampler(ferro.tensor([1.0, 0, 2, 5]), 3, replacement=False))
    assert sorted(distinct) == [0, 2, 3]
    with pytest.raises(ArgumentError, match="distinct"):
        WeightedRandomSampler([1.0, 0.0], 2, replacement=False)
    for bad in ([1.0, -1.0], [0.0, 0.0], [1.0, float("nan")]):
        with pytest.raises(ArgumentError, match="weights"):
            WeightedRandomSampler(bad, 1)
    with pytest.raises(ShapeError, match="one-dimensional"):
        WeightedRandomSampler([[1.0]], 1)
    with pytest.raises(ArgumentError, match="num_samples"):
        WeightedRandomSampler([1.0], 0)


# DataLoader ------------------------------------------------------------------------------------


def test_loader_batches_a_map_dataset_in_order():
    loader = DataLoader(Rows(), batch_size=4)
    batches = list(loader)
    assert len(loader) == 3
    assert [b[1].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches[0][2]["name"] == ["s0", "s1", "s2", "s3"]
    dropped = DataLoader(Rows(), batch_size=4, drop_last=True)
    assert len(dropped) == 2 and [b[1].tolist() for b in dropped][-1] == [4, 5, 6, 7]


def test_tensor_dataset_batches_equal_stacked_samples():
    x = ferro.randn(10, 3)
    y = ferro.arange(10)
    ds = TensorDataset(x, y)

    class Generic(TensorDataset):  # a subclass: batched by stacking its samples
        pass

    fast = list(DataLoader(ds, batch_size=4, shuffle=True, generator=_gen(0)))
    slow = list(DataLoader(Generic(x, y), batch_size=4, shuffle=True, generator=_gen(0)))
    assert all(isinstance(b, list) for b in fast + slow)
    for (fx, fy), (sx, sy) in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(fx.numpy(), sx.numpy())
        np.testing.assert_array_equal(fy.numpy(), sy.numpy())
        assert fx.dtype == sx.dtype and fy.dtype == sy.dtype
    train, val = random_split(ds, [0.7, 0.3], generator=_gen(1))
    ((vx, vy),) = list(DataLoader(val, batch_size=3))
    np.testing.assert_array_equal(vx.numpy(), x.numpy()[val.indices])
    np.testing.assert_array_equal(vy.numpy(), np.asarray(val.indices))


def test_shuffle_follows_manual_seed_and_the_loader_generator():
    ds = TensorDataset(ferro.arange(20))
    ferro.manual_seed(3)
    a = [b[0].tolist() for b in DataLoader(ds, batch_size=5, shuffle=True)]
    ferro.manual_seed(3)
    assert a == [b[0].tolist() for b in DataLoader(ds, batch_size=5, shuffle=True)]
    assert sorted(sum(a, [])) == list(range(20)) and sum(a, []) != list(range(20))
    g1 = [b[0].tolist() for b in DataLoader(ds, 5, shuffle=True, generator=_gen(4))]
    g2 = [b[0].tolist() for b in DataLoader(ds, 5, shuffle=True, generator=_gen(4))]
    assert g1 == g2


def test_batch_size_none_batch_sampler_custom_sampler_and_collate_fn():
    single = list(DataLoader(Rows(3), batch_size=None))
    assert isinstance(single[0], list) and isinstance(single[0][0], ferro.Tensor)
    assert single[2][1] == 2  # converted, not collated: the int stays an int
    bs = BatchSampler(SequentialSampler(range(10)), 3, drop_last=True)
    assert [b[1].tolist() for b in DataLoader(Rows(), batch_sampler=bs)][-1] == [6, 7, 8]
    rev = list(DataLoader(Rows(4), batch_size=2, sampler=[3, 2, 1, 0]))
    assert [b[1].tolist() for b in rev] == [[3, 2], [1, 0]]
    ids = list(DataLoader(Rows(5), batch_size=2, collate_fn=lambda s: [x[1] for x in s]))
    assert ids == [[0, 1], [2, 3], [4]]


def test_iterable_dataset_in_the_main_process():
    assert [b.tolist() for b in DataLoader(Count(7), batch_size=3)] == [[0, 1, 2], [3, 4, 5], [6]]
    dropped = DataLoader(Count(7), batch_size=3, drop_last=True)
    assert [b.tolist() for b in dropped] == [[0, 1, 2], [3, 4, 5]] and len(dropped) == 2
    assert list(DataLoader(Count(3), batch_size=None)) == [0, 1, 2]
    assert get_worker_info() is None


def test_loader_refuses_options_that_exclude_each_other():
    ds = Rows()
    bs = BatchSampler(SequentialSampler(ds), 2, False)
    cases = [
        ({"sampler": [0], "shuffle": True}, "mutually exclusive with shuffle"),
        ({"batch_sampler": bs, "batch_size": 2}, "batch_sampler"),
        ({"batch_sampler": bs, "drop_last": True}, "batch_sampler"),
        ({"batch_size": None, "drop_last": True}, "drop_last needs a batch_size"),
        ({"num_workers": -1}, "num_workers"),
        ({"timeout": -1}, "timeout"),
        ({"prefetch_factor": 2}, "prefetch_factor needs num_workers > 0"),
        ({"persistent_workers": True}, "persistent_workers"),
        ({"multiprocessing_context": "spawn"}, "multiprocessing_context"),
        ({"num_workers": 1, "multiprocessing_context": "nope"}, "start method"),
        ({"num_workers": 1, "prefetch_factor": 0}, "prefetch_factor"),
    ]
    for kwargs, match in cases:
        with pytest.raises(ArgumentError, match=match):
            DataLoader(ds, **kwargs)
    for kwargs in ({"shuffle": True}, {"sampler": [0]}, {"batch_sampler": bs}):
        with pytest.raises(ArgumentError, match="IterableDataset"):
            DataLoader(Count(3), **kwargs)
    with pytest.raises(ArgumentTypeError, match="generator"):
        DataLoader(ds, generator=np.random.default_rng())
    loader = DataLoader(ds, batch_size=2)
    with pytest.raises(ArgumentError, match="batch_size cannot be changed"):
        loader.batch_size = 3
    loader.num_workers = 0  # not fixed, as in PyTorch


def test_pin_memory_is_accepted_and_changes_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (b,) = list(DataLoader(TensorDataset(ferro.ones(2)), batch_size=2, pin_memory=True))
    assert b[0].tolist() == [1.0, 1.0]


def test_importable_as_pytorchs_module_paths():
    from ferro.utils.data import dataloader, dataset, sampler

    assert dataloader.DataLoader is DataLoader and dataloader.default_collate is default_collate
    assert dataset.TensorDataset is TensorDataset and sampler.RandomSampler is RandomSampler
    assert dataloader.get_worker_info is get_worker_info


# PyTorch as the oracle -------------------------------------------------------------------------


def _torch_dtype_name(t):
    return str(t.dtype).replace("torch.", "")


def _structure(batch):
    """The shape of a batch: container types, and each leaf's dtype and shape."""
    if isinstance(batch, dict):
        return {k: _structure(v) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return ("namedtuple", [_structure(v) for v in batch])
    if isinstance(batch, list | tuple):
        return (type(batch).__name__, [_structure(v) for v in batch])
    if hasattr(batch, "shape") and hasattr(batch, "dtype"):
        name = _torch_dtype_name(batch) if "torch" in type(batch).__module__ else str(batch.dtype)
        return ("tensor", name, tuple(batch.shape))
    return type(batch).__name__


@pytest.mark.torch
def test_collated_structure_and_dtypes_match_pytorch():
    import torch.utils.data as tud

    for bs in (4, None):
        ours = [_structure(b) for b in DataLoader(Rows(), batch_size=bs)]
        theirs = [_structure(b) for b in tud.DataLoader(Rows(), batch_size=bs)]
        assert ours == theirs
    samples = [[1, 2.5, True], [3, 4.5, False]]
    assert _structure(default_collate(samples)) == _structure(tud.default_collate(samples))


@pytest.mark.torch
def test_sampler_and_split_semantics_match_pytorch():
    import torch
    import torch.utils.data as tud

    def lens_and_sets(sampler):
        got = list(sampler)
        return len(sampler), len(got), sorted(set(got))

    for kwargs in ({}, {"num_samples": 23}, {"replacement": True, "num_samples": 500}):
        ours = RandomSampler(range(7), generator=_gen(0), **kwargs)
        theirs = tud.RandomSampler(range(7), generator=torch.Generator().manual_seed(0), **kwargs)
        assert lens_and_sets(ours) == lens_and_sets(theirs)
    for drop in (False, True):
        ours = list(BatchSampler(SequentialSampler(range(10)), 4, drop))
        assert ours == list(tud.BatchSampler(tud.SequentialSampler(range(10)), 4, drop))
    for n, lengths in ((11, [0.3, 0.3, 0.4]), (10, [0.5, 0.5]), (7, [0.1, 0.9]), (9, [2, 7])):
        ours = [len(p) for p in random_split(range(n), lengths)]
        assert ours == [len(p) for p in tud.random_split(range(n), lengths)]
    w = [0.0, 2.0, 1.0, 0.0, 4.0]
    ours = list(WeightedRandomSampler(w, 3, replacement=False, generator=_gen(0)))
    theirs = list(tud.WeightedRandomSampler(w, 3, replacement=False))
    assert len(set(ours)) == len(set(theirs)) == 3 and set(ours) <= {1, 2, 4} >= set(theirs)
    for bs, drop in ((3, False), (3, True), (None, False)):
        assert len(DataLoader(Count(7), batch_size=bs, drop_last=drop)) == len(
            tud.DataLoader(Count(7), batch_size=bs, drop_last=drop)
        )
