"""Hang drills for the all_reduce probe's tests: one rank stops at a stage like a rank stuck in the driver.

The drill lives here, around k3doctor's worker, never inside it: the worker that ships to every node
carries no test hook (issue 20 §6). ``NODE[:LOCAL_RANK]@STAGE[@once]`` names the rank and the stage;
the rig points that node's python (``tools.python`` and ``tools.container_python``) at a wrapper that
runs the real python with ``hang_site/sitecustomize.py`` loaded, which stops that rank with SIGSTOP
when it begins STAGE. ``@once``: only in the first run the node takes part in (the full run; the
hierarchy's runs after it find the node healthy), for an intermittent hang. The wrapper ``exec``s the
real python with the worker's own argv, so the probe's cleanup, which matches ``- k3probe:<run>``
exactly, finds the ranks as on a real node.
"""
from __future__ import annotations

import io
import os
import shlex
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import yaml

STAGES = ("start", "rendezvous", "init", "warmup", "sweep", "alltoall")  # the worker's stages, in order
SITE = Path(__file__).with_name("hang_site") / "sitecustomize.py"


class HangError(ValueError):
    """A drill that names no probed node or no stage of the worker."""


@dataclass(frozen=True)
class Hang:
    node: str
    local: int
    stage: str
    once: bool


def parse(text: str, nodes: list) -> Hang:
    """``NODE[:LOCAL]@STAGE[@once]`` -> Hang."""
    parts = text.split("@")
    target, stage = parts[0], parts[1] if len(parts) > 1 else ""
    once = parts[2:] == ["once"]
    node, _, local = target.partition(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and not once) or stage not in STAGES \
            or node not in nodes or not (local or "0").isdigit():
        raise HangError(f"hang {text!r}: expected NODE[:LOCAL_RANK]@STAGE[@once] with a probed node "
                        f"({', '.join(nodes)}) and a stage of {', '.join(STAGES)}")
    return Hang(node, int(local or 0), stage, once)


def wrapper(hang: Hang, site_dir: str, python: str, marker: str) -> str:
    """The shell script that stands in for ``python`` on the hung node (paths as that node sees them)."""
    env = {"K3RIG_HANG": f"{hang.local}@{hang.stage}", "K3RIG_HANG_ONCE": marker if hang.once else ""}
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    path = f"PYTHONPATH={shlex.quote(site_dir)}${{PYTHONPATH:+:$PYTHONPATH}}"  # the node's own entries kept
    return f"#!/bin/sh\n# k3rig hang drill (rig/k3rig/hang.py)\n{path} {assigns} exec {shlex.quote(python)} \"$@\"\n"


def install(hang: Hang, directory: Path, python: str = "/usr/bin/python3") -> Path:
    """The drill in ``directory`` on this machine (a rig node sees it at the same path); the wrapper's path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(SITE.read_text())
    script = directory / "python"
    script.write_text(wrapper(hang, str(directory), python, str(directory / "fired")))
    os.chmod(script, 0o755)
    return script


def tar(hang: Hang, directory: str, python: str = "/usr/bin/python3") -> bytes:
    """The drill at ``directory`` as a tar for ``put_archive`` at ``/`` (a node's container)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as archive:
        for name, data, mode in ((f"{directory}/sitecustomize.py", SITE.read_text(), 0o644),
                                 (f"{directory}/python", wrapper(hang, directory, python, f"{directory}/fired"),
                                  0o755)):
            info = tarfile.TarInfo(name.lstrip("/"))
            info.size, info.mode = len(data.encode()), mode
            archive.addfile(info, io.BytesIO(data.encode()))
    return buf.getvalue()


def host_inventory(inventory: dict, text: str, directory: Path) -> tuple:
    """(Hang, a copy of ``inventory``) whose hung node's host python is the drill's wrapper in ``directory``."""
    drill = parse(text, [n["name"] for n in inventory["nodes"]])
    entry = next(n for n in inventory["nodes"] if n["name"] == drill.node)
    python = entry.get("tools", {}).get("python") or inventory.get("cluster", {}).get("tools", {}).get("python") \
        or "python3"
    out = {**inventory, "nodes": [dict(n) for n in inventory["nodes"]]}
    hung = next(n for n in out["nodes"] if n["name"] == drill.node)
    hung["tools"] = {**entry.get("tools", {}), "python": str(install(drill, directory, python))}
    return drill, out


def main(argv: list) -> int:
    """``python3 -m k3rig.hang INVENTORY NODE[:LOCAL]@STAGE[@once] DIR``: the drill in DIR for a bench host's
    ``where: host`` runs; prints the inventory to use (DIR/inventory.yaml)."""
    if len(argv) != 4:
        sys.stderr.write(main.__doc__.split(":", 1)[1].strip() + "\n")
        return 2
    try:
        _, inventory = host_inventory(yaml.safe_load(Path(argv[1]).read_text()), argv[2], Path(argv[3]))
    except HangError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    path = Path(argv[3]) / "inventory.yaml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
