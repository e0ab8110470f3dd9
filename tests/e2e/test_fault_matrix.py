"""The fault matrix (issue 9): one fault on one node at a time, the real CLI over real SSH, real dockerd.

For every fault: that node gets an ERROR naming the cause, every other node finishes with nothing
wrong, the run ends within its node deadline + 10 s, exit 2 (INCONCLUSIVE), and nothing k3doctor
started is left on any node afterwards: no process (everything in a node's namespace but its sshd)
and no scratch directory in the node's $TMPDIR. The slow and stopped Docker engines are real unix
sockets bind-mounted over one node's /run/docker.sock; the sudo case is a real non-root login whose
sudo wants a password. The rack is this module's own: faults here kill sshd sessions and replace
engines, which must not disturb the session's shared rack.
"""
import json
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from k3rig import Rig, missing_requirements

from tests.e2e.faults import (
    clear_leftovers,
    engine_replaced,
    kill_sessions,
    leftover_tmp,
    node_processes,
    sudo_user_wanting_password,
)

pytestmark = pytest.mark.e2e

TIMEOUT_S = 5  # --timeout: per remote command
DEADLINE_S = 15  # --node-deadline: all of one node's reads (a healthy node needs a few seconds)
MARGIN_S = 10  # the run ends within the node deadline + this
CLEAN_WITHIN_S = 5  # what k3doctor stopped on a node may take this long to be reaped
TIMINGS = []  # (case, node, seconds to verdict, run duration) for the module's summary


@pytest.fixture(scope="module")
def rack():
    missing = missing_requirements()
    if missing:
        pytest.skip("simulated rack needs " + "; ".join(missing))
    workdir = Path(tempfile.mkdtemp(prefix="k3fm-", dir="/tmp"))
    workdir.chmod(0o711)  # the sudo case's non-root login must reach the rig's authorized_keys
    with Rig(workdir) as rig:
        yield rig
    if TIMINGS:
        print("\nfault matrix: case | node | s to verdict (CLI wall) | run duration_s")
        for row in TIMINGS:
            print(" | ".join(map(str, row)))


@pytest.fixture(autouse=True)
def healthy(rack):
    """Each test starts on a healthy, idle rack: what a failed one left there (its own assertions said so)
    is cleared, not handed to the next test."""
    yield
    if rack.scenario != "healthy":
        rack.apply("healthy")
    clear_leftovers(rack)


def inventory(rack, tmp_path, edit=None) -> Path:
    if edit is None:
        return rack.inventory_path
    inv = yaml.safe_load(rack.inventory_path.read_text())
    edit(inv)
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inv))
    return path


def node_entry(inv, name):
    return next(n for n in inv["nodes"] if n["name"] == name)


def check(rack, tmp_path, edit=None, *extra, during=None):
    """(exit code, report, seconds from start to verdict) of one fast-tier run."""
    argv = [sys.executable, "-m", "k3doctor.cli", "check", "--nodes", str(inventory(rack, tmp_path, edit)),
            "--timeout", str(TIMEOUT_S), "--node-deadline", str(DEADLINE_S), "--format", "json", *extra]
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if during:
            during(proc)
        out, err = proc.communicate(timeout=DEADLINE_S + 120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    took = time.monotonic() - started
    assert out, f"no report (rc {proc.returncode}): {err[-2000:]}"
    return proc.returncode, json.loads(out), took


def assert_contained(rack, case, rc, doc, took, node, cause, clean_by=None):
    """The matrix's assertions for a fault on ``node``; ``cause`` is a regex its ERROR must match."""
    mine = [r for r in doc["results"] if r["node"] == node]
    errors = [r["message"] for r in mine if r["status"] == "ERROR"]
    assert errors and any(re.search(cause, m) for m in errors), (case, errors or mine)
    assert not [r for r in mine if r["status"] == "FAIL"], mine  # a fault to read is no fault found
    for other in (n.name for n in rack.nodes if n.name != node):
        theirs = [r for r in doc["results"] if r["node"] == other]
        # finished, nothing wrong (a WARN is allowed: this module's churn can fill an engine's event buffer)
        assert theirs and all(r["status"] in ("PASS", "WARN", "SKIP") for r in theirs), (other, theirs)
    assert rc == 2 and doc["verdict"] == "INCONCLUSIVE", (rc, doc["verdict"])
    assert doc["duration_s"] <= DEADLINE_S + MARGIN_S, doc["duration_s"]
    deadline = time.monotonic() + (clean_by if clean_by is not None else CLEAN_WITHIN_S)
    while (node_processes(rack) or leftover_tmp(rack)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert node_processes(rack) == [], "k3doctor's processes left on the nodes"
    assert leftover_tmp(rack) == {}, "k3doctor's scratch directories left on the nodes"
    TIMINGS.append((case, node, round(took, 1), doc["duration_s"]))


def wait_for(predicate, within_s=60.0, what="condition"):
    end = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_healthy_rack_is_ready_within_these_deadlines_and_leaves_nothing(rack, tmp_path):
    rc, doc, _ = check(rack, tmp_path)
    assert rc == 0 and [r for r in doc["results"] if r["status"] != "PASS"] == []
    assert node_processes(rack) == [] and leftover_tmp(rack) == {}


def test_unreachable_node(rack, tmp_path):
    rc, doc, took = check(rack, tmp_path, lambda inv: inv["nodes"].append(
        {"name": "ct99", "host": rack.unreachable_host}))
    assert_contained(rack, "unreachable node", rc, doc, took, "ct99", "connection refused by")


def test_refused_key(rack, tmp_path):
    other = tmp_path / "not_authorized"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other], check=True)
    rc, doc, took = check(rack, tmp_path, lambda inv: node_entry(inv, "ct14").update(identity_file=str(other)))
    assert_contained(rack, "refused key", rc, doc, took, "ct14", "authentication refused for root@")


