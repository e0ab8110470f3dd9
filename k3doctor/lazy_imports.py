"""Modules the CLI's start does not need, deferred until first used (CLI start to first connection, issue 12).

paramiko imports ``invoke`` at its own import for one ssh_config feature (``Match exec``); invoke pulls in
asyncio and unittest.mock, about a fifth of ``k3doctor check``'s start. Importing this module first puts a
stand-in for ``invoke`` in ``sys.modules`` that imports the real one on its first attribute use, so it
costs nothing unless a ``Match exec`` line is evaluated.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import types

DEFERRED = ("invoke",)


class _Deferred(types.ModuleType):
    """Stands for a module until an attribute is asked for; then the real module is imported and answers."""

    def __getattr__(self, attr):
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attr)


def defer(name: str) -> None:
    """Make ``import name`` cheap until the module is used (a no-op when already imported or not installed)."""
    if name not in sys.modules and importlib.util.find_spec(name) is not None:
        sys.modules[name] = _Deferred(name)


for _name in DEFERRED:
    defer(_name)
