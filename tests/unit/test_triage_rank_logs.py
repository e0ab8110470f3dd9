"""Triage judgement on ATOM log lines written from the reference's literal strings (§2, §10, §17, §19–§25)."""
import pytest
from k3rig import server_log as L

from k3doctor.parsers import ParseError, atom_log
from k3doctor.parsers.atom_log import rank_marker
from k3doctor.results import Status
from k3doctor.rules.triage import SHAPES
from k3doctor.rules.triage_signals import stage_of
from k3doctor.triage import group_lines, most_likely, triage_results
from k3doctor.triage.rank_logs import Layout
from tests.corpus import load

NODES = ("ct13", "ct14", "ct16", "ct17")


def parse_log(text, **kw):
    """The log read for triage's line shapes, as triage reads it."""
    return atom_log.parse_log(text, SHAPES, **kw)


def run(logs: dict, stepping="B0", now=None):
    parsed = [ln for text in logs.values() for ln in parse_log("\n".join(text))]
    return triage_results(parsed, Layout(NODES, stepping=stepping), now=now, problems={})


def findings(results):
    return {(r.check, r.node, r.gpu, r.remediation) for r in results if r.status in (Status.FAIL, Status.WARN)}


@pytest.mark.parametrize("line,rank", [("(EngineCore_DP7 pid=1) x", 7), ("Engine 011: prompt throughput", 11),
                                       ("ATOM::DP3TP0 started", 3), ("[rank12]: Watchdog", 12),
                                       ("no marker here", None), ("num_DP4x", None)])
def test_rank_markers(line, rank):
    assert rank_marker(line) == rank


def test_a_healthy_start_on_16_ranks_gives_no_finding():
    results = run(L.node_logs())
    assert findings(results) == set()
    assert [r.status for r in results] == [Status.PASS] and "16 rank(s)" in results[0].message


def test_a0_healthy_start_with_translations_is_quiet():
    assert findings(run(L.node_logs(stepping="A0"), stepping="A0")) == set()


def test_missing_participant_is_the_rank_that_did_not_time_out():
    results = run(L.node_logs(extra=L.missing_participant(stalled=11)))
    assert findings(results) == {("triage-collective", "ct16", 3, "TRIAGE-MISSING-PARTICIPANT")}
    top = most_likely(results)
    assert top.evidence["rank"] == 11 and top.evidence["kv_usage_pct"] == 98.6
    assert "KV usage: 98.6%" in top.message


def test_a_rank_stopped_at_load_rccl_version_while_the_others_moved_on():
    results = run(L.node_logs(ranks={6: {"stop_at": "rccl"}}))
    assert findings(results) == {("triage-collective", "ct14", 2, "TRIAGE-RCCL-INIT-HANG")}
    assert "moved on" in most_likely(results).message and "deep tier" in most_likely(results).message


def test_kv_budget_failure_from_another_job_names_the_collision():
    logs = L.node_logs(ranks={9: {"stop_at": "load"}}, extra={9: L.KV_COLLISION})
    assert findings(run(logs)) == {("triage-kv", "ct16", 1, "TRIAGE-KV-COLLISION")}


def test_negative_available_for_kv():
    assert findings(run(L.node_logs(ranks={2: {"kv": "-4.67"}}))) == {("triage-kv", "ct13", 2, "TRIAGE-KV-NEGATIVE")}


def test_local_expert_count_and_896_only_as_global():
    assert findings(run(L.node_logs(ranks={5: {"experts": 112}}))) == {
        ("triage-config", "ct14", 1, "TRIAGE-EXPERTS")}


def test_max_model_len_set():
    assert ("triage-config", "ct13", 0, "TRIAGE-MAX-MODEL-LEN") in findings(
        run(L.node_logs(ranks={0: {"max_model_len": "16384"}})))


def test_profiler_dir_none_only_matters_when_profiling_was_asked():
    asked = L.node_logs(extra={0: ["INFO: POST /start_profile HTTP/1.1 200 OK"]})
    assert findings(run(asked)) == {("triage-config", "ct13", 0, "TRIAGE-PROFILER-DIR")}
    assert findings(run(L.node_logs(ranks={0: {"profiler_dir": "'/data/prof'"}},
                                    extra={0: ["INFO: POST /start_profile"]}))) == set()


