"""Cases run on every rank of one ``mpiexec -n N`` job (tests/distributed/test_mpi.py starts it).

Each case is a function run by every rank in the same order; a case's failure on any rank is
gathered to rank 0, which prints one JSON line ``{"case": ..., "ok": ..., "error": ...}`` per
case. Usage: ``mpiexec -n N python mpi_cases.py [case ...]`` (all cases when none is named).
"""

from __future__ import annotations

import copy
import json
import sys
import traceback
import weakref

import numpy as np

import ferro
import ferro.distributed as dist
from ferro import nn
from ferro.nn.parallel import DistributedDataParallel as DDP

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def rank_world():
    return dist.get_rank(), dist.get_world_size()


def close(a, b, rtol=1e-6, atol=1e-12):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


# -- collectives against NumPy on the gathered data ----------------------------------------------


def per_rank(r, shape=(3, 2), dtype=np.float64):
    return (np.arange(np.prod(shape)).reshape(shape) + 10 * r + 1).astype(dtype)


@case
def torchrun_environment():
    # init_process_group sets torchrun's variables from MPI (every rank on this one machine).
    import os

    r, n = rank_world()
    env = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    assert env == {
        "RANK": str(r),
        "WORLD_SIZE": str(n),
        "LOCAL_RANK": str(r),
        "LOCAL_WORLD_SIZE": str(n),
    }, env


@case
def all_reduce_ops():
    r, n = rank_world()
    every = [per_rank(k) for k in range(n)]
    refs = {
        dist.ReduceOp.SUM: sum(every),
        dist.ReduceOp.AVG: sum(every) / n,
        dist.ReduceOp.PRODUCT: np.prod(every, axis=0),
        dist.ReduceOp.MIN: np.min(every, axis=0),
        dist.ReduceOp.MAX: np.max(every, axis=0),
    }
    for op, ref in refs.items():
        t = ferro.tensor(per_rank(r))
        v = t._version
        dist.all_reduce(t, op)
        close(t.numpy(), ref)
        assert t._version > v, "all_reduce must bump the version counter"
    ints = [per_rank(k, dtype=np.int64) for k in range(n)]
    t = ferro.tensor(per_rank(r, dtype=np.int64))
    dist.all_reduce(t, dist.ReduceOp.BOR)
    assert (t.numpy() == np.bitwise_or.reduce(ints, axis=0)).all()


@case
def all_reduce_async_and_strided():
    r, n = rank_world()
    base = ferro.tensor(per_rank(r, (4, 6)))
    view = base[:, ::2]  # not contiguous: goes through a staging copy
    work = dist.all_reduce(view, async_op=True)
    work.wait()
    assert work.is_completed()
    ref = sum(per_rank(k, (4, 6)) for k in range(n))
    close(base.numpy()[:, ::2], ref[:, ::2])
    close(base.numpy()[:, 1::2], per_rank(r, (4, 6))[:, 1::2])  # untouched


@case
def broadcast_reduce():
    r, n = rank_world()
    src = n - 1
    t = ferro.tensor(per_rank(r))
    dist.broadcast(t, src)
    close(t.numpy(), per_rank(src))
    t = ferro.tensor(per_rank(r))
    dist.reduce(t, 0, dist.ReduceOp.MAX)
    if r == 0:
        close(t.numpy(), np.max([per_rank(k) for k in range(n)], axis=0))
    else:
        close(t.numpy(), per_rank(r))


@case
def gathers():
    r, n = rank_world()
    outs = [ferro.zeros(3, 2, dtype=ferro.float64) for _ in range(n)]
    dist.all_gather(outs, ferro.tensor(per_rank(r)))
    for k in range(n):
        close(outs[k].numpy(), per_rank(k))
    flat = ferro.zeros(3 * n, 2, dtype=ferro.float64)
    dist.all_gather_into_tensor(flat, ferro.tensor(per_rank(r)))
    close(flat.numpy(), np.concatenate([per_rank(k) for k in range(n)]))
    lst = [ferro.zeros(3, 2, dtype=ferro.float64) for _ in range(n)] if r == 0 else None
    dist.gather(ferro.tensor(per_rank(r)), lst, dst=0)
    if r == 0:
        for k in range(n):
            close(lst[k].numpy(), per_rank(k))