def test_changed_host_key(rack, tmp_path):
    other = tmp_path / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other], check=True)
    fake = other.with_suffix(".pub").read_text().split()[:2]
    victim = f"[{rack.nodes[2].host}]"  # ct16
    lines = [" ".join([ln.split()[0], *fake]) if ln.startswith(victim) else ln
             for ln in rack.known_hosts.read_text().splitlines()]
    known = tmp_path / "known_hosts"
    known.write_text("\n".join(lines) + "\n")
    rc, doc, took = check(rack, tmp_path, lambda inv: inv["ssh"].update(known_hosts=str(known)))
    assert_contained(rack, "changed host key", rc, doc, took, "ct16", "does NOT match known_hosts")


def test_hung_command(rack, tmp_path):
    rack.apply("amd-smi-hang")  # ct16: every amd-smi call sleeps an hour
    rc, doc, took = check(rack, tmp_path)
    assert_contained(rack, "hung command", rc, doc, took, "ct16", "timed out and was killed|node deadline")


def test_term_ignoring_child_dies_at_the_node_deadline(rack, tmp_path):
    rack.apply("fault-term-ignored")  # ct14: amd-smi and its child ignore TERM
    # the command timeout is past the node deadline: the node deadline must stop the reading's group
    rc, doc, took = check(rack, tmp_path, None, "--timeout", "600")
    assert_contained(rack, "TERM-ignoring child", rc, doc, took, "ct14", f"node deadline of {DEADLINE_S}s reached")


def test_sshd_killed_mid_run(rack, tmp_path):
    rack.apply("amd-smi-hang")  # ct16: the gather is in flight when its sshd dies
    ct16 = rack.nodes[2]
    seen = {}

    def kill_when_reading(proc):
        wait_for(lambda: rack.pids_matching("k3rig-hang.amd-smi"), what="the hung read on ct16")
        seen["at"] = time.monotonic()  # the node's gather (and its node-side deadline) started before this
        assert kill_sessions(rack, ct16)

    rc, doc, took = check(rack, tmp_path, None, "--timeout", "600", during=kill_when_reading)
    # nobody is left to stop what runs there: its node-side deadline does (the node deadline + kill grace)
    clean_by = max(CLEAN_WITHIN_S, DEADLINE_S + 2 + CLEAN_WITHIN_S - (time.monotonic() - seen["at"]))
    assert_contained(rack, "sshd killed mid-run", rc, doc, took, "ct16", "SSH connection to ct16 lost",
                     clean_by=clean_by)


@pytest.mark.parametrize("mode, node, cause", [
    # streamlocal refused (nothing listens on the socket), then the fallback names the node's own cause
    ("stopped", 0, "sshd refused a channel to /var/run/docker.sock .*; then docker system dial-stdio said: "
                   ".*connect: connection refused"),
    ("silent", 1, f"did not answer within the node deadline of {DEADLINE_S}s"),
    ("trickle", 3, f"did not answer within the node deadline of {DEADLINE_S}s"),
])
def test_docker_engine_stopped_or_slow(rack, tmp_path, mode, node, cause):
    victim = rack.nodes[node]
    with engine_replaced(victim, mode):
        rc, doc, took = check(rack, tmp_path)
    case = {"stopped": "dockerd stopped", "silent": "Docker engine never answers",
            "trickle": "Docker engine trickles a byte every 2 s"}[mode]
    assert_contained(rack, case, rc, doc, took, victim.name, cause)
    [rack_free] = [r for r in doc["results"] if r["check"] == "rack-free" and r["node"] == victim.name]
    assert rack_free["status"] == "ERROR" and re.search(cause, rack_free["message"])
    # the Docker root is an engine fact: unreadable with the engine's own words, as when the CLI asked
    [root] = [r for r in doc["results"] if r["check"] == "host-resources" and r["node"] == victim.name
              and r["status"] == "ERROR"]
    assert root["message"].startswith("Docker root free space not readable: ") and re.search(cause, root["message"])