def test_a0_ranks_without_translation_lines_and_b0_ranks_with_them():
    assert findings(run(L.node_logs(stepping="B0"), stepping="A0")) == {
        ("triage-config", n, g, "TRIAGE-NOT-TRANSLATING") for n in NODES for g in range(4)}
    warned = run(L.node_logs(stepping="A0"), stepping="B0")
    assert {(r.status, r.remediation) for r in warned if r.status != Status.PASS} == {
        (Status.WARN, "TRIAGE-B0-TRANSLATING")}


def test_triton_code_object_failure():
    assert findings(run(L.node_logs(extra={13: L.TRITON}))) == {
        ("triage-fatal", "ct17", 1, "TRIAGE-TRITON-CODE-OBJECT")}


def test_drafter_download_stall_by_time():
    logs = L.node_logs(ranks={r: {"stop_at": "ep"} for r in range(16)}, extra={r: L.DRAFTER for r in range(16)})
    text = {n: L.stamped(lines) for n, lines in logs.items()}
    parsed = [ln for t in text.values() for ln in parse_log(t)]
    last = max(ln.ts for ln in parsed)
    results = triage_results(parsed, Layout(NODES), now=last + 600, problems={})
    assert {r.remediation for r in results if r.status == Status.FAIL} == {"TRIAGE-DRAFTER-DOWNLOAD"}
    assert triage_results(parsed, Layout(NODES), now=last + 5, problems={})[0].status == Status.PASS


def test_a_stalled_start_is_named_but_a_quiet_serving_cluster_is_not():
    stuck = {n: L.stamped(lines) for n, lines in L.node_logs(ranks={r: {"stop_at": "moe"} for r in range(16)}).items()}
    parsed = [ln for t in stuck.values() for ln in parse_log(t)]
    late = max(ln.ts for ln in parsed) + 3600
    results = triage_results(parsed, Layout(NODES), now=late, problems={})
    assert {r.remediation for r in results if r.status == Status.FAIL} == {"TRIAGE-STALLED"}
    up = [ln for t in L.node_logs().values() for ln in parse_log(L.stamped(t))]
    assert triage_results(up, Layout(NODES), now=late, problems={})[0].status == Status.PASS


def test_tqdm_carriage_returns_are_progress_lines():
    lines = parse_log("(EngineCore_DP0 pid=1) Loading 10%\r(EngineCore_DP0 pid=1) Loading 20%\rload RCCL version 2")
    assert [ln.text[-3:] for ln in lines] == ["10%", "20%", "n 2"]


def test_docker_timestamps_are_read_and_stripped():
    (ln,) = parse_log("2026-12-01T10:00:01.500000000Z (EngineCore_DP3 pid=1) load RCCL version 2.27")
    assert ln.rank == 3 and ln.has("rccl_load") and ln.ts == pytest.approx(1796119201.5)
    assert ln.text.startswith("(EngineCore_DP3")


def test_stage_order():
    assert stage_of(parse_log("\n".join(L.rank_lines(0, stop_at="ep")))) == "ep-transport"
    assert stage_of(parse_log("\n".join(L.rank_lines(0)))) == "serving"


def test_no_rank_marker_anywhere_is_an_error_not_a_healthy_log():
    results = triage_results(parse_log("just some text\nand more"), Layout(NODES), now=None, problems={})
    assert [r.status for r in results] == [Status.ERROR]


def test_binary_is_a_parse_error():
    with pytest.raises(ParseError):
        parse_log("\x00\x01\x02")


def test_a_40kb_line_is_cheap():
    import time
    started = time.process_time()
    parse_log("(EngineCore_DP1 pid=1) " + "experts=" * 5000 + "x" * 40000)
    assert time.process_time() - started < 1.0


def test_group_lines_orders_by_time():
    text = "2026-12-01T10:00:02Z DP1 b load RCCL version\n2026-12-01T10:00:01Z DP1 a load RCCL version"
    assert [ln.text for ln in group_lines(parse_log(text))[0][1]] == ["DP1 a load RCCL version",
                                                                    "DP1 b load RCCL version"]


