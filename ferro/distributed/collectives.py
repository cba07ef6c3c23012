"""Process groups and collectives over MPI, with PyTorch's names and semantics.

Every collective is MPI's non-blocking one (``Iallreduce``, ``Ibcast``, ...) wrapped in a
:class:`Work`; ``async_op=False`` waits on it before returning. Waiting polls the requests
against the group's timeout, so a rank that never arrives produces a
:class:`~ferro.errors.DistributedTimeoutError` naming the collective and the missing ranks
instead of a hang (Note [Distributed timeouts] in docs/distributed.md).

Results are written into the tensors in place, and each written tensor's version counter is
bumped, so autograd notices a collective that overwrote a saved tensor.
"""

from __future__ import annotations

import datetime
import enum
import importlib.util
import io
import os
import time
import zlib

import numpy as np

from ferro._C.engine import bump_version
from ferro._C.tensor import TensorBase, wrap
from ferro.distributed import _transport as T
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DistributedError,
    DistributedTimeoutError,
    DtypeError,
    ShapeError,
)

DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)
# Work.wait tests back to back (yielding the core between tests) for this long before sleeping.
SPIN_S = 0.2
# Tags on a group's private notes communicator.
_NOTE_TAG = 1
# Arrival notes posted between two readings of the notes queue (_Notes.post).
_NOTE_BATCH = 8


def _mpi():
    """mpi4py's MPI module (imported on first use: ``import ferro`` never needs mpi4py)."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise DistributedError(
            "ferro.distributed needs mpi4py and an MPI library: pip install 'ferro[mpi]' "
            "(mpi4py and the mpich wheel, which ships mpiexec)"
        ) from exc
    return MPI


def is_available() -> bool:
    """True when mpi4py is installed (the MPI backend can be used)."""
    return importlib.util.find_spec("mpi4py") is not None


def is_mpi_available() -> bool:
    """Same as :func:`is_available`: MPI is ferro's one backend."""
    return is_available()


class ReduceOp(enum.Enum):
    """How ``all_reduce``/``reduce``/``reduce_scatter_tensor`` combine the ranks' values.

    ``AVG`` is ``SUM`` divided by the group size (floating point tensors only).
    """

    SUM = "SUM"
    AVG = "AVG"
    PRODUCT = "PROD"
    MIN = "MIN"
    MAX = "MAX"
    BAND = "BAND"
    BOR = "BOR"
    BXOR = "BXOR"


class _Notes:
    """Arrival notes: on entering a collective each rank sends its peers a 2-word note (the
    collective's sequence number and a checksum of its name, dtype and shape) on a private
    communicator. Nobody waits for them: they are read only to drain the queue and, after a
    timeout, to name the ranks that never arrived or arrived with other arguments."""

    def __init__(self, comm):
        self.comm = comm.Dup()
        self.size, self.rank = comm.Get_size(), comm.Get_rank()
        self.seen = {r: (0, 0) for r in range(self.size) if r != self.rank}
        self._sends: list = []
        self._buf = np.zeros(2, dtype=np.int64)

    def post(self, MPI, seq: int, signature: int) -> None:
        if self.size == 1:
            return
        note = np.array([seq, signature], dtype=np.int64)
        for r in self.seen:
            self._sends.append((self.comm.Isend([note, MPI.INT64_T], dest=r, tag=_NOTE_TAG), note))
        # Completed sends are released and the peers' notes read every _NOTE_BATCH posts, not
        # at each: both bound the queues all the same, and a collective started during
        # backward (DDP's buckets) makes four MPI calls fewer, each of which may wait for the
        # MPI lock that the progress thread holds while it moves a bucket (Note [DDP progress]).
        if len(self._sends) >= _NOTE_BATCH * len(self.seen):
            self._sends = [(req, n) for req, n in self._sends if not req.Test()]
            self.drain(MPI)

    def drain(self, MPI) -> None:
        status = MPI.Status()
        while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=_NOTE_TAG, status=status):
            src = status.Get_source()
            self.comm.Recv([self._buf, MPI.INT64_T], source=src, tag=_NOTE_TAG)
            self.seen[src] = (int(self._buf[0]), int(self._buf[1]))

    def free(self) -> None:
        for req, _ in self._sends:
            try:
                req.Cancel()
                req.Free()
            except Exception:  # already complete
                pass
        self._sends = []
        self.comm.Free()


