"""Every kernel file a check declares, read from this machine's own kernel as a node's gather reads it
(reference §31.1): the reader (python3) and the shell's path (a node without it), at the real 4 MiB cap.

The rig bind-mounts regular files over a few kernel files (rig/k3rig/fixtures.py BIND_FILES: a boot id per
node, the host's /proc/meminfo; MI355X_BIND_FILES: /proc/cmdline), which read like any file: a kernel that
answers a large read with ENOMEM (/proc/sys) is only met here.
"""
import os
import subprocess
import sys

import pytest
from k3rig.fixtures import BIND_FILES, MI355X_BIND_FILES

from k3doctor import platforms
from k3doctor.gather.node_script import _reading
from k3doctor.inventory.types import Settings
from k3doctor.views.kernel_log import BOOT_ID_SHAPE
from k3doctor.readings import OUTPUT_CAP_BYTES, File, Glob
from k3doctor.registry import REGISTRY, load_checks
from tests.unit.test_node_reader import frames

READERS = {"reader": sys.executable, "shell": "no-such-python-k3"}  # the shell's path: no python3 on the node


def declared() -> list:
    """Every File and Glob any check declares, on every platform (default settings)."""
    load_checks()
    specs = {spec for name in platforms.names() for chk in REGISTRY.checks.values()
             for spec in chk.readings_for(Settings(platform=name)).values() if isinstance(spec, (File, Glob))}
    return sorted(specs, key=repr)


def read(specs: list, reader: str) -> dict:
    """path -> FileReading of every file ``specs`` name on this machine (globs expanded as the reader does)."""
    got, _ = frames(specs, READERS[reader], cap=OUTPUT_CAP_BYTES, timeout=10)
    readings = {}
    for index, spec in enumerate(specs):
        reading = _reading(spec, got.get(index, []), "no frame")
        readings.update(reading if isinstance(spec, Glob) else {spec.path: reading})
    return readings


def cat_error(path: str) -> str | None:
    """What ``cat`` says reading ``path`` fails with (None: it reads): an error the kernel gives every reader."""
    done = subprocess.run(["cat", "--", path], capture_output=True, timeout=10, check=False)
    return done.stderr.decode().strip().split(": ")[-1] if done.returncode else None


@pytest.mark.parametrize("reader", READERS)
def test_every_declared_kernel_file_that_exists_reads_without_error(reader):
    readings = read(declared(), reader)
    found = {path: r for path, r in readings.items() if r.exists}
    assert "/proc/sys/kernel/osrelease" in found and "/proc/sys/kernel/random/boot_id" in found
    assert {path: r.error for path, r in found.items() if r.error != cat_error(path)} == {}
    assert not [path for path, r in found.items() if r.truncated]


@pytest.mark.parametrize("reader", READERS)
def test_proc_sys_files_read_whole(reader):
    """§31.1: /proc/sys answers a read of 4 MiB or more with ENOMEM; these two are what every run reads."""
    readings = read([File("/proc/sys/kernel/random/boot_id"), File("/proc/sys/kernel/osrelease")], reader)
    assert BOOT_ID_SHAPE.fullmatch(readings["/proc/sys/kernel/random/boot_id"].text())
    assert readings["/proc/sys/kernel/osrelease"].text() == os.uname().release


@pytest.mark.parametrize("reader", READERS)
def test_the_kernel_files_the_rig_stands_in_for_read_from_the_kernel(reader):
    """The rig's stand-ins (a per-node boot id, the host's meminfo and cmdline) are read here from the real
    kernel, so a read the kernel refuses cannot hide behind them."""
    paths = ["/" + path for path in BIND_FILES + MI355X_BIND_FILES if path.startswith("proc/")]
    assert "/proc/sys/kernel/random/boot_id" in paths
    readings = read([File(path) for path in paths], reader)
    assert {path: (r.error, r.truncated, bool(r.content)) for path, r in readings.items()} == {
        path: (None, False, True) for path in paths}
