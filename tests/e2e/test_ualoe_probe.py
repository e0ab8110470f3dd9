"""ualoe-fabric end to end: the real CLI drives the fake ubench 07 tools over real SSH and TCP (issue 4)."""
import contextlib
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import psutil
import pytest

from tests.e2e import cli

pytestmark = pytest.mark.e2e

PROBE = "ualoe-fabric"


def probe(rig, *args, timeout=240):
    """(exit code, stdout, stderr) of the fabric probe alone on the rig."""
    return cli.k3("check", "--nodes", rig.inventory_path, "--only", PROBE, *args, timeout=timeout)


def k3json(rig, *args, timeout=240):
    rc, doc = cli.k3json("check", "--nodes", rig.inventory_path, "--only", PROBE, *args, timeout=timeout)
    return rc, [r for r in doc["results"] if r["check"] == PROBE]


def by_node(results):
    out = {}
    for r in results:
        out.setdefault(r["node"], []).append(r)
    return out


def pid_files(rig) -> list:
    """The probe's PID files in the rig's nodes' own $TMPDIR (this rig's, not the host's shared /tmp)."""
    return sorted(str(path) for node in rig.nodes for path in node.tmp.glob("k3doctor-ualoe.*.pid"))


@pytest.fixture(autouse=True)
def no_leftovers_for_the_next_test(rig):
    """What a failed test left (its own assertions said so) is cleared, not handed to the next test."""
    yield
    for pid in rig.pids_matching("ualoe_"):
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    for path in pid_files(rig):
        os.unlink(path)


def nothing_left(rig):
    """Every ubench process k3doctor started is gone, and so are the PID files it killed them by
    (sshd's own teardown would not remove those)."""
    deadline = time.monotonic() + 5
    while rig.pids_matching("ualoe_") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert rig.pids_matching("ualoe_p2p.exe") == []
    assert rig.pids_matching("ualoe_bw.exe") == []
    assert pid_files(rig) == []


def ssh(rig, node, command, timeout=30):
    return subprocess.run(["ssh", "-i", str(rig.identity_file), "-o", f"UserKnownHostsFile={rig.known_hosts}",
                           "-o", "BatchMode=yes", "-p", str(node.port), f"root@{node.host}", command],
                          capture_output=True, text=True, timeout=timeout)


def test_healthy_quick_ring_passes_every_pair_with_figures(rig):
    rig.apply("healthy")
    rc, results = k3json(rig)
    assert rc == 0, results
    assert {r["status"] for r in results} == {"PASS"}
    nodes = by_node(results)
    assert set(nodes) == {"ct13", "ct14", "ct16", "ct17"}
    assert all(len(rs) == 2 for rs in nodes.values())  # the ring puts every node in two pairs
    pairs = {r["evidence"]["pair"] for r in results}
    assert pairs == {"ct13<->ct14", "ct14<->ct16", "ct16<->ct17", "ct17<->ct13"}
    one = next(r for r in results if r["evidence"]["pair"] == "ct13<->ct14")
    gbps = one["evidence"]["gbps"]
    # the pair runs at its slower end: ct13 read 5772+91%25=5788, ct14 5772+98%25=5795 -> 5788
    assert gbps == {"read": 5788.0, "write": 6219.0 + 39 % 9, "bidir": min(10942.0 + 143 % 39, 10942.0 + 154 % 39)}
    assert "RESULT OK: 1/1 pairs PASS" in one["evidence"]["p2p"]
    assert one["evidence"]["peer_ip"] == rig.nodes[0].host
    nothing_left(rig)


def test_tcp_fallback_is_named_and_blamed_on_the_node_in_both_failing_pairs(rig):
    rig.apply("ualoe-tcp-fallback")  # ct16
    rc, results = k3json(rig)
    assert rc == 1
    bad = [r for r in results if r["status"] == "FAIL"]
    assert {r["node"] for r in bad} == {"ct16"}
    assert {r["evidence"]["pair"] for r in bad} == {"ct14<->ct16", "ct16<->ct17"}
    for r in bad:
        assert r["remediation"] == "UALOE-TCP-FALLBACK"
        assert "NCCL_MNNVL_ENABLE=1" in r["message"] and "fault is on ct16" in r["message"]
        assert r["evidence"]["gbps"]["bidir"] == 4.5
    assert {r["node"] for r in results if r["status"] == "PASS"} == {"ct13", "ct14", "ct17"}
    nothing_left(rig)