class ProcessGroup:
    """A set of ranks and their MPI communicator. ``rank()`` and ``size()`` are within the
    group; ``ranks`` maps them to global ranks."""

    def __init__(self, comm, ranks: list, timeout: datetime.timedelta):
        self.comm = comm
        self.ranks = list(ranks)
        self.timeout = timeout
        self.seq = 0
        self.signatures: dict[int, int] = {}  # collective number -> checksum of its arguments
        self.notes = _Notes(comm)

    def rank(self) -> int:
        return self.comm.Get_rank()

    def size(self) -> int:
        return self.comm.Get_size()

    def global_rank(self, group_rank: int) -> int:
        return self.ranks[group_rank]

    def __repr__(self) -> str:
        return f"ProcessGroup(backend='mpi', ranks={self.ranks})"


class GroupMember:
    """Sentinels as in PyTorch: ``GroupMember.WORLD`` is the default group once initialised;
    ``NON_GROUP_MEMBER`` is what ``new_group`` returns on ranks outside the new group."""

    WORLD: ProcessGroup | None = None
    NON_GROUP_MEMBER = object()


class group:  # noqa: N801 - PyTorch's name
    """``ferro.distributed.group.WORLD``, as in PyTorch."""

    @classmethod
    def __class_getitem__(cls, item):  # pragma: no cover - typing only
        return cls

    WORLD = None  # set by init_process_group


_groups: list[ProcessGroup] = []


def is_initialized() -> bool:
    """True between :func:`init_process_group` and :func:`destroy_process_group`."""
    return GroupMember.WORLD is not None


def _world() -> ProcessGroup:
    if GroupMember.WORLD is None:
        raise DistributedError(
            "ferro.distributed: the default process group is not initialised; call "
            "ferro.distributed.init_process_group('mpi') first (and launch with mpiexec)"
        )
    return GroupMember.WORLD


def _group(g) -> ProcessGroup:
    if g is None:
        return _world()
    if g is GroupMember.NON_GROUP_MEMBER:
        raise DistributedError("this rank is not a member of the process group it was given")
    if not isinstance(g, ProcessGroup):
        raise ArgumentTypeError(f"group must be a ProcessGroup or None, got {type(g).__name__}")
    return g


def init_process_group(
    backend: str | None = "mpi",
    init_method=None,
    timeout: datetime.timedelta | None = None,
    world_size: int = -1,
    rank: int = -1,
    store=None,
    group_name: str = "",
    pg_options=None,
    device_id=None,
) -> None:
    """Initialise the default process group from the MPI launcher (``mpiexec -n N ...``).

    Rank and world size come from MPI; ``world_size``/``rank``, when given, must agree with
    them. ``timeout`` bounds every collective of the group (default 30 minutes, as PyTorch's).
    ``init_method``, ``store``, ``group_name``, ``pg_options`` and ``device_id`` are accepted
    for PyTorch compatibility and have no effect under MPI. Sets torchrun's ``RANK``,
    ``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` environment variables from MPI's
    ranks (``LOCAL_*`` among the ranks on this machine), for scripts that read them.
    """
    if backend not in (None, "mpi"):
        raise ArgumentError(
            f"init_process_group: ferro's one backend is 'mpi', got {backend!r} "
            "(gloo and nccl are PyTorch's; launch with mpiexec instead of torchrun)"
        )
    if is_initialized():
        raise DistributedError("init_process_group: the default process group is already set")
    MPI = _mpi()
    comm = MPI.COMM_WORLD.Dup()
    size, me = comm.Get_size(), comm.Get_rank()
    if world_size not in (-1, size) or rank not in (-1, me):
        comm.Free()
        raise ArgumentError(
            f"init_process_group: world_size={world_size}, rank={rank} disagree with the MPI "
            f"launcher's size {size} and rank {me}"
        )
    world = ProcessGroup(comm, list(range(size)), timeout or DEFAULT_TIMEOUT)
    GroupMember.WORLD = group.WORLD = world
    _groups.append(world)
    # torchrun's variables, which scripts read (``int(os.environ["LOCAL_RANK"])``): the ranks
    # MPI gave, LOCAL_* among the processes of this machine.
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    os.environ.update(
        RANK=str(me),
        WORLD_SIZE=str(size),
        LOCAL_RANK=str(local.Get_rank()),
        LOCAL_WORLD_SIZE=str(local.Get_size()),
    )
    local.Free()


