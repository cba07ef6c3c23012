"""The installed package is the compiled one, ships no generated C, and an unbuilt tree explains
how to build."""

import os
import pathlib
import shutil
import subprocess
import sys

import ferro
from ferro._C import accumulate, cpu_kernels, engine, graph, state, tensor

CORE = (state, tensor, graph, accumulate, engine, cpu_kernels)


def test_core_modules_are_compiled_extensions():
    for mod in CORE:
        assert pathlib.Path(mod.__file__).suffix in (".so", ".pyd"), mod.__file__


def test_no_generated_c_is_installed():
    root = pathlib.Path(ferro.__file__).parent
    assert not list(root.rglob("*.c"))


def test_type_stubs_ship_with_the_package():
    root = pathlib.Path(ferro.__file__).parent
    assert (root / "py.typed").exists()
    for mod in CORE:
        assert (root / "_C" / f"{mod.__name__.rsplit('.', 1)[1]}.pyi").exists()


def test_unbuilt_source_tree_gives_a_friendly_error(tmp_path):
    # Recreate a source checkout without compiled extensions and import from it.
    src = pathlib.Path(ferro.__file__).parent
    dst = tmp_path / "checkout"
    shutil.copytree(src, dst / "ferro", ignore=shutil.ignore_patterns("*.so", "*.pyd"))
    (dst / "setup.py").write_text("# placeholder\n")
    env = dict(os.environ, PYTHONPATH=str(dst))
    proc = subprocess.run(
        [sys.executable, "-c", "import ferro"], cwd=dst, env=env, capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "not built" in proc.stderr and "pip install ." in proc.stderr


def test_cuda_kernel_sources_ship_with_the_package():
    from ferro.cuda import loader

    kdir = pathlib.Path(loader.KERNEL_DIR)
    assert (kdir / "common.cuh").exists()
    for name in loader.SOURCES:
        assert (kdir / f"{name}.cu").exists(), name