@case
def scatters():
    r, n = rank_world()
    t = ferro.zeros(3, 2, dtype=ferro.float64)
    pieces = [ferro.tensor(per_rank(k) * 7) for k in range(n)] if r == 0 else None
    dist.scatter(t, pieces, src=0)
    close(t.numpy(), per_rank(r) * 7)
    inp = ferro.tensor(np.concatenate([per_rank(r) + k for k in range(n)]))
    out = ferro.zeros(3, 2, dtype=ferro.float64)
    dist.reduce_scatter_tensor(out, inp, dist.ReduceOp.SUM)
    close(out.numpy(), sum(per_rank(k) + r for k in range(n)))
    ins = [ferro.tensor(per_rank(r) * 100 + s) for s in range(n)]
    outs = [ferro.zeros(3, 2, dtype=ferro.float64) for _ in range(n)]
    dist.all_to_all(outs, ins)
    for s in range(n):
        close(outs[s].numpy(), per_rank(s) * 100 + r)


@case
def point_to_point_and_barrier():
    r, n = rank_world()
    right, left = (r + 1) % n, (r - 1) % n
    got = ferro.zeros(3, 2, dtype=ferro.float64)
    w = dist.isend(ferro.tensor(per_rank(r)), right)
    dist.recv(got, left)
    w.wait()
    close(got.numpy(), per_rank(left))
    dist.barrier()


@case
def subgroup():
    r, n = rank_world()
    g = dist.new_group([0, n - 1])
    t = ferro.tensor(per_rank(r))
    if r in (0, n - 1):
        dist.all_reduce(t, group=g)
        close(t.numpy(), per_rank(0) + per_rank(n - 1) if n > 1 else per_rank(0))
        assert dist.get_world_size(g) == (2 if n > 1 else 1)
    else:
        assert g is dist.GroupMember.NON_GROUP_MEMBER
        assert dist.get_rank(g) == -1


@case
def objects():
    r, n = rank_world()
    objs = [{"epoch": 3, "name": "run", "lr": [0.1, 0.01]}, 7] if r == 0 else [None, None]
    dist.broadcast_object_list(objs, src=0)
    assert objs == [{"epoch": 3, "name": "run", "lr": [0.1, 0.01]}, 7], objs
    got = [None] * n
    dist.all_gather_object(got, {"rank": r, "word": "x" * (r + 1)})
    assert got == [{"rank": k, "word": "x" * (k + 1)} for k in range(n)], got


@case
def bad_arguments():
    try:
        dist.all_reduce(ferro.tensor([1.0]), dist.ReduceOp.BAND)
    except ferro.errors.DtypeError as e:
        assert "BAND" in str(e)
    else:
        raise AssertionError("BAND on floats must raise DtypeError")
    try:
        dist.broadcast(ferro.tensor([1.0]), src=dist.get_world_size())
    except ferro.errors.ArgumentError as e:
        assert "src" in str(e)
    else:
        raise AssertionError("a src outside the group must raise ArgumentError")


# -- DistributedDataParallel ----------------------------------------------------------------------


class WithUnused(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net, self.unused = net, nn.Linear(3, 3)

    def forward(self, x):
        return self.net(x)


def make_model(seed=0, extra=False):
    ferro.manual_seed(seed + 100 * dist.get_rank())  # different on purpose: DDP broadcasts rank 0's
    layers = [nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 1)]
    m = nn.Sequential(*layers)
    return (WithUnused(m) if extra else m).double()


def global_batch(n_total, seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n_total, 5)), rng.standard_normal((n_total, 1))


def full_batch_grads(model, x, y):
    # The same model, one process, the whole batch: the reference DDP must reproduce.
    import copy

    ref = copy.deepcopy(model)
    ref.zero_grad()
    loss = ((ref(ferro.tensor(x)) - ferro.tensor(y)) ** 2).mean()
    loss.backward()
    return [None if p.grad is None else p.grad.numpy().copy() for p in ref.parameters()]