def destroy_process_group(group=None) -> None:  # noqa: A002 - PyTorch's name
    """Free a group's communicators (all groups when ``group`` is None, which also un-sets the
    default group). Requests still in flight are abandoned: MPI cannot cancel a collective."""
    targets = list(_groups) if group is None else [_group(group)]
    for g in targets:
        g.notes.free()
        g.comm.Free()
        _groups.remove(g)
    if group is None or group is GroupMember.WORLD:
        GroupMember.WORLD = globals()["group"].WORLD = None


def get_rank(group=None) -> int:  # noqa: A002
    """This process's rank in ``group`` (the default group when None); -1 outside it."""
    if group is GroupMember.NON_GROUP_MEMBER:
        return -1
    return _group(group).rank()


def get_world_size(group=None) -> int:  # noqa: A002
    """The number of ranks in ``group`` (the default group when None); -1 outside it."""
    if group is GroupMember.NON_GROUP_MEMBER:
        return -1
    return _group(group).size()


def get_backend(group=None) -> str:  # noqa: A002
    """``"mpi"``: ferro's one backend."""
    _group(group)
    return "mpi"


def new_group(
    ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False
):
    """A process group of ``ranks`` (global ranks; all ranks when None). Every rank of the
    default group must call it, members or not, as in PyTorch; non-members get
    ``GroupMember.NON_GROUP_MEMBER``."""
    world = _world()
    MPI = _mpi()
    members = sorted(set(range(world.size()) if ranks is None else (int(r) for r in ranks)))
    bad = [r for r in members if not 0 <= r < world.size()]
    if bad or not members:
        raise ArgumentError(
            f"new_group: ranks {list(ranks) if ranks is not None else None} must be a non-empty "
            f"set of ranks in [0, {world.size()})"
        )
    me = world.rank()
    color = 0 if me in members else MPI.UNDEFINED
    comm = world.comm.Split(color, members.index(me) if me in members else 0)
    if comm == MPI.COMM_NULL:
        return GroupMember.NON_GROUP_MEMBER
    g = ProcessGroup(comm, members, timeout or world.timeout)
    _groups.append(g)
    return g


# ---------------------------------------------------------------------------------------------
# Work handles
# ---------------------------------------------------------------------------------------------


