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