def test_p2p_failure_reads_the_importers_kernel_log_and_maps_accid(rig):
    rig.apply("ualoe-p2p-fail")  # ct14
    rc, results = k3json(rig)
    assert rc == 1
    bad = [r for r in results if r["status"] == "FAIL"]
    assert {r["node"] for r in bad} == {"ct14"}
    assert all(r["remediation"] == "UALOE-P2P" and r["gpu"] == 0 for r in bad)
    as_exporter = next(r for r in bad if r["evidence"]["pair"] == "ct14<->ct16")
    # ct16 imported from ct14: its kernel log names ct14's GPU 0 (card0 = accel_id 4*13+3 = 55)
    assert "hipMemSetAccess(...) -> invalid argument" in as_exporter["message"]
    assert "npa_rsp_timeout AccId:55 = ct14 GPU card0 (sysfs accel_id)" in as_exporter["message"]
    assert "packets are not crossing the wire" in as_exporter["message"]
    assert any("IMPORT: NPA-RSP timeout from remote AccId:55" in line
               for line in as_exporter["evidence"]["ct16_kernel_log"])
    assert "fault is on ct14" in as_exporter["message"]
    nothing_left(rig)


def test_p2p_hang_is_a_fail_within_the_deadline_and_leaves_nothing(rig):
    rig.apply("ualoe-p2p-hang")  # ct17
    started = time.monotonic()
    rc, results = k3json(rig, "--set", f"{PROBE}.p2p_timeout_s=4")
    assert rc == 1
    assert time.monotonic() - started < 60
    bad = [r for r in results if r["status"] == "FAIL"]
    assert {r["node"] for r in bad} == {"ct17"}
    assert all("timed out with no RESULT line" in r["message"] for r in bad)
    nothing_left(rig)


def test_degraded_pair_warns_against_the_same_day_best_pair(rig):
    rig.apply("ualoe-degraded")  # ct17 ~10% slow
    rc, results = k3json(rig)
    assert rc == 0
    warned = [r for r in results if r["status"] == "WARN"]
    assert {r["node"] for r in warned} == {"ct17"}
    assert all(r["remediation"] == "UALOE-SLOW" and "same-day best pair" in r["message"] for r in warned)