class Work:
    """The handle of a collective started with ``async_op=True``.

    ``wait()`` blocks until it completes (or the group's timeout passes) and writes the results
    into the tensors; ``is_completed()`` asks without blocking.
    """

    def __init__(self, g: ProcessGroup, name: str, seq: int, requests: list, finish=None):
        self._g, self._name, self._seq = g, name, seq
        self._requests = requests
        self._finish = finish
        self._done = False

    def _complete(self) -> None:
        self._done = True
        self._requests = []
        if self._finish is not None:
            finish, self._finish = self._finish, None
            finish()

    def is_completed(self) -> bool:
        if self._done:
            return True
        MPI = _mpi()
        if MPI.Request.Testall(self._requests):
            self._complete()
        return self._done

    def _progress(self) -> bool:
        """Test the requests (which lets MPI move the data) without finishing: True once they
        are complete. For a progress thread (DistributedDataParallel's); the owner then calls
        ``is_completed()`` or ``wait()``, which run the finishing steps (staging copies back,
        CuPy's included, and version bumps) in the owner's thread."""
        return self._done or bool(_mpi().Request.Testall(self._requests))

    def is_success(self) -> bool:
        return self.is_completed()

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        """Block until the collective completes; True then. Raises DistributedTimeoutError
        naming the collective and the ranks that did not arrive after ``timeout`` (the
        group's by default)."""
        if self._done:
            return True
        MPI = _mpi()
        requests = self._requests
        limit = (timeout or self._g.timeout).total_seconds()
        start = time.monotonic()
        # MPI moves the data only inside MPI calls (here Testall), so every pause stalls the
        # transfer: a 16 MB all-reduce that takes 3 ms with back-to-back tests took 10 ms with
        # 0.1 ms sleeps between them. Test back to back for the first millisecond, then yield
        # the core between tests (a rank sharing a core with a peer lets the peer run) and only
        # after SPIN_S, when a peer is evidently late, sleep in growing steps up to 1 ms.
        pause = 0.0
        while not MPI.Request.Testall(requests):
            elapsed = time.monotonic() - start
            if elapsed > limit:
                raise self._timeout_error(MPI, elapsed)
            if elapsed > SPIN_S:
                pause = min(max(pause * 2, 2e-5), 1e-3)
                time.sleep(pause)
            elif elapsed > 1e-3:
                os.sched_yield()
        self._complete()
        return True

    def _timeout_error(self, MPI, elapsed: float) -> DistributedTimeoutError:
        g = self._g
        g.notes.drain(MPI)
        missing = [g.ranks[r] for r, (seq, _) in sorted(g.notes.seen.items()) if seq < self._seq]
        if self._name.startswith(("send", "recv")):
            who = f"the peer ({self._name}) did not complete the transfer"
        elif missing:
            who = f"ranks {missing} did not arrive"
        else:
            who = "every rank arrived, but the transfer did not complete (mismatched arguments?)"
        mine = g.signatures.get(self._seq)
        other = [
            g.ranks[r]
            for r, (seq, sig) in sorted(g.notes.seen.items())
            if seq == self._seq and mine is not None and sig != mine
        ]
        if other:
            who += f"; ranks {other} called collective #{self._seq} with other arguments"
        return DistributedTimeoutError(
            f"{self._name}: timed out after {elapsed:.1f} s on rank {g.ranks[g.rank()]} "
            f"(collective #{self._seq} of {g!r}): {who}. The process group cannot be used after "
            "this; exit the process (mpiexec then ends the job)"
        )

    def result(self):
        self.wait()
        return []

    def __repr__(self) -> str:
        return f"Work({self._name}, completed={self._done})"


# (name, (dtype, shape) of each array) -> the checksum _begin posts with the arrival note.
_signatures: dict = {}


def _begin(g: ProcessGroup, name: str, arrays=()) -> int:
    """Count a collective on ``g`` and post this rank's arrival note; returns its number."""
    MPI = _mpi()
    g.seq += 1
    key = (name, *[(a.dtype, a.shape) for a in arrays])
    sig = _signatures.get(key)
    if sig is None:  # the checksum of the arguments, computed once per kind of call
        parts = [name] + [f"{a.dtype}{tuple(a.shape)}" for a in arrays]
        sig = zlib.crc32("|".join(parts).encode())
        if len(_signatures) > 1024:
            _signatures.clear()
        _signatures[key] = sig
    if len(g.signatures) > 256:
        g.signatures.clear()
    g.signatures[g.seq] = sig
    g.notes.post(MPI, g.seq, sig)
    return g.seq


def _run(g, name, seq, requests, finish, async_op: bool):
    work = Work(g, name, seq, requests, finish)
    if async_op:
        return work
    work.wait()
    return None


# ---------------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------------


def _array(t, name: str, what: str = "tensor"):
    if not isinstance(t, TensorBase):
        raise ArgumentTypeError(f"{name}: {what} must be a ferro Tensor, got {type(t).__name__}")
    return t._data


def _written(tensors) -> callable:
    # Bump the version counter of every tensor a collective wrote.
    def bump():
        for t in tensors:
            bump_version(t)

    return bump


def _chain(*fns):
    def run():
        for f in fns:
            if f is not None:
                f()

    return run


def _op(MPI, op: ReduceOp, dtype, name: str):
    if not isinstance(op, ReduceOp):
        raise ArgumentTypeError(f"{name}: op must be a ReduceOp, got {op!r}")
    if op is ReduceOp.AVG:
        if np.dtype(dtype).kind != "f":
            raise DtypeError(f"{name}: ReduceOp.AVG needs a floating point tensor, got {dtype}")
        return MPI.SUM
    if op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR) and np.dtype(dtype).kind == "f":
        raise DtypeError(f"{name}: {op.name} needs an integer or bool tensor, got {dtype}")
    return getattr(MPI, op.value)


def _root(g: ProcessGroup, rank: int, name: str, what: str) -> int:
    """The group rank of global rank ``rank``."""
    try:
        return g.ranks.index(int(rank))
    except ValueError:
        raise ArgumentError(f"{name}: {what}={rank} is not a rank of {g!r}") from None