def test_sudo_wanting_a_password(rack, tmp_path):
    ct17 = rack.nodes[3]
    with sudo_user_wanting_password(ct17) as user:
        rc, doc, took = check(rack, tmp_path, lambda inv: node_entry(inv, "ct17").update(user=user, sudo=True))
    assert_contained(rack, "sudo wants a password", rc, doc, took, "ct17", "sudo on ct17 wants a password")


def test_huge_output(rack, tmp_path):
    rack.apply("fault-huge-output")  # ct17: rocm-smi prints 200 MB
    rc, doc, took = check(rack, tmp_path)
    assert_contained(rack, "huge output (200 MB)", rc, doc, took, "ct17", "printed more than the 4 MiB output cap")


def test_binary_output(rack, tmp_path):
    rack.apply("amd-smi-garbage")  # ct14: NUL, escape codes and torn UTF-8 after a few bytes
    rc, doc, took = check(rack, tmp_path)
    assert_contained(rack, "binary output", rc, doc, took, "ct14", "unparseable output|malformed or truncated")


@pytest.mark.parametrize("stop, code, said", [(signal.SIGINT, 130, "aborted"),
                                              (signal.SIGTERM, 143, "terminated (SIGTERM)"),
                                              (signal.SIGHUP, 129, "terminated (SIGHUP)")],
                         ids=["ctrl-c", "sigterm", "sighup"])
def test_ctrl_c_with_reads_in_flight_returns_at_once_and_cleans_up(rack, tmp_path, stop, code, said):
    """Ctrl-C, SIGTERM (a CI job's timeout) and SIGHUP (a dropped SSH session) stop the reads in flight on
    every node at once."""
    rack.apply("amd-smi-hang")  # ct16: a hung read in the shell gather
    with engine_replaced(rack.nodes[1], "silent") as engine:  # ct14: a Docker API read that never returns

        def interrupt(proc):
            wait_for(lambda: rack.pids_matching("k3rig-hang.amd-smi") and engine.connections,
                     what="both reads in flight")
            started = time.monotonic()
            proc.send_signal(stop)
            proc.wait(60)
            interrupt.took = time.monotonic() - started

        argv = [sys.executable, "-m", "k3doctor.cli", "check", "--nodes", str(rack.inventory_path),
                "--timeout", "300", "--node-deadline", "300", "--format", "json"]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            interrupt(proc)
            _, err = proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == code and f"k3doctor: {said}" in err, err[-2000:]
    assert interrupt.took < 15, interrupt.took  # before: ~34 s; the reads' own deadlines are 300 s away
    wait_for(lambda: not node_processes(rack), within_s=CLEAN_WITHIN_S, what="the nodes to be clean")
    assert leftover_tmp(rack) == {}
    TIMINGS.append((f"{said} with reads in flight", "ct14+ct16", round(interrupt.took, 1), "-"))


def test_a_frozen_client_leaves_nothing_past_the_node_deadline(rack):
    """Nobody on this side cleans up for a k3doctor that is frozen (SIGSTOP; its connections stay open):
    the node-side deadline of the shell gather must end everything (the Docker API channel goes straight
    to the engine socket through sshd: it started no process on the node)."""
    rack.apply("amd-smi-hang")  # ct16: the shell gather hangs
    deadline_s = 8
    with engine_replaced(rack.nodes[1], "silent") as engine:  # ct14: the Docker API channel hangs
        argv = [sys.executable, "-m", "k3doctor.cli", "check", "--nodes", str(rack.inventory_path),
                "--timeout", "600", "--node-deadline", str(deadline_s), "--format", "json"]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: rack.pids_matching("k3rig-hang.amd-smi") and engine.connections,
                     what="both reads in flight")
            proc.send_signal(signal.SIGSTOP)
            seen = time.monotonic()  # the node-side deadline was set before this, and ends by + deadline_s
            assert rack.pids_matching("k3rig-hang.amd-smi")
            end = seen + deadline_s + 2 + CLEAN_WITHIN_S  # + the node-side KILL grace
            while (node_processes(rack) or leftover_tmp(rack)) and time.monotonic() < end:
                time.sleep(0.2)
            left, scratch = node_processes(rack), leftover_tmp(rack)
        finally:
            proc.kill()
            proc.wait()
    assert left == [] and scratch == {}
