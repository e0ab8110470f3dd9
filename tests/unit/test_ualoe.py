"""The pure half of the ualoe-fabric probe: plans, ubench output, process/socket tables, judgement."""
import subprocess
from pathlib import Path

import pytest

from k3doctor.views.gpu import locate_accid, parse_accel_ids
from k3doctor.parsers import ParseError, ubench
from k3doctor.parsers.ubench import Bandwidth
from k3doctor.probes import kit, ualoe_verdicts
from k3doctor.probes.ualoe_verdicts import PairOutcome, PlanError
from k3doctor.remote import ualoe_remote
from k3doctor.results import Status

NODES = ["ct13", "ct14", "ct16", "ct17"]


# --- plans ---------------------------------------------------------------------------------------

def test_quick_plan_is_a_ring_covering_every_node_twice():
    pairs = ualoe_verdicts.plan_pairs("quick", NODES)
    assert pairs == [("ct13", "ct14"), ("ct14", "ct16"), ("ct16", "ct17"), ("ct17", "ct13")]
    assert all(sum(n in p for p in pairs) == 2 for n in NODES)
    assert ualoe_verdicts.plan_pairs("quick", ["a", "b", "c"]) == [("a", "b"), ("b", "c"), ("c", "a")]
    assert ualoe_verdicts.plan_pairs("quick", ["a", "b"]) == [("a", "b")]
    assert ualoe_verdicts.plan_pairs("quick", ["a"]) == []


def test_all_and_explicit_plans():
    assert len(ualoe_verdicts.plan_pairs("all", NODES)) == 6
    assert ualoe_verdicts.plan_pairs(" ct13,ct16 ; ct14, ct17", NODES) == [("ct13", "ct16"), ("ct14", "ct17")]


@pytest.mark.parametrize("n, fewest", [(2, 1), (3, 3), (4, 3), (5, 5), (6, 5), (7, 7), (8, 7)])
def test_all_runs_every_pair_once_in_the_fewest_rounds(n, fewest):
    """--pairs all: n-1 rounds of disjoint pairs for even n, n for odd (6 nodes: 5, where planning its own
    order took 7), each pair once with the earlier inventory node as the exporter."""
    nodes = [f"n{i}" for i in range(n)]
    pairs = ualoe_verdicts.plan_pairs("all", nodes)
    assert sorted(pairs) == sorted((a, b) for i, a in enumerate(nodes) for b in nodes[i + 1:])
    assert len(kit.rounds(pairs)) == fewest


@pytest.mark.parametrize("plan, words", [("ct13,ct99", "unknown node(s) ct99"), ("ct13", "not two different"),
                                         ("ct13,ct13", "not two different"), ("everything", "not two different")])
def test_bad_plans_say_what_is_wrong(plan, words):
    with pytest.raises(PlanError, match=words.replace("(", r"\(").replace(")", r"\)")):
        ualoe_verdicts.plan_pairs(plan, NODES)


def test_schedule_never_runs_pairs_sharing_a_node_at_once():
    rounds = kit.rounds(ualoe_verdicts.plan_pairs("all", NODES))
    assert [len(r) for r in rounds] == [2, 2, 2]
    for rnd in rounds:
        nodes = [n for p in rnd for n in p]
        assert len(nodes) == len(set(nodes))
    assert kit.rounds(ualoe_verdicts.plan_pairs("quick", NODES)) == [
        [("ct13", "ct14"), ("ct16", "ct17")], [("ct14", "ct16"), ("ct17", "ct13")]]


# --- ubench output -------------------------------------------------------------------------------

def test_p2p_result_lines():
    ok = ubench.parse_p2p("[INFO] x\nRESULT OK: 1/1 pairs PASS\n")
    assert ok.ok and (ok.passed, ok.total) == (1, 1)
    assert ubench.parse_p2p("RESULT OK: 4/4 pairs PASS").ok  # aggregate mode (§27 item 4)
    assert not ubench.parse_p2p("RESULT FAIL: 3/4 pairs PASS").ok
    assert not ubench.parse_p2p("RESULT: 4/4 pairs FAILED").ok
    assert not ubench.parse_p2p("RESULT OK: 0/0 pairs PASS").ok
    assert ubench.parse_p2p("[FATAL] ualoe_p2p.cpp:49 hipMemSetAccess(...) -> invalid argument") is None


TABLE = """[INFO] ualoe_bw connect: peer 127.0.0.11:55560, 4 GPU pair(s), 1 GiB transfers
GPU pair       read (GB/s)   write (GB/s)   bidir (GB/s)
0 <-> 0            1446.88        1555.89        2743.26
1 <-> 1            1442.55        1553.25        2734.05
2 <-> 2            1444.72        1555.28        2739.53
3 <-> 3            1441.83        1552.83        2733.10
total              5776.00        6217.25       10949.94
"""


