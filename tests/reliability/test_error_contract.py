"""The error contract (issue 11): every deliberate error is a FerroError that also derives from
the builtin a Python user expects.

One test scans ferro's source (Python with ``ast``, Cython with a regex) for ``raise`` of a bare
builtin exception outside a short allow-list; another checks each class in ``ferro.errors``
against the builtin its module docstring documents.
"""

from __future__ import annotations

import ast
import inspect
import pathlib
import re

import numpy as np
import pytest

import ferro
from ferro import errors
from ferro.errors import ArgumentError, ArgumentTypeError, FerroError, ShapeError

# The source tree next to tests/ (the installed wheel holds no .pyx files).
PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "ferro"

BARE = (
    "ValueError",
    "TypeError",
    "IndexError",
    "RuntimeError",
    "KeyError",
    "NotImplementedError",
    "AssertionError",
)

# (file relative to ferro/, enclosing function's qualified name, exception) -> why it may stay.
ABSTRACT = "abstract method: subclasses must override it; the Python idiom, and PyTorch's"
ALLOWED = {
    ("autograd/function.py", "Function.forward", "NotImplementedError"): ABSTRACT,
    ("autograd/function.py", "Function.backward", "NotImplementedError"): ABSTRACT,
    ("nn/module.py", "Module.forward", "NotImplementedError"): ABSTRACT,
    ("optim/lr_scheduler.py", "LRScheduler.get_lr", "NotImplementedError"): ABSTRACT,
}


