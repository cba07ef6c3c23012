"""The recurrent cells' CUDA kernels (``ferro/cuda/kernels/recurrent.cu`` through
``ferro.cuda.recurrent``) against the reference cell math (``GenericCells`` on NumPy): on a
device when there is one (marked gpu), and everywhere on the CPU emulation of
``tests/cuda/test_kernels.py`` (the real kernel source compiled with g++, launched with the real
grid). NVRTC compiles the source in ``test_kernels_compile.py`` (it is in ``loader.SOURCES``).
Also the whole layer on a device: the fused forward and backward against the generic ones."""

import sys

import numpy as np
import pytest
from test_kernels import _FAKE_CUPY, _EmuKernel, _emulator, _symbol, host

import ferro
from ferro.cuda import recurrent as R
from ferro.errors import DtypeError, ShapeError
from ferro.ops.recurrent import GenericCells


@pytest.fixture(params=["emu", pytest.param("cuda", marks=pytest.mark.gpu)])
def xp(request, monkeypatch):
    if request.param == "cuda":
        cp = pytest.importorskip("cupy")
        if not ferro.cuda.is_available():
            pytest.skip("no CUDA device")
        return cp
    lib = _emulator()
    if lib is None:
        pytest.skip("no g++ for the CPU emulation of the kernels")
    monkeypatch.setitem(sys.modules, "cupy", _FAKE_CUPY)
    monkeypatch.setattr(R, "kernel", lambda name, expr: _EmuKernel(getattr(lib, _symbol(expr))))
    return np


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows,hidden", [(3, 5), (1, 1), (0, 2), (7, 300)])
def test_cell_gradient_kernels_match_the_reference(xp, dtype, rows, hidden):
    rng = np.random.default_rng(rows * 31 + hidden)
    ref = GenericCells(np)

    def arr(*shape):
        return rng.uniform(-1, 1, size=shape).astype(dtype)

    tol = 1e-6 if dtype == np.float32 else 1e-14
    gh, gc, cp_, tc, hgn, hp = (arr(rows, hidden) for _ in range(6))
    acts4, acts3 = arr(rows, 4 * hidden), arr(rows, 3 * hidden)
    want_gates = np.empty((rows, 4 * hidden), dtype)
    want = ref.lstm_bwd(gh, gc, acts4, cp_, tc, want_gates)
    gates = xp.empty((rows, 4 * hidden), dtype)
    got = R.lstm_bwd(*(xp.asarray(a) for a in (gh, gc, acts4, cp_, tc)), gates)
    np.testing.assert_allclose(host(got), want, rtol=tol, atol=tol)
    np.testing.assert_allclose(host(gates), want_gates, rtol=tol, atol=tol)
    w_in, w_hid = np.empty((rows, 3 * hidden), dtype), np.empty((rows, 3 * hidden), dtype)
    want = ref.gru_bwd(gh, acts3, hgn, hp, w_in, w_hid)
    g_in, g_hid = xp.empty((rows, 3 * hidden), dtype), xp.empty((rows, 3 * hidden), dtype)
    got = R.gru_bwd(*(xp.asarray(a) for a in (gh, acts3, hgn, hp)), g_in, g_hid)
    np.testing.assert_allclose(host(got), want, rtol=tol, atol=tol)
    np.testing.assert_allclose(host(g_in), w_in, rtol=tol, atol=tol)
    np.testing.assert_allclose(host(g_hid), w_hid, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows,hidden", [(3, 5), (1, 1), (0, 2), (7, 300)])
def test_cell_forward_kernels_match_the_reference(xp, dtype, rows, hidden):
    rng = np.random.default_rng(rows * 17 + hidden)
    ref = GenericCells(np)

    def arr(*shape):
        return (rng.normal(size=shape) * 3).astype(dtype)

    tol = dict(rtol=2e-6, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-14)
    x, hproj, c = arr(rows, 4 * hidden), arr(rows, 4 * hidden), arr(rows, hidden)
    want_acts, want_tc = hproj.copy(), np.empty((rows, hidden), dtype)
    want = ref.lstm_fwd(x, want_acts, c, want_tc)
    acts, tc = xp.asarray(hproj.copy()), xp.empty((rows, hidden), dtype)
    got = R.lstm_fwd(xp.asarray(x), acts, xp.asarray(c), tc)
    for a, b in zip((*got, acts, tc), (*want, want_acts, want_tc), strict=True):
        np.testing.assert_allclose(host(a), b, **tol)
    x3, hg, h = arr(rows, 3 * hidden), arr(rows, 3 * hidden), arr(rows, hidden)
    w_acts, w_hgn = np.empty((rows, 3 * hidden), dtype), np.empty((rows, hidden), dtype)
    want = ref.gru_fwd(x3, hg, h, w_acts, w_hgn)
    acts, hgn = xp.empty((rows, 3 * hidden), dtype), xp.empty((rows, hidden), dtype)
    got = R.gru_fwd(*(xp.asarray(a) for a in (x3, hg, h)), acts, hgn)
    for a, b in zip((got, acts, hgn), (want, w_acts, w_hgn), strict=True):
        np.testing.assert_allclose(host(a), b, **tol)


def test_wrappers_refuse_what_the_kernels_cannot_read(xp):
    z = xp.zeros((2, 3))
    ok = (z, z, xp.zeros((2, 12)), z, z, xp.zeros((2, 12)))
    assert R.accepts(ok) and not R.accepts(()) and not R.accepts((z, z.astype(np.float32)))
    with pytest.raises(ShapeError, match=r"acts must be C-contiguous of shape \(2, 12\)"):
        R.lstm_bwd(z, z, xp.zeros((2, 8)), z, z, xp.zeros((2, 12)))
    with pytest.raises(DtypeError, match="gc is float32"):
        R.lstm_bwd(z, z.astype(np.float32), *ok[2:])
    with pytest.raises(ShapeError, match="C-contiguous"):
        R.gru_bwd(z, xp.zeros((9, 2)).T, z, z, xp.zeros((2, 9)), xp.zeros((2, 9)))
    with pytest.raises(ShapeError, match=r"tc must be C-contiguous of shape \(2, 3\)"):
        R.lstm_fwd(xp.zeros((2, 12)), xp.zeros((2, 12)), z, xp.zeros((2, 2)))
    with pytest.raises(DtypeError, match="hg_n is float32"):
        R.gru_fwd(xp.zeros((2, 9)), xp.zeros((2, 9)), z, xp.zeros((2, 9)), z.astype(np.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_layer_on_a_device_matches_the_generic_path(mode):
    from ferro.ops.fused import overrides

    pytest.importorskip("cupy")
    if not ferro.cuda.is_available():
        pytest.skip("no CUDA device")
    grads = {}
    for enabled in (True, False):
        ferro.manual_seed(0)
        layer = getattr(ferro.nn, mode)(3, 4, num_layers=2, bidirectional=True).to("cuda")
        x = ferro.randn(5, 2, 3, device="cuda", requires_grad=True)
        with overrides(enabled):
            out, _ = layer(x)
            out.sum().backward()
        nodes, stack = {}, [out.grad_fn]
        while stack:  # the graph's recurrent_layer nodes: two layers, two directions
            node = stack.pop()
            if node.op.name == "recurrent_layer":
                nodes[id(node)] = node
            stack.extend(t for t, _ in node.next_functions if hasattr(t, "op"))
        assert len(nodes) == 4
        assert all(n.fused_forward == enabled == n.fused_backward for n in nodes.values())
        grads[enabled] = [x.grad.cpu().numpy()] + [p.grad.cpu().numpy() for p in layer.parameters()]
    for a, b in zip(grads[True], grads[False], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
