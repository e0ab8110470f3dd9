"""Shared fixtures: the simulated rack (``k3rig``) for end-to-end tests.

One rack serves the whole session.  A test that needs a particular state calls
``rig.apply("<scenario>")`` first (it resets every node to healthy before applying the overlay),
so tests do not depend on each other's leftovers.
"""
from __future__ import annotations

import pytest
from k3rig import Rig, missing_requirements

# every process the tests start sees SIGINT as a terminal's foreground job does (tests/terminal_signals.py)
pytest_plugins = ["tests.terminal_signals"]


def rig_unavailable() -> str | None:
    """Why the simulated rack cannot run here (None when it can)."""
    missing = missing_requirements()
    return "simulated rack needs " + "; ".join(missing) if missing else None


@pytest.fixture(scope="session")
def rig(tmp_path_factory):
    """A started 4-node :class:`~k3rig.Rig` (healthy), stopped at the end of the session."""
    reason = rig_unavailable()
    if reason:
        pytest.skip(reason)
    rack = Rig(tmp_path_factory.mktemp("rig"))
    rack.start()
    yield rack
    rack.stop()


@pytest.fixture(scope="session")
def torch_on_nodes(rig):
    """The all_reduce probe's ranks import torch with the nodes' own python3 (their namespaces hide /root)."""
    import subprocess

    node = rig.nodes[0]
    probe = subprocess.run(["ssh", "-i", str(rig.identity_file), "-o", f"UserKnownHostsFile={rig.known_hosts}",
                            "-o", "BatchMode=yes", "-p", str(node.port), f"root@{node.host}",
                            "python3 -c 'import torch'"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.fail("the rig nodes' python3 cannot import torch; install it for them with "
                    "`/usr/bin/python3 -m pip install --break-system-packages torch==2.13.0`: " + probe.stderr[-300:])


def private_rack(tmp_path_factory, label: str, **options):
    """A started rack of one test module's own (its engines have seen no other module's containers), stopped
    after it; skipped where the rig cannot run. Use as ``yield from private_rack(tmp_path_factory, "label")``;
    ``options`` go to :class:`~k3rig.Rig` (``nodes``, ``sshd_options``)."""
    reason = rig_unavailable()
    if reason:
        pytest.skip(reason)
    with Rig(tmp_path_factory.mktemp(label), **options) as rack:
        yield rack


def light_nodes_unavailable() -> str | None:
    """Why light nodes (sshd processes in mount namespaces, no dockerd) cannot run here (None when they can)."""
    missing = [m for m in missing_requirements() if m.startswith(("root", "sshd", "unshare", "mount"))]
    return "light nodes need " + "; ".join(missing) if missing else None