def _python_sites(path: pathlib.Path):
    """(line, enclosing qualified name, exception name) of each ``raise Builtin[(...)]``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    sites = []

    def visit(node, scope):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, [*scope, child.name])
                continue
            if isinstance(child, ast.Raise) and child.exc is not None:
                exc = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                if isinstance(exc, ast.Name) and exc.id in BARE:
                    sites.append((child.lineno, ".".join(scope) or "<module>", exc.id))
            visit(child, scope)

    visit(tree, [])
    return sites


_PYX_RAISE = re.compile(r"^\s*raise\s+(\w+)\b")
_PYX_DEF = re.compile(r"^\s*(?:async\s+)?(?:def|cdef|cpdef)\s+(?:[\w\[\]*, ]+\s+)?(\w+)\s*\(")


def _cython_sites(path: pathlib.Path):
    sites, scope = [], "<module>"
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        found = _PYX_DEF.match(line)
        if found:
            scope = found.group(1)
        found = _PYX_RAISE.match(line)
        if found and found.group(1) in BARE:
            sites.append((lineno, scope, found.group(1)))
    return sites


def _all_sites():
    sites = []
    for path in sorted(PACKAGE.rglob("*.py")) + sorted(PACKAGE.rglob("*.pyx")):
        scan = _python_sites if path.suffix == ".py" else _cython_sites
        rel = path.relative_to(PACKAGE).as_posix()
        sites.extend((rel, line, scope, exc) for line, scope, exc in scan(path))
    return sites


def test_no_bare_builtin_exceptions_are_raised():
    offenders = [
        f"ferro/{rel}:{line}: raise {exc} (in {scope})"
        for rel, line, scope, exc in _all_sites()
        if (rel, scope, exc) not in ALLOWED
    ]
    assert not offenders, (
        f"{len(offenders)} sites raise a bare builtin; raise the matching ferro.errors class "
        "instead (or add the site to ALLOWED with its reason):\n" + "\n".join(offenders)
    )


def test_allow_list_names_existing_sites_only():
    present = {(rel, scope, exc) for rel, _, scope, exc in _all_sites()}
    assert PACKAGE.is_dir() and present, f"no sources found under {PACKAGE}"
    stale = sorted(set(ALLOWED) - present)
    assert not stale, f"allow-list entries that match no raise any more: {stale}"


def test_scanner_finds_every_form_of_a_bare_raise(tmp_path):
    """The scanner is not vacuous: calls, bare names, nested scopes and Cython lines count."""
    py = tmp_path / "m.py"
    py.write_text(
        "class A:\n"
        "    def f(self):\n"
        "        raise ValueError('x')\n"
        "def g():\n"
        "    def h():\n"
        "        raise KeyError\n"
        "    raise errors.ShapeError('fine')\n"
    )
    assert _python_sites(py) == [(3, "A.f", "ValueError"), (6, "g.h", "KeyError")]
    pyx = tmp_path / "m.pyx"
    pyx.write_text(
        "cpdef int add(double[:] a) except -1:\n"
        "    # raise TypeError in a comment does not count\n"
        "    raise IndexError('y')\n"
        "cdef object k():\n"
        "    raise GraphError('fine')\n"
    )
    assert _cython_sites(pyx) == [(3, "add", "IndexError")]


# Bad arguments to ops, found by probing: each must raise its typed error, naming the op, before
# anything runs (a bare NumPy or Python error escaped instead).
_X = ferro.ones(2, 3)
BAD_OP_CALLS = {
    "max of an empty tensor": (lambda: ferro.max(ferro.ones(0, 3)), ShapeError, "max"),
    "amax over an empty axis": (lambda: ferro.amax(ferro.ones(0, 3), 0), ShapeError, "amax"),
    "min over an empty axis": (lambda: ferro.min(ferro.ones(2, 0), 1), ShapeError, "min"),
    "sum over a float axis": (lambda: ferro.sum(_X, axis=1.5), ArgumentTypeError, "sum"),
    "mean over float axes": (lambda: ferro.mean(_X, axis=[0.5]), ArgumentTypeError, "mean"),
    "log_softmax over a float axis": (
        lambda: ferro.log_softmax(_X, 1.0),
        ArgumentTypeError,
        "log_softmax",
    ),
    "max over two axes": (lambda: ferro.max(_X, (0, 1)), ArgumentTypeError, "max"),
    "var with a str correction": (lambda: ferro.var(_X, correction="a"), ArgumentTypeError, "var"),
    "norm with p=3": (lambda: ferro.norm(_X, 3), ArgumentError, "norm"),
    "clamp without bounds": (lambda: ferro.clamp(_X), ArgumentError, "clamp"),
    "gelu with an unknown form": (lambda: ferro.gelu(_X, "erf"), ArgumentError, "gelu"),
    "hardtanh with min > max": (lambda: ferro.hardtanh(_X, 2.0, 1.0), ArgumentError, "hardtanh"),
    "hardtanh with a None bound": (
        lambda: ferro.hardtanh(_X, None),
        ArgumentTypeError,
        "hardtanh: min_val",
    ),
    "leaky_relu with a str slope": (
        lambda: ferro.leaky_relu(_X, "0.1"),
        ArgumentTypeError,
        "leaky_relu: negative_slope",
    ),
    "elu with a str alpha": (lambda: ferro.elu(_X, "a"), ArgumentTypeError, "elu: alpha"),
    "softplus with a bool beta": (
        lambda: ferro.softplus(_X, True),
        ArgumentTypeError,
        "softplus: beta",
    ),
    "dropout with p > 1": (lambda: ferro.dropout(_X, 1.5), ArgumentError, "dropout"),
    "dropout with a NaN p": (lambda: ferro.dropout(_X, float("nan")), ArgumentError, "dropout"),
    "dropout with a str p": (lambda: ferro.dropout(_X, "0.5"), ArgumentTypeError, "dropout: p"),
    "einsum with a stray dot": (lambda: ferro.einsum("i.j->ij", _X), ArgumentError, "einsum"),
    "einsum with two arrows": (lambda: ferro.einsum("ij->ij->ij", _X), ArgumentError, "einsum"),
    "einsum of a diagonal": (
        lambda: ferro.einsum("ii->i", ferro.ones(2, 2)),
        ArgumentError,
        "einsum",
    ),
    "einsum naming too many operands": (
        lambda: ferro.einsum("ij,jk->ik", _X),
        ArgumentError,
        "einsum",
    ),
    "einsum with a digit": (lambda: ferro.einsum("i1->i", _X), ArgumentError, "einsum"),
    "einsum with a new output letter": (lambda: ferro.einsum("ij->k", _X), ArgumentError, "einsum"),
    "einsum repeating an output letter": (
        lambda: ferro.einsum("ij->ii", _X),
        ArgumentError,
        "einsum",
    ),
    "einsum with sizes that disagree": (
        lambda: ferro.einsum("ij,jk->ik", _X, ferro.ones(4, 5)),
        ShapeError,
        r"letter 'j' has sizes \[3, 4\]",
    ),
    "einsum with non-str subscripts": (lambda: ferro.einsum(None, _X), ArgumentTypeError, "einsum"),
}


@pytest.mark.parametrize("case", sorted(BAD_OP_CALLS))
def test_bad_op_arguments_raise_typed_errors(case):
    call, error, op = BAD_OP_CALLS[case]
    with pytest.raises(error, match=op):
        call()


def test_numpy_integers_and_ranges_are_axes():
    x = ferro.tensor(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(ferro.sum(x, axis=np.int64(1)).numpy(), [3.0, 12.0])
    np.testing.assert_array_equal(ferro.sum(x, axis=range(2)).numpy(), 15.0)
    np.testing.assert_array_equal(ferro.max(x, np.int32(0))[0].numpy(), [3.0, 4.0, 5.0])


def test_reducing_the_nonempty_axes_of_an_empty_tensor_is_fine():
    values, indices = ferro.max(ferro.ones(0, 3), 1)
    assert values.shape == (0,) and indices.shape == (0,)
    np.testing.assert_array_equal(ferro.amin(ferro.ones(3, 0), 0).numpy(), np.ones((0,)))


# Each class and the base a user catches it by: errors.py's docstring and the contract.
BASES = {
    "FerroError": Exception,
    "ShapeError": ValueError,
    "DtypeError": TypeError,
    "DeviceError": TypeError,
    "GraphError": RuntimeError,
    "GradientError": errors.GraphError,
    "AnomalyError": errors.GraphError,
    "CheckpointError": errors.GraphError,
    "SerializationError": ValueError,
    "GradcheckError": AssertionError,
    "ArgumentError": ValueError,
    "ArgumentTypeError": TypeError,
    "IndexOutOfRangeError": IndexError,
    "ReadOnlyError": ValueError,
    "NotSupportedError": NotImplementedError,
    "MissingFeatureError": AttributeError,
    "DistributedError": RuntimeError,
    "DistributedTimeoutError": TimeoutError,
    "NondeterministicError": RuntimeError,
    "ProcessException": RuntimeError,
    "ProcessRaisedException": errors.ProcessException,
    "ProcessExitedException": errors.ProcessException,
}


@pytest.mark.parametrize("name", errors.__all__)
def test_each_error_class_derives_from_ferro_error_and_its_builtin(name):
    cls = getattr(errors, name)
    assert name in BASES, f"{name} is new: add it to BASES with the builtin it derives from"
    assert issubclass(cls, FerroError)
    assert issubclass(cls, BASES[name]), f"{name} does not derive from {BASES[name].__name__}"


def test_every_error_class_is_exported():
    defined = {
        name
        for name, obj in vars(errors).items()
        if inspect.isclass(obj) and issubclass(obj, FerroError)
    }
    assert defined == set(errors.__all__)