@case
def ddp_matches_full_batch():
    r, n = rank_world()
    for cap in (25, 0.0005):  # one bucket; one bucket per parameter or so
        model = make_model()
        ddp = DDP(model, bucket_cap_mb=cap)
        x, y = global_batch(4 * n)
        ref = full_batch_grads(model, x, y)  # after the broadcast: rank 0's weights everywhere
        xs, ys = x[4 * r : 4 * r + 4], y[4 * r : 4 * r + 4]
        loss = ((ddp(ferro.tensor(xs)) - ferro.tensor(ys)) ** 2).mean()
        loss.backward()
        for p, g in zip(model.parameters(), ref, strict=True):
            close(p.grad.numpy(), g)


@case
def ddp_twenty_steps_identical():
    r, n = rank_world()
    model = make_model(seed=3)
    ddp = DDP(model, bucket_cap_mb=0.001)
    opt = ferro.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    rng = np.random.default_rng(10 + r)  # each rank its own data
    for _ in range(20):
        opt.zero_grad()
        xb, yb = rng.standard_normal((6, 5)), rng.standard_normal((6, 1))
        ((ddp(ferro.tensor(xb)) - ferro.tensor(yb)) ** 2).mean().backward()
        opt.step()
    flat = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
    every = [ferro.zeros(flat.size, dtype=ferro.float64) for _ in range(n)]
    dist.all_gather(every, ferro.tensor(flat))
    for k in range(n):
        assert np.array_equal(every[k].numpy(), flat), "replicas diverged"


@case
def ddp_no_sync_accumulates():
    r, n = rank_world()
    model = make_model(seed=5)
    ddp = DDP(model)
    x, y = global_batch(8 * n, seed=4)
    ref = full_batch_grads(model, x, y)
    halves = [
        (x[8 * r : 8 * r + 4], y[8 * r : 8 * r + 4]),
        (x[8 * r + 4 : 8 * r + 8], y[8 * r + 4 : 8 * r + 8]),
    ]
    with ddp.no_sync():
        xb, yb = halves[0]
        (((ddp(ferro.tensor(xb)) - ferro.tensor(yb)) ** 2).mean() / 2).backward()
    local = [p.grad.numpy().copy() for p in model.parameters()]
    xb, yb = halves[1]
    (((ddp(ferro.tensor(xb)) - ferro.tensor(yb)) ** 2).mean() / 2).backward()
    for p, g in zip(model.parameters(), ref, strict=True):
        close(p.grad.numpy(), g)
    if n > 1:
        assert any(not np.allclose(a, b) for a, b in zip(local, ref, strict=True))


@case
def ddp_unused_parameters():
    r, n = rank_world()
    model = make_model(seed=6, extra=True)
    ddp = DDP(model, find_unused_parameters=True, bucket_cap_mb=0.0005)
    x, y = global_batch(2 * n)
    for _ in range(2):
        ddp.zero_grad()
        (
            (ddp(ferro.tensor(x[2 * r : 2 * r + 2])) - ferro.tensor(y[2 * r : 2 * r + 2])) ** 2
        ).mean().backward()
    ref = full_batch_grads(model, x, y)
    used = [p for name, p in model.named_parameters() if not name.startswith("unused")]
    for p, g in zip(used, ref[: len(used)], strict=True):
        close(p.grad.numpy(), g)
    strict = DDP(make_model(seed=6, extra=True))
    ((strict(ferro.tensor(x[:2])) - ferro.tensor(y[:2])) ** 2).mean().backward()
    try:
        strict(ferro.tensor(x[:2]))
    except ferro.errors.DistributedError as e:
        assert "unused.weight" in str(e) and "find_unused_parameters" in str(e), str(e)
    else:
        raise AssertionError("an unreduced iteration must be reported at the next forward")


@case
def ddp_bucket_view_and_checkpoint():
    r, n = rank_world()
    from ferro.utils.checkpoint import checkpoint

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(5, 16), nn.Linear(16, 1)

        def forward(self, x):
            return self.b(checkpoint(lambda t: ferro.tanh(self.a(t)), x, use_reentrant=False))

    ferro.manual_seed(0)
    model = Net().double()
    ddp = DDP(model, gradient_as_bucket_view=True)
    x, y = global_batch(2 * n, seed=8)
    ref = full_batch_grads(model, x, y)
    for _ in range(2):  # the second backward accumulates into the bucket views
        (
            (ddp(ferro.tensor(x[2 * r : 2 * r + 2])) - ferro.tensor(y[2 * r : 2 * r + 2])) ** 2
        ).mean().backward()
    for p, g in zip(model.parameters(), ref, strict=True):
        close(p.grad.numpy(), 2 * g)


