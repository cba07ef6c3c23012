"""Grad mode: context managers, decorators, thread and task locality, inference tensors."""

import asyncio
import threading

import pytest

import ferro
from ferro.errors import GraphError


def _records():
    x = ferro.ones(1, requires_grad=True)
    return (x * 2).requires_grad


def test_no_grad_context_and_nesting():
    assert _records()
    with ferro.no_grad():
        assert not _records() and not ferro.is_grad_enabled()
        with ferro.enable_grad():
            assert _records()
        assert not _records()
    assert _records()


@pytest.mark.parametrize("deco", [ferro.no_grad, ferro.no_grad()])
def test_no_grad_as_decorator(deco):
    @deco
    def f():
        return _records()

    assert f() is False
    assert _records()


def test_set_grad_enabled_call_context_and_decorator():
    with ferro.set_grad_enabled(False):
        assert not _records()
    assert _records()
    ferro.set_grad_enabled(False)
    try:
        assert not _records()
    finally:
        ferro.set_grad_enabled(True)

    @ferro.set_grad_enabled(False)
    def f():
        return _records()

    assert _records()  # decorating does not switch the mode
    assert f() is False


def test_grad_mode_is_thread_local():
    seen = {}

    def worker():
        seen["thread"] = _records()

    with ferro.no_grad():
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        seen["main"] = _records()
    assert seen == {"thread": True, "main": False}


def test_grad_mode_follows_asyncio_tasks():
    async def inner():
        return _records()

    async def main():
        with ferro.no_grad():
            return await asyncio.create_task(inner())

    assert asyncio.run(main()) is False


def test_inference_mode_marks_tensors_and_refuses_them_in_recorded_ops():
    w = ferro.ones(2, requires_grad=True)
    with ferro.inference_mode():
        assert ferro.is_inference_mode_enabled()
        y = w * 2
        assert y.is_inference and not y.requires_grad
        with ferro.no_grad():  # stays in inference mode
            assert ferro.is_inference_mode_enabled()
    with pytest.raises(GraphError, match="inference"):
        y * w


def test_inference_mode_false_is_a_no_op():
    with ferro.inference_mode(False):
        assert _records()


# Factories, not instances: set_grad_enabled(False) switches the mode when it is called, so it must
# not be called while the tests are collected.
@pytest.mark.parametrize(
    "make_deco",
    [
        lambda: ferro.no_grad,
        lambda: ferro.no_grad(),
        lambda: ferro.set_grad_enabled(False),
        lambda: ferro.inference_mode(),
    ],
    ids=["no_grad", "no_grad()", "set_grad_enabled(False)", "inference_mode()"],
)
def test_decorated_generator_body_has_the_mode_and_the_caller_keeps_its_own(make_deco):
    @make_deco()
    def gen():
        for _ in range(3):
            yield _records(), ferro.is_grad_enabled()

    seen = []
    for item in gen():
        seen.append(item)
        assert _records() and ferro.is_grad_enabled()  # the caller, between next() calls
    assert seen == [(False, False)] * 3


def test_enable_grad_generator_records_inside_a_callers_no_grad():
    @ferro.enable_grad()
    def gen():
        yield _records()
        yield _records()

    with ferro.no_grad():
        it = gen()
        first = next(it)
        between = _records()
        second = next(it)
    assert (first, between, second) == (True, False, True)


def test_decorated_generator_keeps_send_throw_close_and_return():
    log = []

    @ferro.no_grad()
    def gen():
        try:
            got = yield "ready"
            log.append(("sent", got, ferro.is_grad_enabled()))
            try:
                yield "again"
            except KeyError:
                log.append(("caught", ferro.is_grad_enabled()))
                yield "recovered"
            yield "last"
        finally:
            log.append(("finally", ferro.is_grad_enabled()))
        return "done"

    it = gen()
    assert next(it) == "ready"
    assert it.send(42) == "again"
    assert it.throw(KeyError("k")) == "recovered"
    it.close()
    assert log == [("sent", 42, False), ("caught", False), ("finally", False)]
    assert ferro.is_grad_enabled()

    def outer():
        return (yield from gen())

    it = outer()
    next(it)
    it.send(None)
    it.send(None)
    with pytest.raises(StopIteration) as stop:
        it.send(None)
    assert stop.value.value == "done"


def test_decorated_coroutine_has_the_mode_and_other_tasks_do_not():
    seen = {}

    @ferro.no_grad()
    async def decorated():
        seen["before await"] = _records()
        await asyncio.sleep(0.01)
        seen["after await"] = _records()

    async def other():
        await asyncio.sleep(0.005)  # runs while ``decorated`` is suspended
        seen["other task"] = _records()

    async def main():
        await asyncio.gather(decorated(), other())
        seen["caller"] = _records()

    asyncio.run(main())
    assert seen == {
        "before await": False,
        "after await": False,
        "other task": True,
        "caller": True,
    }


def test_decorated_async_generator_body_has_the_mode_and_the_caller_keeps_its_own():
    @ferro.no_grad()
    async def agen():
        for _ in range(2):
            await asyncio.sleep(0)
            yield _records()

    async def main():
        out = []
        async for item in agen():
            out.append((item, _records()))
        return out

    assert asyncio.run(main()) == [(False, True), (False, True)]


def test_one_no_grad_instance_entered_in_two_threads_at_once():
    # A shared instance keeps one token stack per thread: exiting in either order restores
    # each thread's own mode (a shared stack popped the other thread's token: ValueError).
    import threading

    ng = ferro.no_grad()
    entered = threading.Barrier(2)
    leave_first = threading.Event()
    errors, modes = [], {}

    def run(name, wait_for=None):
        try:
            with ng:
                entered.wait()
                if wait_for is not None:
                    wait_for.wait()
                modes[name] = ferro.is_grad_enabled()
            if wait_for is None:
                leave_first.set()
            modes[name + " after"] = ferro.is_grad_enabled()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    a = threading.Thread(target=run, args=("a",))
    b = threading.Thread(target=run, args=("b", leave_first))
    a.start()
    b.start()
    a.join()
    b.join()
    assert not errors
    assert modes == {"a": False, "b": False, "a after": True, "b after": True}


def test_one_instance_reentered_restores_each_level():
    ng, eg = ferro.no_grad(), ferro.enable_grad()
    with ng:
        with eg:
            with ng:
                assert not _records()
            assert _records()
        assert not _records()
    assert _records()
    inf = ferro.inference_mode()
    with inf:
        with ng:
            assert ferro.is_inference_mode_enabled()
        assert ferro.is_inference_mode_enabled()
    assert _records() and not ferro.is_inference_mode_enabled()