def until_running(rig, text, within_s=60):
    """The rig's PIDs running ``text``, as soon as there are any (a state, not a fixed sleep)."""
    deadline = time.monotonic() + within_s
    while not (pids := rig.pids_matching(text)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return pids


def test_stale_listener_is_reported_then_killed_by_pid_with_fix(rig):
    rig.apply("healthy")
    ct16 = rig.nodes[2]
    # A listener whose peer died: connect (as soon as it listens), then vanish before the handshake.
    start = ssh(rig, ct16, "setsid /root/ubench/build/ualoe_bw.exe listen -port=55560 >/dev/null 2>&1 "
                           "</dev/null & python3 -c \"import socket, time\n"
                           "for _ in range(600):\n"
                           f"    try: socket.create_connection(('{ct16.host}', 55560)).close(); break\n"
                           "    except OSError: time.sleep(0.1)\n"
                           "else: raise SystemExit('the listener never listened')\"; "
                           # a bystander whose command line mentions the tool but whose argv[0] is not it
                           "setsid python3 -c 'import time; time.sleep(600)' ualoe_bw.exe >/dev/null 2>&1 "
                           "</dev/null &", timeout=120)
    assert start.returncode == 0, start.stderr
    stale, bystander = until_running(rig, "ualoe_bw.exe listen"), until_running(rig, "time.sleep(600)")
    assert len(stale) == 1 and len(bystander) == 1
    try:
        rc, results = k3json(rig)
        assert rc == 1
        [report] = [r for r in results if r["node"] == "ct16" and r["status"] == "FAIL"]
        assert report["remediation"] == "UALOE-STALE"
        assert f"PID {stale[0]}" in report["message"]
        assert rig.pids_matching("ualoe_bw.exe listen") == stale  # reported, not touched
        rc, results = k3json(rig, "--fix")
        assert rc == 0, results
        [fixed] = [r for r in results if r["node"] == "ct16" and r["status"] == "WARN"]
        assert str(stale[0]) in fixed["message"]
        assert rig.pids_matching("ualoe_bw.exe listen") == []
        assert rig.pids_matching("time.sleep(600)") == bystander  # nothing else killed
        assert {r["status"] for r in results if r["evidence"].get("pair")} == {"PASS"}
    finally:
        ssh(rig, ct16, f"kill {' '.join(map(str, stale + bystander))} 2>/dev/null; true")
    nothing_left(rig)


def test_probe_appears_in_table_and_junit(rig):
    rig.apply("ualoe-tcp-fallback")
    rc, out, _ = probe(rig)
    assert rc == 1
    row = next(line.split() for line in out.splitlines() if line.startswith(PROBE))
    assert row == [PROBE, "PASS", "PASS", "FAIL", "PASS"]
    assert "FAIL  ualoe-fabric ct16 gpu0: ct14<->ct16:" in out
    rc, out, _ = probe(rig, "--format", "junit")
    cases = {c.get("name"): c for c in ET.fromstring(out).iter("testcase") if c.get("classname") == f"k3doctor.{PROBE}"}
    assert set(cases) == {"ct13 gpu0", "ct14 gpu0", "ct16 gpu0", "ct17 gpu0"}  # one testcase per node x GPU
    assert cases["ct16 gpu0"].find("failure") is not None and cases["ct13 gpu0"].find("failure") is None


def test_ctrl_c_mid_pair_kills_everything_the_probe_started(rig):
    import signal

    rig.apply("ualoe-p2p-hang")  # ct17's import never returns
    proc = subprocess.Popen([sys.executable, "-m", "k3doctor.cli", "check", "--nodes", str(rig.inventory_path),
                             "--only", PROBE, "--set", f"{PROBE}.p2p_timeout_s=300", "--format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not rig.pids_matching("ualoe_p2p.exe import") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert rig.pids_matching("ualoe_p2p.exe import"), "the hanging import never started"
        assert rig.pids_matching("ualoe_p2p.exe export")
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert time.monotonic() - started < 30
    finally:
        if proc.poll() is None:
            proc.kill()
    nothing_left(rig)


def test_a_recorded_known_good_pair_is_the_reference(rig, tmp_path):
    import yaml

    rig.apply("healthy")
    baseline = tmp_path / "baseline.yaml"
    # `baseline record --tier deep` also runs the all_reduce probe: 16 ranks importing torch on a 2-core
    # test box can take longer than the 45 s start default (measured 24-50 s under load)
    inventory = yaml.safe_load(rig.inventory_path.read_text())
    inventory["cluster"].setdefault("checks", {})["allreduce-probe"] = {"start_s": 150}
    relaxed = tmp_path / "inventory.yaml"
    relaxed.write_text(yaml.safe_dump(inventory))
    rc, _, err = cli.k3("baseline", "record", "--tier", "deep", "--nodes", relaxed, "-o", baseline, timeout=400)
    assert rc == 0, err

    recorded = yaml.safe_load(baseline.read_text())["nodes"]
    assert recorded["ct13"][PROBE]["gbps"]["bidir"] > 10_000
    rig.apply("ualoe-degraded")  # ct17 ~10% slow
    rc, results = k3json(rig, "--baseline", baseline)
    warned = [r for r in results if r["status"] == "WARN"]
    assert rc == 0 and {r["node"] for r in warned} == {"ct17"}
    assert all(r["evidence"]["reference"]["from"].startswith("baseline pair") for r in warned)
    nothing_left(rig)


def test_ubench_missing_is_inconclusive_not_a_fabric_fault(rig, tmp_path):
    import yaml

    rig.apply("healthy")
    inventory = yaml.safe_load(rig.inventory_path.read_text())
    inventory["cluster"]["tools"]["ubench_dir"] = "/nonexistent/ubench/build"
    moved = tmp_path / "inventory.yaml"
    moved.write_text(yaml.safe_dump(inventory, sort_keys=False))
    rc, doc = cli.k3json("check", "--nodes", moved, "--only", PROBE, timeout=240)
    results = [r for r in doc["results"] if r["check"] == PROBE]
    assert rc == 2, results  # INCONCLUSIVE, not DO NOT LAUNCH
    assert {r["status"] for r in results} == {"ERROR"}
    assert all(r["message"].startswith(f"{r['evidence']['pair']}: ubench not runnable on ")
               and "/nonexistent/ubench/build/ualoe_p2p.exe was not found (rc 127" in r["message"]
               and "tools.ubench_dir" in r["message"] and r["remediation"] is None for r in results)
    nothing_left(rig)