@case
def ddp_bucket_view_no_sync_zero_grad_and_adam():
    # gradient_as_bucket_view=True through a training loop's moves: a no_sync accumulation then
    # a synchronised backward (the accumulated sums reduced), zero_grad(set_to_none=True),
    # (set_to_none=False) or new zero .grad tensors between steps, and Adam's fused update
    # reading .grad: every .grad is its bucket's memory after each synchronised backward and
    # equals the whole batch's gradient, and the parameters follow a one-process Adam run on
    # the whole batches.
    r, n = rank_world()
    model = make_model(seed=12)
    ref_model = copy.deepcopy(model)
    ddp = DDP(model, gradient_as_bucket_view=True, bucket_cap_mb=0.0005)
    ref_model.load_state_dict(model.state_dict())  # rank 0's weights (DDP broadcast them)
    opt = ferro.optim.Adam(ddp.parameters(), lr=0.01)
    ref_opt = ferro.optim.Adam(ref_model.parameters(), lr=0.01)

    def loss_of(m, xb, yb):
        return ((m(ferro.tensor(xb)) - ferro.tensor(yb)) ** 2).mean() / 2

    for step in range(5):
        x, y = global_batch(8 * n, seed=20 + step)
        mine = [
            (x[8 * r + 4 * h : 8 * r + 4 * h + 4], y[8 * r + 4 * h : 8 * r + 4 * h + 4])
            for h in (0, 1)
        ]
        with ddp.no_sync():
            loss_of(ddp, *mine[0]).backward()
        loss_of(ddp, *mine[1]).backward()
        ref_opt.zero_grad()
        for h in (0, 1):  # the whole batch in the same two halves, each rank's in turn
            xs = np.concatenate([x[8 * k + 4 * h : 8 * k + 4 * h + 4] for k in range(n)])
            ys = np.concatenate([y[8 * k + 4 * h : 8 * k + 4 * h + 4] for k in range(n)])
            loss_of(ref_model, xs, ys).backward()
        for b in ddp._buckets:
            for p in b.params:
                assert np.shares_memory(p.grad.numpy(), b.flat), ddp._names[id(p)]
        for p, q in zip(model.parameters(), ref_model.parameters(), strict=True):
            close(p.grad.numpy(), q.grad.numpy())
        opt.step()
        ref_opt.step()
        for p, q in zip(model.parameters(), ref_model.parameters(), strict=True):
            close(p.detach().numpy(), q.detach().numpy())
        if step % 3 == 2:  # code that replaces .grad: the next backward gives back the view
            for p in model.parameters():
                p.grad = ferro.zeros_like(p.grad)
        else:
            opt.zero_grad(set_to_none=step % 3 == 0)


@case
def ddp_accumulated_grads_set_aside_and_restored():
    # A .grad that exists when its gradient comes in (no_sync accumulation, zero_grad with
    # set_to_none=False) is set aside during the walk, so that the engine stores the new
    # gradient instead of adding it into a .grad the reduction then replaces; it is the same
    # tensor, holding the average, after backward. A backward that raises gives them back as
    # they were, at the next forward (which reports the unreduced iteration).
    r, n = rank_world()
    model = make_model(seed=15)
    ddp = DDP(model)
    x, y = global_batch(2 * n, seed=16)
    xs, ys = ferro.tensor(x[2 * r : 2 * r + 2]), ferro.tensor(y[2 * r : 2 * r + 2])
    ref = full_batch_grads(model, x, y)
    with ddp.no_sync():
        ((ddp(xs) - ys) ** 2).mean().backward()
    before = [p.grad for p in model.parameters()]
    seen = []
    hook = model[4].weight.register_hook(lambda g: seen.append(model[4].weight.grad))
    ((ddp(xs) - ys) ** 2).mean().backward()
    hook.remove()
    assert seen == [None], seen  # set aside while the walk ran
    for p, g, want in zip(model.parameters(), before, ref, strict=True):
        assert p.grad is g
        close(g.numpy(), 2 * want)
    values = [g.numpy().copy() for g in before]

    def fail(g):
        raise RuntimeError("a hook fails")

    hook = model[0].weight.register_hook(fail)  # runs after DDP's, the last leaf
    try:
        ((ddp(xs) - ys) ** 2).mean().backward()
    except RuntimeError:
        pass
    else:
        raise AssertionError("the hook should have raised")
    hook.remove()
    try:
        ddp(xs)
    except ferro.errors.DistributedError:
        pass
    else:
        raise AssertionError("an unreduced iteration must be reported at the next forward")
    for p, g, v in zip(model.parameters(), before, values, strict=True):
        assert p.grad is g
        assert np.array_equal(g.numpy(), v)


