"""ferro's compiled core. Importing it from a source tree that was never built explains how.

Note [OpenMP wait policy]: three kernel modules run OpenMP teams (GNU libgomp) over large
arrays, while NumPy's matmul runs OpenBLAS's own threads. libgomp's default keeps a team's
threads spinning for a while after each parallel loop, and on a machine with as many cores as
threads that spinning takes the cores from the next GEMM's OpenBLAS threads: a Transformer step
(benchmarks/bench_seq.py's GPT case, 2 cores) ran 280 ms with the default and 112 ms with
passive waiting, PyTorch's 112 ms. The kernels' thresholds (kernels.h, norm_kernels.h) were
already sized for a team that sleeps, so ferro loads libgomp with OMP_WAIT_POLICY=PASSIVE, then
gives the environment back as it was: the setting is read once, when libgomp is first loaded,
and stays ferro's (PyTorch and scikit-learn load their own copies of libgomp). A user's own
OMP_WAIT_POLICY or GOMP_SPINCOUNT wins, and FERRO_OMP_PASSIVE=0 keeps libgomp's default. Where
another library loaded the system libgomp first, its setting holds for ferro too
(``openmp_wait_policy`` says which).
"""

import os as _os

# A user's own libgomp settings, which ferro leaves alone.
_USER_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def _libgomp_loaded() -> bool:
    try:
        with open("/proc/self/maps") as maps:
            names = {line.rsplit("/", 1)[-1].strip() for line in maps if "/" in line}
    except OSError:  # not Linux: nothing to tell
        return False
    # The soname ferro links (the file may be libgomp.so.1.0.0); a vendored copy under another
    # soname (scikit-learn's libgomp-<hash>.so) is a separate library and does not count.
    return any(n == "libgomp.so.1" or n.startswith("libgomp.so.1.") for n in names)


def _wait_policy(env) -> str:
    """The policy ferro's kernels will run under, as Note [OpenMP wait policy] says."""
    if any(k in env for k in _USER_SETTINGS):
        return "user"
    if env.get("FERRO_OMP_PASSIVE", "1") == "0" or _libgomp_loaded():
        return "default"  # opted out, or read already when another library loaded libgomp
    return "passive"


try:
    openmp_wait_policy = _wait_policy(_os.environ)
    if openmp_wait_policy == "passive":  # only while the core's import loads libgomp
        _os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        from ferro._C import accumulate, cpu_kernels, engine, graph, state, tensor  # noqa: F401
    finally:
        if openmp_wait_policy == "passive":
            del _os.environ["OMP_WAIT_POLICY"]
except ImportError as exc:  # pragma: no cover - exercised by tests/build/test_install.py
    _here = _os.path.dirname(_os.path.abspath(__file__))
    _setup = _os.path.join(_os.path.dirname(_os.path.dirname(_here)), "setup.py")
    if _os.path.exists(_setup) and "ferro._C" in str(exc):
        hint = ""
        try:
            from importlib.metadata import PackageNotFoundError, distribution

            try:
                distribution("ferro")
                hint = (
                    "\nferro *is* installed, but this unbuilt checkout in the current directory "
                    "shadows it: run from another directory, or use `python -P ...` (Python 3.11+),"
                    " which keeps the current directory off sys.path."
                )
            except PackageNotFoundError:
                pass
        except ImportError:
            pass
        raise ImportError(
            "ferro's compiled core (ferro._C) is not built in this source tree.\n"
            "Install ferro with `pip install .` (from the repository root) and import it from "
            "outside the source tree, or build in place with "
            "`python setup.py build_ext --inplace`." + hint
        ) from exc
    raise