def test_group_lines_keeps_a_small_state_per_rank_whatever_the_log_length():
    text = "".join(f"2026-12-01T{10 + i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z DP0 outcome=translated step {i}\n"
                   for i in range(5000)) + "2026-12-01T11:30:00Z DP0 plain last line\n" + "DP0\n" * 20000
    lines = group_lines(iter(parse_log(text)))[0][0]
    assert len(lines) <= 65 and lines.counts["translated"] == 5000
    assert lines[-1].text == "DP0" and lines[0].text.endswith("step 0")
    assert [ln.text for ln in lines if ln.has("translated")][-1].endswith("step 4999")


def test_budget_total_against_the_declared_board():
    logs = L.node_logs()
    parsed = [ln for text in logs.values() for ln in parse_log("\n".join(text))]
    assert findings(triage_results(parsed, Layout(NODES, board_gib=432), now=None, problems={})) == set()
    warned = triage_results(parsed, Layout(NODES, board_gib=288), now=None, problems={})
    assert len([r for r in warned if r.status == Status.WARN and r.check == "triage-kv"]) == 16


def test_each_rank_is_aged_against_its_own_nodes_clock():
    from datetime import timedelta
    logs = L.node_logs(ranks={r: {"stop_at": "moe"} for r in range(16)})  # a cold start, 60 s after its last line
    ahead = timedelta(minutes=30)  # ct17's clock, and so its log's stamps, run 30 min ahead
    parsed = [ln for i, lines in logs.items() for ln in parse_log(L.stamped(lines, L.T0 + ahead * (i == 3)))]
    last = max(ln.ts for ln in parsed if ln.rank < 12)
    clocks = {n: last + 60 for n in NODES} | {"ct17": last + 60 + ahead.total_seconds()}
    assert not [r for r in triage_results(parsed, Layout(NODES), now=clocks, problems={}) if r.status == Status.FAIL]
    stalled = triage_results(parsed, Layout(NODES), now={n: c + 3600 for n, c in clocks.items()}, problems={})
    assert {r.node for r in stalled if r.status == Status.FAIL} == set(NODES)


def test_one_far_future_stamp_is_that_sources_error_not_everyone_elses_stall():
    from k3doctor.triage import judge_all
    texts = {NODES[i]: L.stamped(lines) for i, lines in L.node_logs().items()}
    texts["ct14"] += "9999-12-31T23:59:59.000000000Z (EngineCore_DP5 pid=1) hello\n"
    results = judge_all(texts, {}, Layout(NODES), now=None, problems={})
    assert [(r.node, r.status) for r in results if r.status != Status.PASS] == [("ct14", Status.ERROR)]
    assert "more than a day ahead" in results[0].message


@pytest.mark.parametrize("line, step, status, code", [
    ("LMCache WARNING: Failed to import backend lmcache.c_ops: libcudart.so.13: cannot open shared object file: "
     "No such file or directory", "triage-config", Status.WARN, "TRIAGE-LMCACHE-CUDA-BUILD"),
    ("RuntimeError: Timed out waiting for LMCache server on port 5555", "triage-startup", Status.FAIL,
     "TRIAGE-LMCACHE-SERVER-HUNG"),
    ("[aiter] Warning: Invalid AITER_LOG_LEVEL 'WARN', using 'INFO'. Valid values: DEBUG, INFO, WARNING, ERROR",
     "triage-config", Status.WARN, "TRIAGE-AITER-LOG-LEVEL"),
    ("ERROR: /results/server_metrics_export.json contains no metric with required prefix 'atom:'", "triage-fatal",
     Status.FAIL, "TRIAGE-AIPERF-NO-ATOM-METRICS"),
    ("ERROR: required AIPerf server metrics artifacts are missing or empty in /results", "triage-fatal", Status.FAIL,
     "TRIAGE-AIPERF-NO-ATOM-METRICS"),
    ("gpucore files exist. not good", "triage-fatal", Status.FAIL, "TRIAGE-GPUCORE"),
])
def test_agentx_log_signatures_of_the_reference(line, step, status, code):
    """§25, §29, §30: each literal line is named once, on the rank that printed it."""
    assert_named_once_on_its_rank(line, step, status, code)