def _same_shapes(name, arrays, shape, dtype, what):
    for a in arrays:
        if tuple(a.shape) != tuple(shape) or a.dtype != dtype:
            raise ShapeError(
                f"{name}: every tensor in {what} must have shape {tuple(shape)} and dtype "
                f"{dtype}, got {tuple(a.shape)} {a.dtype}"
            )


# ---------------------------------------------------------------------------------------------
# Collectives
# ---------------------------------------------------------------------------------------------


def all_reduce(tensor, op: ReduceOp = ReduceOp.SUM, group=None, async_op: bool = False):  # noqa: A002
    """Combine ``tensor`` over the group with ``op``; every rank gets the result in place."""
    g, MPI = _group(group), _mpi()
    a = _array(tensor, "all_reduce")
    mop = _op(MPI, op, a.dtype, "all_reduce")
    dt = T.mpi_type(MPI, a.dtype, "all_reduce")
    seq = _begin(g, "all_reduce", (a,))
    s = T.stage(MPI, a, writes=True)
    req = g.comm.Iallreduce(MPI.IN_PLACE, [s.buf, dt], op=mop)
    n = g.size()

    def finish():
        if op is ReduceOp.AVG:
            s.buf /= n
        s.finish()
        bump_version(tensor)

    return _run(g, "all_reduce", seq, [req], finish, async_op)


def broadcast(tensor, src: int, group=None, async_op: bool = False):  # noqa: A002
    """Copy ``tensor`` of global rank ``src`` into ``tensor`` on every rank of the group."""
    g, MPI = _group(group), _mpi()
    a = _array(tensor, "broadcast")
    root = _root(g, src, "broadcast", "src")
    dt = T.mpi_type(MPI, a.dtype, "broadcast")
    seq = _begin(g, "broadcast", (a,))
    receives = g.rank() != root
    s = T.stage(MPI, a, writes=receives)
    req = g.comm.Ibcast([s.buf, dt], root=root)
    finish = _chain(s.finish, _written([tensor]) if receives else None)
    return _run(g, "broadcast", seq, [req], finish, async_op)


def reduce(tensor, dst: int, op: ReduceOp = ReduceOp.SUM, group=None, async_op: bool = False):  # noqa: A002
    """Combine ``tensor`` over the group into ``tensor`` of global rank ``dst``."""
    g, MPI = _group(group), _mpi()
    a = _array(tensor, "reduce")
    root = _root(g, dst, "reduce", "dst")
    mop = _op(MPI, op, a.dtype, "reduce")
    dt = T.mpi_type(MPI, a.dtype, "reduce")
    seq = _begin(g, "reduce", (a,))
    mine = g.rank() == root
    s = T.stage(MPI, a, writes=mine)
    if mine:
        req = g.comm.Ireduce(MPI.IN_PLACE, [s.buf, dt], op=mop, root=root)
    else:
        req = g.comm.Ireduce([s.buf, dt], None, op=mop, root=root)
    n = g.size()

    def finish():
        if mine:
            if op is ReduceOp.AVG:
                s.buf /= n
            s.finish()
            bump_version(tensor)

    return _run(g, "reduce", seq, [req], finish, async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op: bool = False):  # noqa: A002
    """Concatenate every rank's ``input_tensor`` along dim 0 (or stack them, when
    ``output_tensor`` has one more dimension) into ``output_tensor`` on every rank."""
    g, MPI = _group(group), _mpi()
    a = _array(input_tensor, "all_gather_into_tensor", "input_tensor")
    out = _array(output_tensor, "all_gather_into_tensor", "output_tensor")
    n = g.size()
    if out.size != a.size * n or out.dtype != a.dtype:
        raise ShapeError(
            f"all_gather_into_tensor: output_tensor {tuple(out.shape)} {out.dtype} must hold "
            f"{n} x input_tensor {tuple(a.shape)} {a.dtype}"
        )
    dt = T.mpi_type(MPI, a.dtype, "all_gather_into_tensor")
    seq = _begin(g, "all_gather_into_tensor", (a,))
    src = T.stage(MPI, a, writes=False)
    dst = T.stage(MPI, out, writes=True)
    req = g.comm.Iallgather([src.buf, dt], [dst.buf, dt])
    finish = _chain(dst.finish, _written([output_tensor]))
    return _run(g, "all_gather_into_tensor", seq, [req], finish, async_op)


