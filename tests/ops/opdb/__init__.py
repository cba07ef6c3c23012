"""The op database: one entry per op drives the generic op tests.

An entry (:class:`opdb.core.OpInfo`) gives the ferro call, a NumPy reference, sample inputs and
what the property tests need to draw inputs of their own. The entries live in one module per op
family, named like the family's module in ``ferro/ops/`` and holding the entries of the ops that
module defines, in a list ``ENTRIES``; :mod:`opdb.core` holds what the families share.

The generated tests (``test_opdb.py``) check, for every entry and sample: forward against the
reference in float32 and float64, gradcheck in float64 (central differences), that inputs are
not mutated by forward or backward, that float32 and float64 agree, and that 0-d, empty,
broadcast, non-contiguous and repeated-argument (``f(x, x)``) samples work. The property tests
(``test_properties.py``) draw shapes and values for the entries marked ``elementwise`` or
``reduction``. Guard tests fail when a registered op has no entry or an entry sits in the wrong
family's module.
"""

from __future__ import annotations

from importlib import import_module

from ferro.ops import FAMILIES
from opdb.core import OpInfo, Sample

# Families with no database module, and why. Every other family in ferro.ops.FAMILIES must have
# one: importing opdb fails until a new family gets its module.
WITHOUT_ENTRIES = {
    "inplace": "in-place ops mutate their first argument and are not registered ops; "
    "tests/ops/test_inplace.py and tests/reliability cover them",
}


def _entries(family: str) -> list[OpInfo]:
    try:
        module = import_module(f"opdb.{family}")
    except ModuleNotFoundError as e:
        if e.name == f"opdb.{family}":
            e.add_note(
                f"ferro.ops.{family} is an op family (ferro.ops.FAMILIES): give its ops entries "
                f"in tests/ops/opdb/{family}.py (a list ENTRIES of opdb.core.OpInfo)"
            )
        raise
    return module.ENTRIES


BY_FAMILY: dict[str, list[OpInfo]] = {
    family: _entries(family) for family in FAMILIES if family not in WITHOUT_ENTRIES
}
OPS: list[OpInfo] = [op for entries in BY_FAMILY.values() for op in entries]
BY_NAME: dict[str, OpInfo] = {op.name: op for op in OPS}

__all__ = ["BY_FAMILY", "BY_NAME", "OPS", "WITHOUT_ENTRIES", "OpInfo", "Sample"]
