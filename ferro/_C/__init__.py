"""ferro's compiled core. Importing it from a source tree that was never built explains how."""

try:
    from ferro._C import accumulate, cpu_kernels, engine, graph, state, tensor  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by tests/build/test_install.py
    import os

    _here = os.path.dirname(os.path.abspath(__file__))
    _setup = os.path.join(os.path.dirname(os.path.dirname(_here)), "setup.py")
    if os.path.exists(_setup) and "ferro._C" in str(exc):
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