def all_gather(tensor_list, tensor, group=None, async_op: bool = False):  # noqa: A002
    """Every rank's ``tensor`` into ``tensor_list[rank]`` on every rank (same shapes)."""
    g, MPI = _group(group), _mpi()
    a = _array(tensor, "all_gather")
    n = g.size()
    outs = [_array(t, "all_gather", "tensor_list entries") for t in tensor_list]
    if len(outs) != n:
        raise ArgumentError(f"all_gather: tensor_list has {len(outs)} tensors for {n} ranks")
    _same_shapes("all_gather", outs, a.shape, a.dtype, "tensor_list")
    dt = T.mpi_type(MPI, a.dtype, "all_gather")
    seq = _begin(g, "all_gather", (a,))
    src = T.stage(MPI, a, writes=False)
    buf = T.empty_like_host(MPI, a, (n,) + tuple(a.shape))
    req = g.comm.Iallgather([src.buf, dt], [buf, dt])

    def finish():
        for o, piece in zip(outs, buf, strict=True):
            o[...] = T.to_kind(piece, o)
        _written(tensor_list)()

    return _run(g, "all_gather", seq, [req], finish, async_op)


def gather(tensor, gather_list=None, dst: int = 0, group=None, async_op: bool = False):  # noqa: A002
    """Every rank's ``tensor`` into ``gather_list`` on global rank ``dst`` (None elsewhere)."""
    g, MPI = _group(group), _mpi()
    a = _array(tensor, "gather")
    root = _root(g, dst, "gather", "dst")
    n = g.size()
    mine = g.rank() == root
    if mine:
        if gather_list is None or len(gather_list) != n:
            raise ArgumentError(f"gather: rank {dst} needs a gather_list of {n} tensors")
        outs = [_array(t, "gather", "gather_list entries") for t in gather_list]
        _same_shapes("gather", outs, a.shape, a.dtype, "gather_list")
    dt = T.mpi_type(MPI, a.dtype, "gather")
    seq = _begin(g, "gather", (a,))
    src = T.stage(MPI, a, writes=False)
    buf = T.empty_like_host(MPI, a, (n,) + tuple(a.shape)) if mine else None
    req = g.comm.Igather([src.buf, dt], [buf, dt] if mine else None, root=root)

    def finish():
        if mine:
            for o, piece in zip(outs, buf, strict=True):
                o[...] = T.to_kind(piece, o)
            _written(gather_list)()

    return _run(g, "gather", seq, [req], finish, async_op)


def scatter(tensor, scatter_list=None, src: int = 0, group=None, async_op: bool = False):  # noqa: A002
    """``scatter_list[r]`` of global rank ``src`` into ``tensor`` on rank ``r``."""
    g, MPI = _group(group), _mpi()
    a = _array(tensor, "scatter")
    root = _root(g, src, "scatter", "src")
    n = g.size()
    mine = g.rank() == root
    send = None
    if mine:
        if scatter_list is None or len(scatter_list) != n:
            raise ArgumentError(f"scatter: rank {src} needs a scatter_list of {n} tensors")
        ins = [_array(t, "scatter", "scatter_list entries") for t in scatter_list]
        _same_shapes("scatter", ins, a.shape, a.dtype, "scatter_list")
        # The pieces are stacked on the host: one copy, whatever the transport.
        send = np.stack([T.to_kind(x, np.empty(0)) for x in ins])
    dt = T.mpi_type(MPI, a.dtype, "scatter")
    seq = _begin(g, "scatter", (a,))
    dst = T.stage(MPI, a, writes=True)
    req = g.comm.Iscatter([send, dt] if mine else None, [dst.buf, dt], root=root)
    finish = _chain(dst.finish, _written([tensor]))
    return _run(g, "scatter", seq, [req], finish, async_op)