@case
def ddp_state_dict():
    # The wrapper's keys carry the "module." prefix (as PyTorch's); the module's own do not,
    # and load into a plain model on any rank with rank 0's values.
    r, n = rank_world()
    model = make_model(seed=13)
    ddp = DDP(model)
    keys = list(model.state_dict())
    assert list(ddp.state_dict()) == ["module." + k for k in keys], list(ddp.state_dict())
    plain = make_model(seed=14)
    plain.load_state_dict(ddp.module.state_dict())
    gathered = gather_strings(
        json.dumps([float(v.numpy().sum()) for v in plain.state_dict().values()])
    )
    assert all(g == gathered[0] for g in gathered), gathered
    ddp.load_state_dict(ddp.state_dict())


@case
def ddp_buckets_start_during_the_walk():
    # The overlap: a bucket whose gradients are complete starts while backward is still walking
    # the earlier layers (tensor hooks), not after every .grad is written (post-accumulate
    # hooks run only after the walk). The events are ordered, not timed. The same with
    # gradient_as_bucket_view=True, whose .grad (the bucket) exists from the second step on.
    r, n = rank_world()
    for view in (False, True):
        model = make_model(seed=7)
        ddp = DDP(model, bucket_cap_mb=0.0005, gradient_as_bucket_view=view)  # ~a parameter each
        assert len(ddp._buckets) > 2, ddp._buckets
        x, y = global_batch(3 * n, seed=9)
        ref = full_batch_grads(model, x, y)
        seen = []
        model[0].weight.register_hook(lambda g, s=seen, d=ddp: s.append(len(d._timeline)))
        xs, ys = x[3 * r : 3 * r + 3], y[3 * r : 3 * r + 3]
        for step in range(2):
            model.zero_grad(set_to_none=False)
            object.__setattr__(ddp, "_timeline", [])
            seen.clear()
            ((ddp(ferro.tensor(xs)) - ferro.tensor(ys)) ** 2).mean().backward()
            events = [e for e, _, _ in ddp._timeline]
            first = events.index("start")
            assert seen and first < seen[0], (view, step, first, seen, events)  # before 0.weight
            assert events.count("start") == len(ddp._buckets) and events[-1] == "end", events
            for p, g in zip(model.parameters(), ref, strict=True):
                close(p.grad.numpy(), g)
        if view:
            for b in ddp._buckets:
                for p in b.params:
                    assert np.shares_memory(p.grad.numpy(), b.flat)


