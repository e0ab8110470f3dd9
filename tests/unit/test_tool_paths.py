"""ROCm tools found where the inventory says, else on the node's PATH (reference §29: TheRock's pip ROCm has no
/opt/rocm; its amd-smi/rocm-smi live in a venv's bin). The wrapper runs for real in a local shell."""
import os
import subprocess
import sys

import pytest
from k3doctor.checks import fabric

from k3doctor.gather.node_script import _reader_words, build_script, parse_frames
from k3doctor.inventory.types import DEFAULT_TOOLS, Settings
from k3doctor.readings import Command, InContainer, tool
from k3doctor.registry import REGISTRY, load_checks
from k3doctor.transport.local import LocalTransport

load_checks()  # every built-in check registered, whichever test module ran first

FAKE = "#!/bin/sh\necho \"$0 $*\"\n"


def run(argv, path):
    return subprocess.run(argv, capture_output=True, text=True, timeout=10, env={**os.environ, "PATH": path})


def fake(directory, name="amd-smi"):
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / name
    exe.write_text(FAKE)
    exe.chmod(0o755)
    return exe


def test_the_configured_path_wins(tmp_path):
    configured, venv = fake(tmp_path / "opt/rocm/bin"), fake(tmp_path / "venv/bin")
    done = run(tool(str(configured), "static", "--vram", "--json").argv, f"{venv.parent}:/usr/bin:/bin")
    assert (done.returncode, done.stdout) == (0, f"{configured} static --vram --json\n")


def test_a_tool_missing_at_its_path_is_found_on_the_node_path(tmp_path):
    venv = fake(tmp_path / "venv/bin")  # ROCm from a pip wheel: no /opt/rocm
    done = run(tool("/opt/rocm-nowhere/bin/amd-smi", "fabric", "--json").argv, f"{venv.parent}:/usr/bin:/bin")
    assert (done.returncode, done.stdout) == (0, f"{venv} fabric --json\n")
    done = run(["sh", "-c", fabric.FABRIC_SCRIPT, "k3doctor-tool", "/opt/rocm-nowhere/bin/amd-smi"],
               f"{venv.parent}:/usr/bin:/bin")
    assert (done.returncode, done.stdout) == (0, f"{venv} fabric --json\n")


def test_a_tool_nowhere_exits_127_saying_where_it_looked(tmp_path):
    done = run(tool("/opt/rocm-nowhere/bin/rocm-smi", "--showpids").argv, "/usr/bin:/bin")
    assert done.returncode == 127 and done.stdout == ""
    assert done.stderr == ("k3doctor: rocm-smi is neither at /opt/rocm-nowhere/bin/rocm-smi nor on PATH "
                           "(/usr/bin:/bin)\n")


def test_every_rocm_tool_reading_goes_through_the_lookup():
    specs = {**REGISTRY.checks["rack-free"].readings_for(Settings()),
             **REGISTRY.checks["gpu-inventory"].readings_for(Settings())}
    reads = [specs["pids"], specs["memuse"], specs["smi"]]
    assert all(r.argv[:4] == tool("x").argv[:4] for r in reads)
    assert [r.argv[4:] for r in reads] == [("/opt/rocm/bin/rocm-smi", "--showpids"),
                                           ("/opt/rocm/bin/rocm-smi", "--showmemuse"),
                                           ("/opt/rocm/bin/amd-smi", "static", "--asic", "--bus", "--vram", "--json")]


def test_a_tool_the_inventory_puts_in_the_container_runs_there():
    """`tools: {amd_smi: "container:amd-smi"}`: the image's own PATH finds it (a pip-wheel ROCm in the image)."""
    reading = tool("container:amd-smi", "static", "--vram", "--json", container="k3ep16")
    assert isinstance(reading, InContainer) and reading.container == "k3ep16"
    assert reading.inner[:2] == ("sh", "-c") and reading.inner[3:] == ("k3doctor-tool", "amd-smi", "static", "--vram",
                                                                         "--json")
    specs = REGISTRY.checks["fabric-domain"].readings_for(Settings(tools={"amd_smi": "container:amd-smi"}))
    assert isinstance(specs["fabric"], InContainer) and specs["fabric"].inner[2] == fabric.FABRIC_SCRIPT
    with pytest.raises(ValueError, match="no container is configured"):
        tool("container:amd-smi", "fabric")


