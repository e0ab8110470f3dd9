"""Triage's log rules are rows (``triage.judge.RULES``): every row is reachable, i.e. a rank whose lines show
what the row reads gives that row's finding, with its step and remediation code (issue 20 §6)."""
from datetime import timedelta

import pytest
from k3rig import server_log as L

from k3doctor.parsers.atom_log import parse_log
from k3doctor.registry import REGISTRY
from k3doctor.results import Status
from k3doctor.triage.judge import RULES, Layout, judge_rank

P = "(EngineCore_DP0 pid=4000)"
KV_ERROR = L.KV_COLLISION[0]
STALL_NOW = (L.T0 + timedelta(hours=2)).timestamp()

# row name -> (the rank's lines, layout keywords, now): one rank 0 whose lines fire that row
SAMPLES = {
    "budget-board-size": (L.rank_lines(0), {"board_gib": 288}, None),
    "budget-kv-not-positive": (L.rank_lines(0, kv="-4.67"), {}, None),
    "kv-collision": (L.rank_lines(0, stop_at="load") + L.KV_COLLISION, {}, None),
    "kv-raise-util": (L.rank_lines(0, stop_at="load") + [KV_ERROR, "Set --gpu-memory-utilization >= 0.96"], {},
                      None),
    "kv-cannot-fit": (L.rank_lines(0, stop_at="load") + [KV_ERROR], {}, None),
    "expert-count": (L.rank_lines(0, experts=28), {}, None),
    "max-model-len-set": (L.rank_lines(0, max_model_len="32768"), {}, None),
    "profiler-dir-unset": (L.rank_lines(0) + ["POST /start_profile HTTP/1.1 200"], {}, None),
    "translation-failed": (L.rank_lines(0) + [f"{P} outcome=translation_failed changed=0"], {}, None),
    "a0-not-translating": (L.rank_lines(0), {"stepping": "A0"}, None),
    "b0-translating": (L.rank_lines(0, stepping="A0"), {"stepping": "B0"}, None),
    "triton-code-object": (L.rank_lines(0) + L.TRITON, {}, None),
    "runner-died": (L.rank_lines(0) + ["ModelRunner exited with exitcode=-6"], {}, None),
    "lmcache-cuda-build": (["LMCache WARNING: Failed to import backend lmcache.c_ops: libcudart.so.13"], {}, None),
    "lmcache-server-hung": (["RuntimeError: Timed out waiting for LMCache server on port 5555"], {}, None),
    "aiter-log-level": (["[aiter] Warning: Invalid AITER_LOG_LEVEL 'WARN', using 'INFO'."], {}, None),
    "aiperf-no-atom-metrics": (["ERROR: x.json contains no metric with required prefix 'atom:'"], {}, None),
    "gpucore": (["gpucore files exist. not good"], {}, None),
    # the field signatures of §29 (triage.signatures), one literal line each
    "mori-fabric-partial": (["ccoCommCreate: UALink fabric ready on only 12/16 ranks \u2014 using host LSA + RDMA"],
                            {}, None),
    "mori-lsa-refused": (["ccoCommCreate: non-contiguous lsa membership; CCO requires LSA-major contiguous rank "
                          "layout"], {}, None),
    "mori-vpod-partial": (["ccoCommCreate: MORI_VPOD_ID set on 4/16 ranks \u2014 manual vPOD grouping must be "
                           "all-or-none across the job."], {}, None),
    "mori-heap": (["Out of heap memory! Requested 268435456 bytes. Hint: Increase via MORI_SHMEM_HEAP_SIZE"], {}, None),
    "rccl-fabric-version": (["ct14:1234:1234 [1] NCCL INFO unexpected fabric info version 4294967295"], {}, None),
    "rccl-no-symmetric": (["NCCL WARN Symmetric memory is not supported (cuMemEnable 0, globalGinSupport 0)"], {},
                          None),
    "gloo-interface": (["RuntimeError: [enforce fail at device.cc:83] ifa != nullptr. Unable to find address for: "
                        "^lo"], {}, None),
    "rendezvous-timeout": (["torch.distributed.DistStoreError: Timed out after 901 seconds waiting for workers. 1/2 "
                            "workers joined."], {}, None),
    "no-code-objects": (["No compatible code objects found for: gfx942:sramecc+:xnack-"], {}, None),
    "rccl-diag-p2p-failed": (["ct14:4321 NCCL DIAG [INFO] p2p: read srcRank=1 dstRank=3 path=XGMI status=mismatch"],
                             {}, None),
    "rccl-diag-multi-gpu": (["NCCL WARN peer-memory import failed for rank 2 (handle=DIRECT)"], {}, None),
    "rocr-gpu-hang": (["HW Exception by GPU node-4 (Agent handle: 0x5581f5c0e2a0) reason :GPU Hang"], {}, None),
    "rocr-memory-fault": (["Memory access fault by GPU node-2 (Agent handle: 0x55d0c2a1b7e0) on address (nil). "
                           "Reason: unknown."], {}, None),
    # §31.3's MI3xx field failures
    "hip-ipc-handle": (["ct14:1234:1300 [2] NCCL WARN hipIpcGetMemHandle failed : invalid argument"], {}, None),
    "gfx950-only-kernel": (["AssertionError: mla_gluon requires gfx950 (CDNA4), got gfx942"], {}, None),
    "hsa-exception-1016": (["HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception. "
                            "code: 0x1016"], {}, None),
    "aperture-violation": (["HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory "
                            "beyond the largest legal address. code: 0x29"], {}, None),
    "numa-balancing": (["ct14:1234:1234 [0] NCCL WARN NUMA auto balancing enabled which can lead to variability in "
                        "the RCCL performance! Disable by \"sudo sysctl -w kernel.numa_balancing=0\""], {}, None),
    "rccl-diag-no-p2p": (["ct14:4321 NCCL DIAG [INFO] intra-node diagnostics: 4 GPUs, 1 process per GPU"], {}, None),
    "double-free": (L.rank_lines(0) + ["double free or corruption (out)"], {}, None),
    "drafter-downloading": (L.rank_lines(0, stop_at="config") + L.DRAFTER, {}, None),
    "log-stalled": (L.rank_lines(0, stop_at="load"), {}, STALL_NOW),
}


