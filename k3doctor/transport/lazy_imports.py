"""Modules the CLI's start does not need, deferred until first used (CLI start to first connection, issue 12).

Importing this module first puts a stand-in for each in ``sys.modules`` that imports the real one on its
first attribute use:
- ``paramiko`` (~0.1 s): not needed before the first node's TCP probe; its first use is that node's
  handshake (k3doctor/transport/ssh.py ``_login``), so every node's connect is under way while it loads.
- ``invoke``: paramiko imports it for one ssh_config feature (``Match exec``); it pulls in asyncio and
  unittest.mock, and costs nothing unless a ``Match exec`` line is evaluated.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types

DEFERRED = ("paramiko", "invoke")


# Several node threads reach their first handshake (paramiko's first use) at once; re-entrant, as a
# deferred module's import may use another deferred module.
_SWAP = threading.RLock()


class _Deferred(types.ModuleType):
    """Stands for a module until an attribute is asked for; then the real module is imported and answers."""

    def __getattr__(self, attr):
        with _SWAP:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
            real = importlib.import_module(self.__name__)
        return getattr(real, attr)


def defer(name: str) -> None:
    """Make ``import name`` cheap until the module is used (a no-op when already imported or not installed)."""
    if name not in sys.modules and importlib.util.find_spec(name) is not None:
        sys.modules[name] = _Deferred(name)


for _name in DEFERRED:
    defer(_name)
