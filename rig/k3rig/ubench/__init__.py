"""Fake ubench 07_ualoe tools for the simulated rack (see ``k3rig_ubench.py``)."""
from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
TOOLS = ("ualoe_p2p.exe", "ualoe_bw.exe")


def healthy_bw(tray: int) -> dict:
    """Per-tray figures inside the V6 healthy ranges (read 5,772-5,797 / write 6,219-6,228 /
    bidir 10,942-10,981 GB/s, reference §8), distinct per tray so a test can tell pairs apart."""
    return {"read": 5772.0 + (7 * tray) % 25, "write": 6219.0 + (3 * tray) % 9, "bidir": 10942.0 + (11 * tray) % 39}


def install(tree: Path, tray: int, write_file) -> None:
    """Put the fakes where the inventory's ubench_dir points, plus this node's healthy config."""
    wrapper = (HERE / "ualoe-tool").read_bytes()
    for tool in TOOLS:
        write_file(tree, f"root/ubench/build/{tool}", wrapper, 0o755)
    write_file(tree, "opt/k3rig/bin/k3rig-ubench.py", (HERE / "k3rig_ubench.py").read_bytes(), 0o644)
    write_file(tree, "opt/k3rig/data/ubench/config.json", json.dumps({"p2p": "ok", "bw": healthy_bw(tray)}) + "\n")