@pytest.mark.parametrize("line, step, status, code", [
    ("ccoCommCreate: UALink fabric ready on only 12/16 ranks \u2014 using host LSA + RDMA", "triage-config",
     Status.FAIL, "TRIAGE-MORI-FABRIC-PARTIAL"),
    ("ccoCommCreate: LSA team spans hosts (cross-node vPOD, lsaSize=16) but fabric handle support is unavailable "
     "\u2014 cannot map peer VAs across nodes.", "triage-fatal", Status.FAIL, "TRIAGE-MORI-LSA-LAYOUT"),
    ("ccoCommCreate: non-contiguous lsa membership; CCO requires LSA-major contiguous rank layout", "triage-fatal",
     Status.FAIL, "TRIAGE-MORI-LSA-LAYOUT"),
    ("ccoCommCreate: MORI_VPOD_ID set on 4/16 ranks \u2014 manual vPOD grouping must be all-or-none across the job.",
     "triage-config", Status.FAIL, "TRIAGE-MORI-VPOD-PARTIAL"),
    ("Out of heap memory! Requested 268435456 bytes. Hint: Increase via MORI_SHMEM_HEAP_SIZE", "triage-fatal",
     Status.FAIL, "TRIAGE-MORI-HEAP"),
    ("ct14:1234:1234 [1] NCCL INFO unexpected fabric info version 4294967295", "triage-config", Status.FAIL,
     "TRIAGE-RCCL-AMD-SMI-LIB"),
    ("NCCL WARN Symmetric memory is not supported (cuMemEnable 0, globalGinSupport 0)", "triage-config", Status.WARN,
     "TRIAGE-RCCL-NO-SYMMETRIC-MEMORY"),
    ("RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83] ifa != nullptr. Unable to "
     "find address for: ^lo", "triage-config", Status.FAIL, "TRIAGE-GLOO-INTERFACE"),
    ("[W socket.cpp:697] [c10d] The client socket has timed out after 600000ms while trying to connect to "
     "(10.210.11.14, 29500).", "triage-startup", Status.FAIL, "TRIAGE-RENDEZVOUS-UNREACHABLE"),
    ("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for workers. 1/2 workers joined.",
     "triage-startup", Status.FAIL, "TRIAGE-RENDEZVOUS-UNREACHABLE"),
    ("No compatible code objects found for: gfx942:sramecc+:xnack-", "triage-fatal", Status.FAIL,
     "TRIAGE-NO-CODE-OBJECTS"),
    ("ct14:4321 NCCL DIAG [INFO] p2p: read srcRank=1 dstRank=3 path=XGMI status=mismatch", "triage-fatal",
     Status.FAIL, "TRIAGE-RCCL-DIAG-P2P"),
    ("NCCL WARN peer-memory import failed for rank 2 (handle=DIRECT)", "triage-config", Status.WARN,
     "TRIAGE-RCCL-DIAG-ONE-PROCESS"),
])
def test_field_log_signatures_of_reference_29(line, step, status, code):
    """§29: each literal line of the field sources is named once, on the rank that printed it."""
    assert_named_once_on_its_rank(line, step, status, code)


def assert_named_once_on_its_rank(line: str, step: str, status, code: str) -> None:
    """``line`` printed by rank 5 (node ct14, GPU 1) is one finding of ``status`` there, and nowhere else."""
    results = run(L.node_logs(extra={5: [line]}))
    assert {(r.check, r.node, r.gpu, r.remediation) for r in results if r.status == status} == {
        (step, "ct14", 1, code)}


@pytest.mark.parametrize("line", [
    "ccoCommCreate: LSA team size 16 != UALink vpod_size 72 (subset of the vPOD launched?)",
    "amdsmi_wrap.cc:214 NCCL WARN RCCL_USE_AMD_SMI_LIB not set, but HIP_FABRIC_API is defined. Rerun with "
    "RCCL_USE_AMD_SMI_LIB=1",
    "AMD SMI fabric: unable to verify the loaded library's fabric ABI; falling back to sysfs",
    "ct14:4321 NCCL DIAG [OK] p2p: all 12 directed GPU P2P edges verified",
])
def test_known_benign_field_lines_raise_nothing(line):
    """§29: every 4-node run inside the 18-tray vPOD prints the LSA size line; RCCL's advice to set
    RCCL_USE_AMD_SMI_LIB is the trap itself, never echoed; the ABI line only says two ROCm drops are mixed."""
    results = run(L.node_logs(extra={5: [line]}))
    assert [r for r in results if r.status != Status.PASS] == []