def test_every_row_has_a_sample_and_a_registered_code():
    assert [rule.name for rule in RULES] == list(dict.fromkeys(rule.name for rule in RULES))  # names are unique
    assert set(SAMPLES) == {rule.name for rule in RULES}
    assert all(rule.remediation in REGISTRY.remediations for rule in RULES)


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_every_row_is_reachable(rule):
    lines, layout, now = SAMPLES[rule.name]
    parsed = parse_log(L.stamped(lines) if now else "\n".join(lines))
    layout = Layout(("ct13",), **layout)
    alone = judge_rank(0, parsed, layout, now, rules=(rule,))
    status = {"warn": Status.WARN, "fail": Status.FAIL, "error": Status.ERROR}[rule.finding.__name__]
    assert [(step, v.status, v.remediation, v.node) for step, v in alone] == [
        (rule.step, status, rule.remediation, "ct13")]
    assert (rule.step, rule.remediation) in {(step, v.remediation) for step, v in judge_rank(0, parsed, layout, now)}


def test_a_healthy_rank_fires_no_row():
    assert judge_rank(0, parse_log("\n".join(L.rank_lines(0))), Layout(("ct13",), board_gib=432), None) == []


def test_explain_names_the_rows_that_give_a_code():
    from click.testing import CliRunner

    from k3doctor.cli.info import explain_cmd
    out = CliRunner().invoke(explain_cmd, ["TRIAGE-RUNNER-DIED"])
    assert out.exit_code == 0, out.output
    assert out.output.rstrip().endswith("Raised by: triage rule runner-died, triage rule double-free")


def test_list_verbose_shows_every_row():
    from click.testing import CliRunner

    from k3doctor.cli.info import list_cmd
    out = CliRunner().invoke(list_cmd, ["-v"])
    assert out.exit_code == 0, out.output
    shown = out.output.split("rule rows besides the checks", 1)[1]
    assert all(f"triage rule {rule.name}: {rule.remediation}\n" in shown for rule in RULES)
    assert "triage rule idle-as-completed: -" in shown  # a stack rule that names no fault