def test_rack_free_asks_who_read_the_process_list_where_rocm_smi_ran():
    """§29: an empty list read as non-root or in another PID namespace is no proof the GPUs are free - and
    with `rocm_smi: container:...` the list is read in our container, so its uid and namespace are asked there."""
    host = REGISTRY.checks["rack-free"].readings_for(Settings())
    assert (host["uid"].argv, host["pidns"].argv) == (("id", "-u"), ("readlink", "/proc/self/ns/pid"))
    inside = REGISTRY.checks["rack-free"].readings_for(
        Settings(tools={**DEFAULT_TOOLS, "rocm_smi": "container:rocm-smi"}))
    assert isinstance(inside["pids"], InContainer) and isinstance(inside["uid"], InContainer)
    assert (inside["uid"].container, inside["uid"].inner) == ("k3ep16", ("id", "-u"))
    assert (inside["pidns"].container, inside["pidns"].inner) == ("k3ep16", ("readlink", "/proc/self/ns/pid"))


@pytest.mark.parametrize("where", ["configured", "on PATH", "nowhere", "not executable first", "undecodable PATH",
                                   "PATH unset"])
def test_the_node_reader_finds_a_tool_as_the_shell_does(tmp_path, monkeypatch, where):
    """The reader takes a tool() reading itself (a ``T`` record: no ``sh`` per GPU tool call); what it gives
    is what the wrapper gives in a shell (dash, Debian's sh): the same program, arguments, output, exit and
    message - also past a file of the tool's name that is not executable (``command -v`` passes over it) and
    with a PATH that is not UTF-8 (the message's bytes as they are, the reader's other readings still framed)."""
    configured, venv, plain = tmp_path / "opt/rocm/bin/amd-smi", tmp_path / "venv/bin/amd-smi", tmp_path / "a"
    if where == "configured":
        fake(configured.parent)
    if where in ("on PATH", "not executable first"):
        fake(venv.parent)
    if where == "not executable first":
        fake(plain).chmod(0o644)
    path = {"not executable first": f"{plain}:{venv.parent}:/usr/bin:/bin".encode(),
            "undecodable PATH": f"{tmp_path}/".encode() + b"\xff:/usr/bin:/bin"}.get(
                where, f"{venv.parent}:/usr/bin:/bin".encode())
    spec = tool(str(configured), "static", "--json")
    assert _reader_words(0, Command(spec.argv, 30.0))[:6] == ["0", "T", "30", "3", str(configured), "static"]
    if where == "PATH unset":  # dash searches its default path then, and its message says which
        monkeypatch.delitem(os.environb, b"PATH")
    else:
        monkeypatch.setitem(os.environb, b"PATH", path)
    script = build_script([spec, Command(("echo", "after"))], "n0nce", 30, 1 << 20, python=sys.executable)
    got = LocalTransport("here").run_bytes("sh -s", timeout_s=30, stdin=script.encode())
    frames = parse_frames(got.stdout, "n0nce")
    [(rc, _, out, err, _)] = frames[0]
    shell = subprocess.run(["sh", "-c", 'exec "$@"', "sh", *spec.argv], capture_output=True, timeout=10,
                           env=dict(os.environb))
    assert (int(rc), out, err) == (shell.returncode, shell.stdout.decode("utf-8", "replace"),
                                   shell.stderr.decode("utf-8", "replace"))
    assert int(rc) == (127 if where in ("nowhere", "undecodable PATH", "PATH unset") else 0)
    assert frames[1][0][2] == "after\n"
