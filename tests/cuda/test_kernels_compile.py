"""Every CUDA kernel source compiles with NVRTC for sm_80 and sm_90, on machines without a GPU
(cupy.cuda.nvrtc needs no device), so a broken kernel fails CI."""

import os

import pytest

from ferro.cuda import loader

# The test-cuda extra brings CuPy with NVRTC; without it these tests skip and say how to run them.
cupy = pytest.importorskip(
    "cupy", reason='no CuPy: pip install ".[test-cuda]" to compile the kernels'
)
nvrtc = cupy.cuda.nvrtc


def test_every_kernel_file_is_listed():
    files = {f[:-3] for f in os.listdir(loader.KERNEL_DIR) if f.endswith(".cu")}
    assert files == set(loader.SOURCES)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(loader.SOURCES))
def test_kernel_compiles_with_nvrtc(name, arch):
    prog = nvrtc.createProgram(loader.source(name), f"{name}.cu", [], [])
    try:
        for expr in loader.SOURCES[name]:
            nvrtc.addNameExpression(prog, expr)
        try:
            nvrtc.compileProgram(prog, [f"--gpu-architecture={arch}", *loader.COMPILE_OPTIONS])
        except nvrtc.NVRTCError as exc:
            pytest.fail(
                f"{name}.cu does not compile for {arch}:\n{nvrtc.getProgramLog(prog)}\n{exc}"
            )
        for expr in loader.SOURCES[name]:
            assert nvrtc.getLoweredName(prog, expr)
        assert len(nvrtc.getCUBIN(prog)) > 0
    finally:
        nvrtc.destroyProgram(prog)


def test_launch_configuration():
    assert loader.grid_for(1) == ((1,), (loader.BLOCK,))
    assert loader.grid_for(10**9)[0][0] == 65535  # grid-stride loops cover the rest
    assert loader.ctype("float32") == "float" and loader.ctype("float64") == "double"