def reduce_scatter_tensor(
    output,
    input,
    op: ReduceOp = ReduceOp.SUM,
    group=None,
    async_op: bool = False,  # noqa: A002
):
    """Reduce ``input`` (``size`` equal blocks along dim 0) over the group; rank ``r`` gets
    block ``r`` of the result in ``output``."""
    g, MPI = _group(group), _mpi()
    a = _array(input, "reduce_scatter_tensor", "input")
    out = _array(output, "reduce_scatter_tensor", "output")
    n = g.size()
    if a.size != out.size * n or out.dtype != a.dtype:
        raise ShapeError(
            f"reduce_scatter_tensor: input {tuple(a.shape)} {a.dtype} must be {n} x output "
            f"{tuple(out.shape)} {out.dtype}"
        )
    mop = _op(MPI, op, a.dtype, "reduce_scatter_tensor")
    dt = T.mpi_type(MPI, a.dtype, "reduce_scatter_tensor")
    seq = _begin(g, "reduce_scatter_tensor", (a,))
    src = T.stage(MPI, a, writes=False)
    dst = T.stage(MPI, out, writes=True)
    req = g.comm.Ireduce_scatter_block([src.buf, dt], [dst.buf, dt], op=mop)

    def finish():
        if op is ReduceOp.AVG:
            dst.buf /= n
        dst.finish()
        bump_version(output)

    return _run(g, "reduce_scatter_tensor", seq, [req], finish, async_op)


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op: bool = False):  # noqa: A002
    """Rank ``r`` sends ``input_tensor_list[s]`` to rank ``s``, which receives it into its
    ``output_tensor_list[r]`` (equal shapes within each list)."""
    g, MPI = _group(group), _mpi()
    n = g.size()
    ins = [_array(t, "all_to_all", "input_tensor_list entries") for t in input_tensor_list]
    outs = [_array(t, "all_to_all", "output_tensor_list entries") for t in output_tensor_list]
    if len(ins) != n or len(outs) != n:
        raise ArgumentError(
            f"all_to_all: input and output lists need {n} tensors each, got {len(ins)} and "
            f"{len(outs)}"
        )
    _same_shapes("all_to_all", ins, ins[0].shape, ins[0].dtype, "input_tensor_list")
    _same_shapes("all_to_all", outs, ins[0].shape, ins[0].dtype, "output_tensor_list")
    dt = T.mpi_type(MPI, ins[0].dtype, "all_to_all")
    seq = _begin(g, "all_to_all", (ins[0],))
    send = np.stack([T.to_kind(x, np.empty(0)) for x in ins])
    recv = np.empty_like(send)
    req = g.comm.Ialltoall([send, dt], [recv, dt])

    def finish():
        for o, piece in zip(outs, recv, strict=True):
            o[...] = T.to_kind(piece, o)
        _written(output_tensor_list)()

    return _run(g, "all_to_all", seq, [req], finish, async_op)


def barrier(group=None, async_op: bool = False, device_ids=None):  # noqa: A002
    """Wait until every rank of the group has reached the barrier."""
    g = _group(group)
    seq = _begin(g, "barrier")
    return _run(g, "barrier", seq, [g.comm.Ibarrier()], None, async_op)


def isend(tensor, dst: int, group=None, tag: int = 0) -> Work:  # noqa: A002
    """Start sending ``tensor`` to global rank ``dst``; the Work completes when it is sent."""
    g, MPI = _group(group), _mpi()
    a = _array(tensor, "send")
    peer = _root(g, dst, "send", "dst")
    s = T.stage(MPI, a, writes=False)
    req = g.comm.Isend([s.buf, T.mpi_type(MPI, a.dtype, "send")], dest=peer, tag=tag)
    return Work(g, f"send to rank {dst}", g.seq, [req], finish=lambda: s)


def irecv(tensor, src: int | None = None, group=None, tag: int = 0) -> Work:  # noqa: A002
    """Start receiving into ``tensor`` from global rank ``src`` (any rank when None)."""
    g, MPI = _group(group), _mpi()
    a = _array(tensor, "recv")
    peer = MPI.ANY_SOURCE if src is None else _root(g, src, "recv", "src")
    s = T.stage(MPI, a, writes=True)
    req = g.comm.Irecv([s.buf, T.mpi_type(MPI, a.dtype, "recv")], source=peer, tag=tag)
    who = "any rank" if src is None else f"rank {src}"
    return Work(g, f"recv from {who}", g.seq, [req], _chain(s.finish, _written([tensor])))


