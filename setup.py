"""Build ferro's compiled core.

The extension list is explicit: every compiled module lives under ``ferro/_C/``. Two build-time
switches (read here and nowhere else):

- ``FERRO_CYTHON_DEBUG=1``: bounds and wraparound checks on, ``-O0 -g``.
- ``FERRO_CYTHON_PROFILE=1``: Cython functions visible to cProfile (profile + linetrace).

OpenMP is used where the compiler accepts ``-fopenmp``; otherwise the kernels run serially.
Generated C goes to ``build/cython`` (``build/cython-debug``, ``build/cython-profile`` under the
switches) so it is neither committed nor shipped. Cython regenerates C only when a source
changed, not when a switch did: one folder per mode keeps each folder's directives right, and
``build_ext --force`` then recompiles a mode whose C is older than the extensions in place.
"""

import os
import sys
import tempfile

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

DEBUG = os.environ.get("FERRO_CYTHON_DEBUG") == "1"
PROFILE = os.environ.get("FERRO_CYTHON_PROFILE") == "1"

# Modules whose loops use OpenMP when the compiler supports it.
OPENMP_MODULES = {
    "ferro._C.cpu_kernels",
    "ferro._C.gemm",
    "ferro._C.conv_kernels",
    "ferro._C.norm_kernels",
    "ferro._C.pooling_kernels",
    "ferro._C.recurrent_kernels",  # the LSTM step split (Note [Hidden-unit split])
}
MODULES = [
    "tensor",
    "state",
    "graph",
    "accumulate",
    "allocator",
    "engine",
    "cpu_kernels",
    "gemm",
    "conv_kernels",
    "norm_kernels",
    "pooling_kernels",
    "recurrent_kernels",
    "resampling_kernels",
]


def _extensions():
    macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
    if PROFILE:
        macros += [("CYTHON_TRACE", "1"), ("CYTHON_TRACE_NOGIL", "1")]
    # No errno from libm: ferro never reads it, and a loop calling sqrt/sqrtf that may set it
    # stays scalar (Adam's update ran 8x slower on float32 for that alone).
    compile_args = (["-O0", "-g"] if DEBUG else ["-O3"]) + ["-fno-math-errno"]
    # GCC 14 rejects these by default; older compilers (CI's GCC 12) only warned, so a mismatch
    # (int64_t* against long long*, seen on the first GPU machine's build) would break users'
    # installs unseen. Make them errors everywhere.
    compile_args += [f"-Werror={w}" for w in ("incompatible-pointer-types", "int-conversion")]
    compile_args += ["-Werror=implicit-function-declaration"]
    return [
        Extension(
            f"ferro._C.{name}",
            [f"ferro/_C/{name}.pyx"],
            include_dirs=[np.get_include(), "ferro/_C"],
            define_macros=macros,
            extra_compile_args=list(compile_args),
        )
        for name in MODULES
    ]


class BuildExt(build_ext):
    """build_ext that adds OpenMP flags only when a test program compiles and links with them."""

    def _openmp_flags(self):
        if sys.platform == "win32":
            return ["/openmp"], []
        src = "#include <omp.h>\nint main(void) { return omp_get_max_threads() > 0 ? 0 : 1; }\n"
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "omp_probe.c")
            with open(path, "w") as f:
                f.write(src)
            try:
                objs = self.compiler.compile([path], output_dir=tmp, extra_postargs=["-fopenmp"])
                self.compiler.link_executable(
                    objs, "omp_probe", output_dir=tmp, extra_postargs=["-fopenmp"]
                )
            except Exception:
                return None
        return ["-fopenmp"], ["-fopenmp"]

    def build_extensions(self):
        flags = self._openmp_flags()
        for ext in self.extensions:
            if ext.name in OPENMP_MODULES and flags is not None:
                ext.extra_compile_args += flags[0]
                ext.extra_link_args += flags[1]
        super().build_extensions()


directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": not DEBUG,
    "embedsignature": True,
    "profile": PROFILE,
    "linetrace": PROFILE,
}

setup(
    ext_modules=cythonize(
        _extensions(),
        compiler_directives=directives,
        build_dir="build/cython" + ("-debug" if DEBUG else "") + ("-profile" if PROFILE else ""),
        annotate=False,
    ),
    cmdclass={"build_ext": BuildExt},
)