@case
def ddp_weight_bucket_starts_inside_its_layer():
    # Note [DDP buckets]: a bucket of 1 MB or more ends at a module boundary, so the 1 MiB
    # layer-2 weight has its own bucket under the 25 MB default; Note [Early gradients]: its
    # hook runs between the two passes of layer 2's LinearBackward, so the bucket starts before
    # the layer's input gradient is computed.
    from ferro.profiler import profile

    r, n = rank_world()
    ferro.manual_seed(3)
    model = nn.Sequential(nn.Linear(8, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU())
    model.append(nn.Linear(512, 4))
    ddp = DDP(model)
    names = [[ddp._names[id(p)] for p in b.params] for b in ddp._buckets]
    assert names == [["4.bias", "4.weight", "2.bias"], ["2.weight"], ["0.bias", "0.weight"]], names
    object.__setattr__(ddp, "_timeline", [])
    x = ferro.randn(6, 8)
    with profile() as prof:
        ddp(x).pow(2).sum().backward()
    started = [t for e, i, t in ddp._timeline if e == "start" and i == 1]
    passes = [e for e in prof.events() if e.kind == "backward" and e.op == "linear"]
    by_node = {}
    for e in passes:
        by_node.setdefault(e.forward_id, []).append(e)
    # layers 3 and 2 run in two passes (layer 1's input needs no gradient)
    staged = [evs for evs in by_node.values() if len(evs) == 2 and evs[0].shapes == [(6, 512)]]
    assert len(started) == 1 and len(staged) == 1, (started, passes)
    layer2 = staged[0]
    first_end = (layer2[0].start_ns + layer2[0].duration_ns) * 1e-9
    assert first_end <= started[0] <= layer2[1].start_ns * 1e-9, (first_end, started, layer2)


@case
def ddp_digits_cnn():
    # The digits demo's CNN: DDP gives the whole batch's gradients, and (Note [Early
    # gradients]: conv declares early=1 like linear) the second convolution's weight bucket
    # starts between the two passes of its ConvBackward, before the input gradient.
    from ferro.examples.digits import build_model
    from ferro.profiler import profile

    r, n = rank_world()
    ferro.manual_seed(5 + r)  # different on purpose: DDP broadcasts rank 0's
    model = build_model(model="cnn").double().eval()  # eval: no dropout, the same on every rank
    ddp = DDP(model, bucket_cap_mb=0.05)
    names = [[ddp._names[id(p)] for p in b.params] for b in ddp._buckets]
    assert names == [["9.bias", "9.weight", "4.bias"], ["4.weight"], ["1.bias", "1.weight"]], names
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal((3 * n, 64)), rng.integers(0, 10, 3 * n)
    ref = copy.deepcopy(model)
    ferro.nn.functional.cross_entropy(ref(ferro.tensor(x)), ferro.tensor(y)).backward()
    object.__setattr__(ddp, "_timeline", [])
    xs, ys = ferro.tensor(x[3 * r : 3 * r + 3]), ferro.tensor(y[3 * r : 3 * r + 3])
    with profile() as prof:
        ferro.nn.functional.cross_entropy(ddp(xs), ys).backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        close(p.grad.numpy(), q.grad.numpy())
    started = [t for e, i, t in ddp._timeline if e == "start" and i == 1]
    by_node = {}
    for e in prof.events():
        if e.kind == "backward" and e.op == "conv":
            by_node.setdefault(e.forward_id, []).append(e)
    staged = [evs for evs in by_node.values() if len(evs) == 2]
    assert len(started) == 1 and len(staged) == 1 and len(by_node) == 2, (started, by_node)
    first, second = staged[0]
    assert (first.start_ns + first.duration_ns) * 1e-9 <= started[0] <= second.start_ns * 1e-9


@case
def ddp_grad_tensors_stay_and_hold_the_average():
    # _finalize hands each .grad its slot of the reduced bucket instead of copying it back: a
    # .grad that existed stays the same tensor (now holding the average), and the next
    # backward reduces into a new buffer, leaving the arrays of the previous step alone.
    r, n = rank_world()
    model = make_model(seed=11)
    ddp = DDP(model, bucket_cap_mb=0.0005)
    x, y = global_batch(2 * n, seed=4)
    x2, y2 = global_batch(2 * n, seed=5)
    ref, ref2 = full_batch_grads(model, x, y), full_batch_grads(model, x2, y2)

    def backward(x, y):
        xs, ys = ferro.tensor(x[2 * r : 2 * r + 2]), ferro.tensor(y[2 * r : 2 * r + 2])
        ((ddp(xs) - ys) ** 2).mean().backward()

    backward(x, y)
    first = [p.grad for p in model.parameters()]
    for g in first:
        g.zero_()  # zero_grad(set_to_none=False): the same tensors take the next step's
    backward(x, y)
    held = []
    for p, g, want in zip(model.parameters(), first, ref, strict=True):
        assert p.grad is g
        close(g.numpy(), want)
        held.append(g.numpy())  # the bucket's memory, no copy
    model.zero_grad()
    backward(x2, y2)
    for p, g, want, want2 in zip(model.parameters(), held, ref, ref2, strict=True):
        close(p.grad.numpy(), want2)
        close(g, want)
    # A buffer no array holds any more is reused: the first step's, whose gradients the second
    # step's replaced, takes every later step (zero_grad drops its gradients each time); the
    # second step's, which `held` keeps, is never written again.
    assert all(len(b.spares) == 1 for b in ddp._buckets)
    first_buffers = [weakref.ref(b.spares[0]) for b in ddp._buckets]  # (holding them would stop it)
    for _ in range(3):
        model.zero_grad()
        backward(x, y)
        for p, g, want in zip(model.parameters(), held, ref, strict=True):
            close(p.grad.numpy(), want)
            close(g, want)
        for b, buf in zip(ddp._buckets, first_buffers, strict=True):
            assert len(b.spares) == 1 and b.spares[0] is buf()
            for p in b.params:
                assert np.shares_memory(p.grad.numpy(), b.spares[0])


@case
def ddp_parallel_walk():
    # Leaf hooks may run on several threads of the parallel walk: buckets still start in index
    # order on every rank, and the result is the full batch's.
    r, n = rank_world()
    model = make_model(seed=8)
    ddp = DDP(model, bucket_cap_mb=0.0005)
    x, y = global_batch(4 * n, seed=3)
    ref = full_batch_grads(model, x, y)
    xs, ys = x[4 * r : 4 * r + 4], y[4 * r : 4 * r + 4]
    loss = ((ddp(ferro.tensor(xs)) - ferro.tensor(ys)) ** 2).mean()
    with ferro.autograd.parallel(2):
        loss.backward()
    for p, g in zip(model.parameters(), ref, strict=True):
        close(p.grad.numpy(), g)


@case
def ddp_buffers_broadcast():
    r, n = rank_world()
    m = nn.Linear(2, 2)
    m.register_buffer("stat", ferro.full((3,), float(r)))
    ddp = DDP(m)
    m.stat.data[...] = r + 5.0
    ddp(ferro.randn(1, 2))
    close(m.stat.numpy(), np.full(3, 5.0))


# -- a rank that does not arrive ------------------------------------------------------------------


@case
def timeout_names_missing_rank():
    import datetime

    r, n = rank_world()
    if n < 2:
        return
    g = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=1.5))
    if r == n - 1:
        return  # never arrives
    try:
        dist.all_reduce(ferro.tensor([1.0]), group=g)
    except ferro.errors.DistributedTimeoutError as e:
        assert f"ranks [{n - 1}] did not arrive" in str(e), str(e)
        assert "all_reduce" in str(e)
    else:
        raise AssertionError("expected a timeout")


