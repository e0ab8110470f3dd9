"""k3doctor installed for the nodes' own python3, as a site would install it on every tray.

The rig nodes' namespaces hide /root, where this machine's interpreter and its packages live; their
``/usr/bin/python3`` (same minor version) sees /work and /tmp. This puts k3doctor (the worktree, through its
editable-install hook) and every distribution it needs (copied from the installed ones, no download) in a
user base below ``dest``: ``PYTHONUSERBASE=dest /usr/bin/python3 -m k3doctor.cli`` then runs on a node.
"""
from __future__ import annotations

import shutil
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

NODE_PYTHON = "/usr/bin/python3"


def _needed(name: str, seen: set) -> None:
    """``name`` and the distributions it requires on this platform (no extras), transitively."""
    key = canonicalize_name(name)
    if key in seen:
        return
    seen.add(key)
    for line in metadata.distribution(name).requires or ():
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            _needed(req.name, seen)


def install_for_nodes(dest: Path) -> str:
    """The user base ``dest`` holding k3doctor and its runtime dependencies; returns the env assignment."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = dest / "lib" / version / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    names: set = set()
    _needed("k3doctor", names)
    for name in sorted(names - {"k3doctor"}):
        dist = metadata.distribution(name)
        root = Path(dist.locate_file(""))
        for rel in dist.files or ():
            src = root / rel
            if rel.parts[0] == ".." or "__pycache__" in rel.parts or not src.is_file():
                continue
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, site / rel)
    hooks = list(Path(sysconfig.get_paths()["purelib"]).glob("__editable__*k3doctor*"))
    if not hooks:
        raise RuntimeError(f"k3doctor is not an editable install in {sysconfig.get_paths()['purelib']}")
    for hook in hooks:  # the .pth and its finder: k3doctor -> the worktree, k3doctor.checks -> checks/
        shutil.copy2(hook, site / hook.name)
    return f"PYTHONUSERBASE={dest}"
