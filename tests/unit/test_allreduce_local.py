"""The all_reduce worker for real: gloo ranks on this machine through LocalTransport.

Two "nodes" share 127.0.0.1, one rank each, so every test starts real agents and ranks
(torch import included) and checks what a user relies on: a verified sum and figures on a
healthy run, a named stage and rank on a hang, a verdict inside the deadline, and no
process of the run left behind.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest
from k3rig import hang

from k3doctor.probes.allreduce import WORKER_SOURCE, Member, Plan, _cleanup, diagnose, launch
from k3doctor.remote import allreduce_worker as worker
from k3doctor.transport.local import LocalTransport

if importlib.util.find_spec("torch") is None:
    pytest.skip("torch is not installed (pip install torch==2.13.0)", allow_module_level=True)

# Margins from measured healthy runs of this plan on the loaded 2-core CI box (load average ~14, 5 runs):
# start (both ranks importing torch at once) 12-20 s, rendezvous (the other rank's import skew) 0.04-1.5 s,
# init/warmup/sweep under 0.4 s. The hang tests wait out the rendezvous deadline, so it is not larger.
DEADLINES = {"start": 90, "rendezvous": 10, "init": 20, "warmup": 20, "sweep": 30}
AGENT_KILLED = "hung; killed by its node's agent (stage deadline)"


def plan(port, hung: dict | None = None) -> Plan:
    """``hung``: node -> the python that stands in for its own (the rig's hang drill, k3rig.hang)."""
    members = tuple(Member(n, "127.0.0.1", 1, ((hung or {}).get(n, sys.executable),)) for n in ("a", "b"))
    return Plan(label="full", members=members, port=port, backend="gloo", sizes_gpu=(4096,),
                sizes_cpu=(4096, 65536), iters=3, warmup_iters=1, deadlines=dict(DEADLINES))


def drill(tmp_path, text: str) -> str:
    """The wrapper python of a hang drill (``NODE[:LOCAL]@STAGE``) around this interpreter."""
    return str(hang.install(hang.parse(text, ["a", "b"]), tmp_path / "hang", python=sys.executable))


@pytest.fixture
def transports():
    return {n: LocalTransport(n) for n in ("a", "b")}


def test_healthy_run_verifies_the_sum_and_reports_figures(transports):
    [o] = launch([plan(29871)], transports)
    assert o.ok, o.describe()
    assert o.backend == "gloo" and o.world == 2
    assert [row["bytes"] for row in o.sizes] == [4096, 65536]
    assert all(row["busbw_gbs"] == pytest.approx(row["algbw_gbs"], rel=1e-3) for row in o.sizes)  # n=2: 2(n-1)/n=1
    assert set(o.stage_s) == {"start", "rendezvous", "init", "warmup", "sweep"}
    assert o.cleanup == {"a": {"killed": [], "left": []}, "b": {"killed": [], "left": []}}
    assert worker.ours(o.run_id) == []


def test_rank_hung_at_rendezvous_is_named_killed_and_attributed_to_its_node(transports, tmp_path):
    diag = diagnose(plan(29881, hung={"b": drill(tmp_path, "b@rendezvous")}), transports, 300)
    full = diag.final
    assert not full.ok and full.stage == "rendezvous"
    assert full.missing == [1] and full.missing_nodes == ["b"]
    assert [(f.kind, f.nodes) for f in diag.findings] == [("node", ("b",))]
    node_b = next(o for o in diag.subruns if o.label == "node b")
    # the stopped rank could not exit by itself: its agent killed it at the stage deadline (plus its grace and
    # a margin for cleanup on a loaded box), long before the run limit would have
    assert node_b.killed == [0] and node_b.errors[0] == f"[rendezvous] {AGENT_KILLED}"
    budget = node_b.stage_s["start"] + DEADLINES["rendezvous"] + worker.AGENT_KILL_GRACE_S + 30
    assert node_b.wall_s < budget < plan(0).limit_s(), (node_b.wall_s, node_b.stage_s)
    for o in diag.attempts + diag.subruns:
        assert worker.ours(o.run_id) == [], o.label


def test_cleanup_kills_a_run_whose_agent_outlived_its_launcher(tmp_path):
    run_id = "t" + os.urandom(6).hex()
    spec = plan(29891).spec(plan(29891).members[0], 300)
    proc = subprocess.Popen([drill(tmp_path, "a@start"), "-", worker.TOKEN_PREFIX + run_id, json.dumps(spec)],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc.stdin.write(WORKER_SOURCE)
    proc.stdin.close()
    deadline = time.monotonic() + 60  # a poll for the state, not a timing claim
    while len(worker.ours(run_id)) < 2 and time.monotonic() < deadline:  # agent + its stopped rank
        time.sleep(0.1)
    pids = worker.ours(run_id)
    assert proc.pid in pids and len(pids) == 2
    report = _cleanup(LocalTransport("a"), Member("a", "127.0.0.1", 1, (sys.executable,)), run_id)
    proc.wait(timeout=10)
    assert sorted(report["killed"]) == sorted(pids) and report["left"] == []
    assert worker.ours(run_id) == []


def test_cleanup_never_matches_a_command_that_merely_mentions_the_run_id():
    run_id = "t" + os.urandom(6).hex()
    shell = subprocess.Popen(["sh", "-c", f"sleep 30 # {worker.TOKEN_PREFIX}{run_id}"], start_new_session=True)
    lookalike = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)",
                                  worker.TOKEN_PREFIX + run_id])
    try:
        assert worker.ours(run_id) == []
        report = _cleanup(LocalTransport("a"), Member("a", "127.0.0.1", 1, (sys.executable,)), run_id)
        assert report == {"killed": [], "left": []}
        assert shell.poll() is None and lookalike.poll() is None
    finally:
        os.killpg(shell.pid, 9)  # the shell and its sleep
        lookalike.kill()
