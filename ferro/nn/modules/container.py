"""The containers Sequential, ModuleList and ModuleDict."""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Mapping

from ferro.errors import (
    IndexOutOfRangeError,
)
from ferro.nn.module import Module, _addindent


def _index(cls_name: str, idx, size: int) -> int:
    """``idx`` as a non-negative position in a container of ``size`` modules."""
    idx = operator.index(idx)
    if not -size <= idx < size:
        raise IndexOutOfRangeError(f"{cls_name}: index {idx} is out of range for {size} modules")
    return idx % size


class Sequential(Module):
    """Modules applied in order: ``Sequential(a, b, c)(x) == c(b(a(x)))``; named ``"0"``,
    ``"1"``... or by the keys of one ``OrderedDict`` argument."""

    def __init__(self, *modules) -> None:
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for k, m in modules[0].items():
                self.add_module(k, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def _key(self, i) -> str:
        return list(self._modules)[_index(type(self).__name__, i, len(self))]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return type(self)(OrderedDict(list(self._modules.items())[i]))
        return self._modules[self._key(i)]

    def __setitem__(self, i, module) -> None:
        setattr(self, self._key(i), module)

    def __delitem__(self, i) -> None:
        keys = list(self._modules)[i] if isinstance(i, slice) else [self._key(i)]
        for k in keys:
            del self._modules[k]
        # PyTorch renumbers, so that append keeps working
        self._modules = OrderedDict((str(j), m) for j, m in enumerate(self._modules.values()))

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __add__(self, other: Sequential) -> Sequential:
        return Sequential(*self, *other)

    def append(self, module) -> Sequential:
        """Add ``module`` at the end; returns ``self``."""
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules) -> Sequential:
        """Append every module of ``modules``; returns ``self``."""
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module) -> Sequential:
        """Insert ``module`` before position ``index``; returns ``self``."""
        mods = list(self._modules.values())
        if not -len(mods) <= index <= len(mods):
            raise IndexOutOfRangeError(
                f"Sequential.insert: index {index} is out of range for {len(mods)} modules"
            )
        mods.insert(index, module)
        self._modules = OrderedDict()
        for j, m in enumerate(mods):
            self.add_module(str(j), m)
        return self

    def pop(self, i):
        """Remove and return the module at ``i``."""
        m = self[i]
        del self[i]
        return m


class ModuleList(Module):
    """A list of modules, registered as ``"0"``, ``"1"``..."""

    def __init__(self, modules=None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return type(self)(list(self._modules.values())[i])
        return self._modules[str(_index(type(self).__name__, i, len(self)))]

    def __setitem__(self, i, module) -> None:
        setattr(self, str(_index(type(self).__name__, i, len(self))), module)

    def __delitem__(self, i) -> None:
        mods = list(self._modules.values())
        del mods[i if isinstance(i, slice) else _index(type(self).__name__, i, len(self))]
        self._modules = OrderedDict((str(j), m) for j, m in enumerate(mods))

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __iadd__(self, modules) -> ModuleList:
        return self.extend(modules)

    def __add__(self, other) -> ModuleList:
        return ModuleList([*self, *other])

    def append(self, module) -> ModuleList:
        """Add ``module`` at the end; returns ``self``."""
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules) -> ModuleList:
        """Append every module of ``modules``; returns ``self``."""
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module) -> None:
        """Insert ``module`` before position ``index``."""
        mods = list(self._modules.values())
        mods.insert(index, module)
        self._modules = OrderedDict()
        for j, m in enumerate(mods):
            self.add_module(str(j), m)

    def pop(self, i=-1):
        """Remove and return the module at ``i``."""
        m = self[i]
        del self[i]
        return m

    def __repr__(self) -> str:
        """PyTorch's compressed form: a run of modules with the same repr is printed once, as
        ``(2-4): 3 x Linear(...)``."""
        reprs = [repr(m) for m in self]
        if not reprs:
            return type(self).__name__ + "()"
        runs = []  # [first index, last index, repr]
        for i, r in enumerate(reprs):
            if runs and runs[-1][2] == r:
                runs[-1][1] = i
            else:
                runs.append([i, i, r])
        lines = [
            _addindent(f"({a}): {r}" if a == b else f"({a}-{b}): {b - a + 1} x {r}", 2)
            for a, b, r in runs
        ]
        return type(self).__name__ + "(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(Module):
    """A dict of modules, registered under their keys (insertion order)."""

    def __init__(self, modules=None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, k):
        return self._modules[k]

    def __setitem__(self, k, m) -> None:
        self.add_module(k, m)

    def __delitem__(self, k) -> None:
        del self._modules[k]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, k) -> bool:
        return k in self._modules

    def clear(self) -> None:
        """Remove every module."""
        self._modules.clear()

    def pop(self, k):
        """Remove and return the module under ``k``."""
        return self._modules.pop(k)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def update(self, modules) -> None:
        """Add the modules of a mapping, or of an iterable of ``(key, module)`` pairs."""
        pairs = modules.items() if isinstance(modules, Mapping) else modules
        for k, m in pairs:
            self[k] = m


__all__ = ["Sequential", "ModuleList", "ModuleDict"]