def gather_strings(s: str) -> list:
    # Every rank's string, through tensors only (the harness must not depend on the code under
    # test more than it has to).
    n = dist.get_world_size()
    raw = s.encode()
    sizes = [ferro.zeros(1, dtype=ferro.int64) for _ in range(n)]
    dist.all_gather(sizes, ferro.tensor([len(raw)], dtype=ferro.int64))
    most = max(int(t.numpy()[0]) for t in sizes)
    padded = np.zeros(most // 8 + 1, np.int64)  # tensors hold no bytes: int64 words
    padded.view(np.uint8)[: len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    outs = [ferro.zeros(padded.size, dtype=ferro.int64) for _ in range(n)]
    dist.all_gather(outs, ferro.tensor(padded))
    return [
        o.numpy().tobytes()[: int(k.numpy()[0])].decode() for o, k in zip(outs, sizes, strict=True)
    ]


def main(names):
    import datetime

    # A case that fails on one rank must not leave the others waiting for 30 minutes.
    dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=20))
    r, n = rank_world()
    results = []
    for name in names or list(CASES):
        err = ""
        try:
            CASES[name]()
        except Exception:  # reported, not raised: the other cases still run
            err = traceback.format_exc()
        errs = gather_strings(err)
        if r == 0:
            bad = {k: e for k, e in enumerate(errs) if e}
            results.append({"case": name, "ok": not bad, "error": bad})
        if name == "timeout_names_missing_rank":
            break  # the group that timed out is unusable; nothing may follow it
    if r == 0:
        for res in results:
            print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
