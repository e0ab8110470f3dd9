"""Real-node time for the rig's fake GPU tools (reference §31.5), so that a bench measures what a user of a
real node waits for: there ``amd-smi`` costs ~0.8 s a call, ``amd-smi static`` more, ``rocm-smi`` ~0.5 s,
although the library answers in milliseconds (the CLI's cost is interpreter start and library init).

A profile gives each tool (and a subcommand, by the first words of its recorded command line) two times: its
*start*, spent outside any lock, and its *query*, spent holding the node's lock, as rocm_smi_lib serialises
its API calls per device through a shared-memory mutex that amd-smi and rocm-smi share (process start and
library init are not under it). So overlapping a node's tool calls saves their starts, never their queries:
what a real node allows. The fake (bin/k3rig-fake) reads ``@latency`` ("START QUERY") beside the tool's
recorded outputs, a subcommand's own in its folder; the lock is a file in the node's /dev/shm named by the
address its sshd answers on (light nodes of one tray share a /dev/shm, not a lock).

The profile "zero" (no files: the fake answers at once) is what the test suite runs; ``apply`` sets one on a
started rack's trees, live (a scenario applied later resets them to "zero").

    python3 -c 'from k3rig import latency; ...'   # bench/side_by_side.py --profile real-node
"""

from __future__ import annotations

from pathlib import Path

# tool, or "tool first-words" of a subcommand -> (start s, query s under the node's lock); per call
PROFILES: dict[str, dict[str, tuple[float, float]]] = {
    "zero": {},
    "real-node": {"amd-smi": (0.7, 0.1), "amd-smi static": (1.4, 0.1), "rocm-smi": (0.4, 0.1)},
}
FILE = "@latency"


def apply(trees: list[Path], profile: str) -> None:
    """Set ``profile`` on the fake tools of every node tree in ``trees`` (a node reads its tree live)."""
    if profile not in PROFILES:
        raise ValueError(f"latency profile must be one of {sorted(PROFILES)}, not {profile!r}")
    times = PROFILES[profile]
    for tree in trees:
        data = tree / "opt/k3rig/data"
        for old in data.glob(f"**/{FILE}"):
            old.unlink()
        for name, (start, query) in times.items():
            tool, _, words = name.partition(" ")
            if not (data / tool).is_dir():
                continue
            folders = [data / tool] if not words else [d for d in (data / tool).iterdir()
                                                        if d.is_dir() and (d.name + " ").startswith(words + " ")]
            for folder in folders:
                (folder / FILE).write_text(f"{start:g} {query:g}\n")


def trees(rack) -> list[Path]:
    """The node trees of a started Rig (one per node) or LightRack (one per tray, its nodes share it)."""
    if hasattr(rack, "nodes"):
        return [node.tree for node in rack.nodes]
    return sorted(rack.workdir.glob("tray*/tree"))


def slowest_s(profile: str) -> float:
    """The slowest single call of the profile: a node's physical limit is at least this (plus one round trip)."""
    return max((start + query for start, query in PROFILES[profile].values()), default=0.0)