def test_bw_table_total_row():
    bw = ubench.parse_bw(TABLE)
    assert (bw.read, bw.write, bw.bidir, bw.rows) == (5776.0, 6217.25, 10949.94, 4)


def test_bw_table_without_total_sums_rows_and_follows_column_order():
    text = "pair  bidir  write  read\n0  2,740.0  1,550.0  1,440.0\n1  2,760.0  1,560.0  1,450.0\n"
    bw = ubench.parse_bw(text)
    assert (bw.read, bw.write, bw.bidir) == (2890.0, 3110.0, 5500.0)


def test_bw_key_value_summary_with_units():
    bw = ubench.parse_bw("read: 5.78 TB/s\nwrite: 6,219 GB/s\nbidirectional: 10961 GB/s\n")
    assert (bw.read, bw.write, bw.bidir) == (5780.0, 6219.0, 10961.0)


def test_bw_no_table_is_none_and_torn_table_is_a_parse_error():
    assert ubench.parse_bw("[INFO] ualoe_bw connect: peer 127.0.0.11:55560\n") is None
    assert ubench.parse_bw("") is None
    with pytest.raises(ParseError, match="no numeric rows"):
        ubench.parse_bw("GPU pair   read (GB/s)  write (GB/s)  bidir (GB/s)\n")
    with pytest.raises(ParseError, match="not bidir"):
        ubench.parse_bw("read: 10 GB/s\nwrite: 10 GB/s\n")


# --- process and socket tables -------------------------------------------------------------------

def procs(*lines, self_line="self 500 mnt:[1]"):
    return "\n".join([self_line, "anc 500", "anc 400", "anc 1", *lines]) + "\n"


def test_stale_tools_match_argv0_basename_exactly():
    sep = "\x1f"
    text = procs(
        f"proc 100 1 mnt:[1] /root/ubench/build/ualoe_bw.exe{sep}listen{sep}-port=55560",
        f"proc 101 1 mnt:[1] ./ualoe_p2p.exe{sep}export{sep}-port=55559",
        f"proc 102 1 mnt:[1] python3{sep}-c{sep}sleep{sep}ualoe_bw.exe",  # mentions it, is not it
        f"proc 103 1 mnt:[1] /tmp/not_ualoe_bw.exe{sep}listen",
        f"proc 104 1 mnt:[1] vim{sep}ualoe_p2p.exe",
        f"proc 400 1 mnt:[1] /root/ubench/build/ualoe_bw.exe{sep}listen",  # an ancestor: never ours to kill
        f"proc 105 1 mnt:[2] /root/ubench/build/ualoe_bw.exe{sep}listen",  # another node of the rig
    )
    stale = ualoe_verdicts.stale_tools(text)
    assert [(p.pid, p.tool) for p in stale] == [(100, "ualoe_bw.exe"), (101, "ualoe_p2p.exe")]
    assert stale[0].argv == ("/root/ubench/build/ualoe_bw.exe", "listen", "-port=55560")


def test_process_table_without_self_line_is_a_parse_error():
    with pytest.raises(ParseError, match="no 'self' line"):
        ualoe_verdicts.stale_tools("")
    with pytest.raises(ParseError, match="not understood"):
        ualoe_verdicts.stale_tools(procs("proc x y z"))


TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0B00007F:D918 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 424242 1 0
   1: 0C00007F:D918 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 515151 1 0