def send(tensor, dst: int, group=None, tag: int = 0) -> None:  # noqa: A002
    """Send ``tensor`` to global rank ``dst`` and wait until it is sent."""
    isend(tensor, dst, group, tag).wait()


def recv(tensor, src: int | None = None, group=None, tag: int = 0) -> int:  # noqa: A002
    """Receive into ``tensor`` from global rank ``src`` (any when None); returns the sender."""
    g = _group(group)
    MPI = _mpi()
    if src is None:
        status = MPI.Status()
        deadline = time.monotonic() + g.timeout.total_seconds()
        while not g.comm.Iprobe(source=MPI.ANY_SOURCE, tag=tag, status=status):
            if time.monotonic() > deadline:
                raise DistributedTimeoutError(
                    f"recv from any rank: nothing arrived within {g.timeout.total_seconds():.1f} s"
                )
            time.sleep(1e-4)
        src = g.ranks[status.Get_source()]
    irecv(tensor, src, group, tag).wait()
    return src


# ---------------------------------------------------------------------------------------------
# Python objects (small ones: configurations, metrics), through ferro's pickle-free format
# ---------------------------------------------------------------------------------------------


def _dump(obj) -> np.ndarray:
    """``obj`` in ferro's save format, as int64 words (tensors hold no bytes), zero-padded."""
    from ferro.serialization import save

    f = io.BytesIO()
    save(obj, f)
    data = f.getvalue()
    return np.frombuffer(data + b"\0" * (-len(data) % 8), dtype=np.int64), len(data)


def _load(words: np.ndarray, nbytes: int):
    from ferro.serialization import load

    return load(io.BytesIO(words.tobytes()[:nbytes]))


def broadcast_object_list(object_list: list, src: int = 0, group=None, device=None) -> None:  # noqa: A002
    """Replace ``object_list``'s items on every rank by those of global rank ``src``.

    The objects travel in ferro's save format, not pickle: nested dicts, lists and tuples of
    tensors, arrays, numbers, strings, bools and None (docs/distributed.md, "Trust model").
    """
    g = _group(group)
    root = _root(g, src, "broadcast_object_list", "src")
    if g.rank() == root:
        words, nbytes = _dump(list(object_list))
        head = wrap(np.array([words.size, nbytes], dtype=np.int64))
    else:
        head = wrap(np.zeros(2, dtype=np.int64))
    broadcast(head, src, g)
    size, nbytes = (int(v) for v in head.numpy())
    body = wrap(words.copy() if g.rank() == root else np.zeros(size, dtype=np.int64))
    broadcast(body, src, g)
    if g.rank() != root:
        object_list[:] = _load(body.numpy(), nbytes)


def all_gather_object(object_list: list, obj, group=None) -> None:  # noqa: A002
    """Every rank's ``obj`` into ``object_list[rank]`` on every rank (ferro's save format)."""
    g = _group(group)
    n = g.size()
    if len(object_list) != n:
        raise ArgumentError(
            f"all_gather_object: object_list has {len(object_list)} slots for {n} ranks"
        )
    words, nbytes = _dump([obj])
    heads = wrap(np.zeros(2 * n, dtype=np.int64))
    all_gather_into_tensor(heads, wrap(np.array([words.size, nbytes], dtype=np.int64)), g)
    sizes = heads.numpy().reshape(n, 2)
    most = int(sizes[:, 0].max())
    padded = np.zeros(most, np.int64)
    padded[: words.size] = words
    out = wrap(np.zeros(n * most, np.int64))
    all_gather_into_tensor(out, wrap(padded), g)
    flat = out.numpy()
    for r in range(n):
        object_list[r] = _load(flat[r * most : (r + 1) * most], int(sizes[r, 1]))[0]


__all__ = [
    "DEFAULT_TIMEOUT",
    "GroupMember",
    "ProcessGroup",
    "ReduceOp",
    "Work",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_reduce",
    "all_to_all",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "destroy_process_group",
    "gather",
    "get_backend",
    "get_rank",
    "get_world_size",
    "group",
    "init_process_group",
    "irecv",
    "is_available",
    "is_initialized",
    "is_mpi_available",
    "isend",
    "new_group",
    "recv",
    "reduce",
    "reduce_scatter_tensor",
    "scatter",
    "send",
]