@pytest.mark.parametrize("line, card", [
    ("HW Exception by GPU node-4 (Agent handle: 0x5581f5c0e2a0) reason :GPU Hang", 2),
    ("Memory access fault by GPU node-2 (Agent handle: 0x55d0c2a1b7e0) on address (nil). Reason: unknown.", 0),
])
def test_rocr_node_n_is_the_kfd_topology_node_not_the_gpu_index(line, card):
    """§29: ROCr's `GPU node-N` counts the CPU agents first (GPU nodes 2-5 on a gfx1250 tray): the finding names
    card N-2 of the node that logged it - not GPU N, and not the logging rank's own GPU (rank 5 = ct14 gpu1)."""
    results = run(L.node_logs(extra={5: [line]}))
    [bad] = [r for r in results if r.status == Status.FAIL]
    assert (bad.check, bad.node, bad.gpu, bad.remediation) == ("triage-fatal", "ct14", card, "TRIAGE-ROCR-GPU-FAULT")
    node = card + 2
    assert f"KFD topology node {node} = card {card} of the node" in bad.message
    assert f"not GPU index {node}" in bad.message
    assert bad.evidence["kfd_node"] == node


def test_rocr_node_outside_the_layouts_gpu_nodes_says_so_and_keeps_the_ranks_gpu():
    results = run(L.node_logs(extra={5: ["HW Exception by GPU node-9 (Agent handle: 0x1) reason :GPU Hang"]}))
    [bad] = [r for r in results if r.status == Status.FAIL]
    assert bad.gpu == 1 and "KFD topology node 9 is not one of this layout's GPU nodes 2-5" in bad.message


def test_rccl_diagnostics_without_a_p2p_line_are_an_error_not_a_pass():
    """§29: NCCL_RUN_DIAGNOSTICS=1 ends with a `p2p:` line per process (stdout only); `NCCL DIAG` lines without
    one mean the verdict was lost - an ERROR for that rank. With the OK line the same log is quiet."""
    started = "ct14:4321 NCCL DIAG [INFO] intra-node diagnostics: 4 GPUs, 1 process per GPU"
    results = run(L.node_logs(extra={5: [started]}))
    assert [(r.check, r.node, r.status, r.remediation) for r in results if r.status != Status.PASS] == [
        ("triage-fatal", "ct14", Status.ERROR, "TRIAGE-RCCL-DIAG-NO-P2P")]
    assert "printed no `p2p:` line" in [r for r in results if r.status == Status.ERROR][0].message
    ok = "ct14:4321 NCCL DIAG [OK] p2p: all 12 directed GPU P2P edges verified"
    assert [r for r in run(L.node_logs(extra={5: [started, ok]})) if r.status != Status.PASS] == []


def test_rocr_hang_from_the_real_mi300x_capture_names_card_7_of_an_8_gpu_node_once():
    """corpus hip-runtime-hw-exception-gpu-hang-mi300x.txt (legacy-rocm-build #4021): five processes print `HW
    Exception by GPU node-9 ... reason :GPU Hang`, the first glued to a tqdm bar; on an 8-GPU node with its CPU
    agents first that is card 7 (not the logging rank 2's own GPU) - one finding for that rank."""
    parsed = parse_log(load("hip-runtime-hw-exception-gpu-hang-mi300x.txt"), default_rank=2)
    results = triage_results(parsed, Layout(("mi300x",), per_node=8), now=None, problems={})
    [bad] = [r for r in results if r.status == Status.FAIL]
    assert (bad.node, bad.gpu, bad.remediation) == ("mi300x", 7, "TRIAGE-ROCR-GPU-FAULT")
    assert "KFD topology node 9 = card 7 of the node" in bad.message