"""


def test_listening_needs_our_pid_to_own_the_listen_socket():
    ours = "alive 77\nlrwx------ 1 root root 64 Nov 29 3 -> socket:[424242]\n" + TCP
    assert ubench.listening(ours, 55576) is True
    assert ubench.listening(ours, 55560) is False  # wrong port
    other = "alive 77\nlrwx------ 1 root root 64 Nov 29 3 -> socket:[999]\n" + TCP
    assert ubench.listening(other, 55576) is False  # someone else (a stale listener) holds it
    assert ubench.listening(TCP, 55576) is None  # our process is gone


def test_accel_ids_and_accid_location():
    text = ("/sys/class/drm/card0/device/ualink/accel_id 51\n/sys/class/drm/card1/device/ualink/accel_id 50\n"
            "/sys/class/drm/card2/device/ualink/accel_id 4294967295\n")
    ids = parse_accel_ids(text)
    assert ids == {51: 0, 50: 1}
    assert locate_accid(50, {"ct13": ids}, 4) == ("ct13", 1, "sysfs accel_id")
    node, card, how = locate_accid(70, {"ct13": ids}, 4)
    assert (node, card) == (None, None) and "tray CT18, accelerator 2" in how


LOG = """[   29.570000] amdgpu 0000:01:00.0: UALINK: accelerator accel_id=55 is now ACTIVE
[  300.000000] amdgpu 0000:01:00.0: IMPORT: NPA-RSP timeout from remote AccId:51
[  303.500000] amdgpu 0000:01:00.0: LSDMA PIO error status bits 0x8000
"""


def test_fabric_findings_only_after_the_pre_run_marker():
    lines = LOG.splitlines()
    found = ualoe_verdicts.fabric_findings(LOG, lines[1])
    assert [f.signature for f in found] == ["lsdma_pio_error"]
    found = ualoe_verdicts.fabric_findings(LOG, lines[0])
    assert [(f.signature, f.accid) for f in found] == [("npa_rsp_timeout", 51), ("lsdma_pio_error", None)]
    assert ualoe_verdicts.fabric_findings(LOG, lines[-1]) == []
    assert len(ualoe_verdicts.fabric_findings(LOG, "a line that rotated out")) == 2
    with pytest.raises(ParseError):
        ualoe_verdicts.fabric_findings("dmesg: read kernel buffer failed: Operation not permitted\n", None)


# --- judgement -----------------------------------------------------------------------------------

FLOORS = {"read": 1500.0, "write": 1500.0, "bidir": 3000.0}
HEALTHY = Bandwidth(5780.0, 6222.0, 10961.0, 4)


def judge(bw, reference=None):
    return ualoe_verdicts.judge_bandwidth(bw, FLOORS, reference, "same-day best pair a<->b", 5.0, 50.0)


def test_bandwidth_judgement_classes():
    assert judge(HEALTHY)[:2] == (Status.PASS, "ok")
    status, kind, text = judge(Bandwidth(2.3, 2.4, 4.5, 4))
    assert (status, kind) == (Status.FAIL, "tcp") and "NCCL_MNNVL_ENABLE=1" in text
    status, kind, text = judge(Bandwidth(2029.0, 3192.0, 2900.0, 4))
    assert (status, kind) == (Status.FAIL, "floor") and "bidir 2,900.0 < 3,000" in text
    status, kind, text = judge(Bandwidth(5190.0, 6200.0, 9850.0, 4), HEALTHY.as_dict())
    assert (status, kind) == (Status.WARN, "reference")
    assert "read 10.2% below 5,780.0" in text and "write" not in text.split(":", 2)[-1]
    assert judge(Bandwidth(5760.0, 6200.0, 10900.0, 4), HEALTHY.as_dict())[0] == Status.PASS  # within 5%


def test_same_day_reference_is_the_best_pair_and_needs_two():
    slow = Bandwidth(5190.0, 5600.0, 9850.0, 4)
    assert ualoe_verdicts.same_day_reference({"a<->b": HEALTHY}) == (None, None)
    ref, label = ualoe_verdicts.same_day_reference({"a<->b": slow, "c<->d": HEALTHY})
    assert ref == HEALTHY.as_dict() and label == "same-day best pair c<->d"


def outcome(a, b, ok=True, **kw):
    return PairOutcome(a, b, Status.PASS if ok else Status.FAIL, "ok" if ok else "broken", gpu=0, **kw)


def test_a_node_failing_with_every_peer_carries_the_fault():
    outcomes = [outcome("ct13", "ct14"), outcome("ct14", "ct16", False), outcome("ct16", "ct17", False),
                outcome("ct17", "ct13")]
    verdicts = ualoe_verdicts.attribute(outcomes, {})
    bad = [v for v in verdicts if v.status == Status.FAIL]
    assert [(v.node, v.evidence["pair"]) for v in bad] == [("ct16", "ct14<->ct16"), ("ct16", "ct16<->ct17")]
    assert all("fault is on ct16" in v.message and "(ct14, ct17)" in v.message for v in bad)
    assert sorted(v.node for v in verdicts if v.status == Status.PASS) == ["ct13", "ct13", "ct14", "ct17"]


def test_one_failed_pair_between_good_nodes_points_at_the_path():
    outcomes = [outcome("ct13", "ct14"), outcome("ct14", "ct16", False), outcome("ct16", "ct17"),
                outcome("ct17", "ct13")]
    bad = [v for v in ualoe_verdicts.attribute(outcomes, {}) if v.status == Status.FAIL]
    assert [v.node for v in bad] == ["ct14", "ct16"]
    assert all("path between them" in v.message for v in bad)


def test_single_pair_cannot_be_pinned_and_kernel_log_names_the_gpu():
    o = outcome("a", "b", False, cards={"a": 3})
    bad = ualoe_verdicts.attribute([o], {"c": "not tested: ualink-state is FAIL"})
    assert [(v.status, v.node, v.gpu) for v in bad] == [
        (Status.SKIP, "c", None), (Status.FAIL, "a", 3), (Status.FAIL, "b", 0)]
    assert "cannot be pinned to one node" in bad[1].message


def test_kill_scripts_quote_pidfiles_and_check_argv0():
    script = ualoe_remote.kill_recorded(["k3doctor-ualoe.x.serve.ct 13.pid"])
    assert """"${TMPDIR:-/tmp}"/'k3doctor-ualoe.x.serve.ct 13.pid'""" in script
    assert 'case "${a0##*/}" in ualoe_p2p.exe|ualoe_bw.exe)' in script
    assert ualoe_remote.kill_pids([12, 34]).rstrip().endswith('for p in 12 34; do k "$p"; done; true')


def slow(a, b):
    return PairOutcome(a, b, Status.WARN, "read 10% below the reference", gpu=0, remediation="UALOE-SLOW")


def test_a_node_slow_with_every_peer_carries_the_slowness_not_a_fault():
    outcomes = [outcome("ct13", "ct14"), outcome("ct14", "ct16"), slow("ct16", "ct17"), slow("ct17", "ct13")]
    warned = [v for v in ualoe_verdicts.attribute(outcomes, {}) if v.status == Status.WARN]
    assert [(v.node, v.evidence["pair"]) for v in warned] == [("ct17", "ct16<->ct17"), ("ct17", "ct17<->ct13")]
    for v in warned:
        assert "slower than the reference with every peer it was paired with (ct13, ct16)" in v.message
        assert "the slowness is on ct17" in v.message
        assert "failed" not in v.message and "fault" not in v.message


def test_slow_pairs_do_not_make_a_node_fail_with_every_peer():
    # ct16 failed one pair and was only slow in the other: it did not fail with every peer
    outcomes = [outcome("ct13", "ct14"), outcome("ct14", "ct16", False), slow("ct16", "ct17"),
                outcome("ct17", "ct13")]
    verdicts = ualoe_verdicts.attribute(outcomes, {})
    assert not any("failed with every peer" in v.message for v in verdicts)
    failed = [v for v in verdicts if v.status == Status.FAIL]
    assert [v.node for v in failed] == ["ct14", "ct16"] and all("path between them" in v.message for v in failed)
    warned = [v for v in verdicts if v.status == Status.WARN]
    assert [v.node for v in warned] == ["ct16", "ct17"]
    assert all("slowness is on" not in v.message and "path" not in v.message for v in warned)


def test_pid_files_live_in_the_nodes_own_temp_directory(tmp_path):
    """A login's $TMPDIR (else /tmp) holds them, as gather's scratch directory: through a real sh, a name
    with a space and a quote written, read back and removed by the kill script there, nothing in /tmp."""
    name = "k3doctor-ualoe.x.serve.ct 13's.pid"
    word = ualoe_remote.pidfile_word(name)
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path)}
    subprocess.run(["sh", "-c", f"echo 4242 > {word}"], check=True, env=env)
    assert (tmp_path / name).read_text() == "4242\n" and not Path("/tmp", name).exists()
    subprocess.run(["sh", "-c", ualoe_remote.kill_recorded([name])], check=True, env=env, timeout=30)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("reference", [{"read": "fast"}, {"bidi": 10960.0}, {"read": True}, {"write": -1}])
def test_a_bad_reference_is_refused_when_the_inventory_is_read(reference):
    """reference_gbps is checked with the other parameters at load (exit 3), not when the probe starts."""
    import json

    from k3doctor.inventory.load import InventoryError, parse_inventory
    from k3doctor.registry import REGISTRY, load_checks

    load_checks()
    text = ("cluster: {checks: {ualoe-fabric: {reference_gbps: " + json.dumps(reference) + "}}}\n"
            "nodes:\n  - {name: a, host: 10.0.0.1}\n")
    with pytest.raises(InventoryError, match="reference_gbps: expected a mapping of read, write, bidir to GB/s"):
        parse_inventory(text, registry=REGISTRY)
    assert parse_inventory(text.replace(json.dumps(reference), '{"read": 5780, "bidir": 10960.5}'),
                           registry=REGISTRY).cluster.checks["ualoe-fabric"]["reference_gbps"]["read"] == 5780


def test_gpu_minus_one_selects_aggregate_mode_and_indices_are_whole_numbers():
    """§8 pitfall 1: ``gpu: -1`` (every GPU, aggregate mode) is a documented value, so the inventory takes it;
    a GPU index or port of 2.5 is refused when the inventory is read, not truncated by the run."""
    from k3doctor.registry import REGISTRY, load_checks

    load_checks()
    chk = REGISTRY.checks["ualoe-fabric"]
    assert chk.param_problem("gpu", -1) is None and chk.param_problem("gpu", 3) is None
    assert chk.param_problem("gpu", -2) == "a number in [-1, 64]"
    assert chk.param_problem("gpu", 2.5) == chk.param_problem("bw_port", 55560.5) == "a whole number"
