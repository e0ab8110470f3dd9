"""The allreduce probe's judgement survives what its parsers reject: a torch log with absurd
numbers and a size event with a nan bandwidth leave a failed outcome, never an exception or a nan."""
import json
import math

from k3doctor.probes.allreduce import Member, NodeRun, Plan, analyse

STAGES = ("start", "rendezvous", "init", "warmup", "sweep")


def plan(sizes=(1 << 20, 2 << 20)) -> Plan:
    return Plan(label="full", members=(Member("a", "10.0.0.1", 1, ("python3",)),), port=29801, backend="auto",
                sizes_gpu=sizes, sizes_cpu=sizes, iters=5, warmup_iters=1, deadlines=dict.fromkeys(STAGES, 30))


def run(body, rc=0, stderr=""):
    lines = [{"ev": "agent", "node": "a", "ranks": [0], "pid": 1}]
    for i, stage in enumerate(STAGES):
        lines += [{"ev": "begin", "rank": 0, "stage": stage},
                  {"ev": "end", "rank": 0, "stage": stage, "dur": 1.0 + i, **({"backend": "nccl"} if i == 0 else {})}]
    text = "\n".join("K3PROBE " + (e if isinstance(e, str) else json.dumps(e)) for e in lines + body) + "\n"
    return {"a": NodeRun("a", rc=rc, stdout=text, stderr=stderr, cleanup={"killed": [], "left": []})}


def test_a_torch_log_with_a_5000_digit_counter_is_unclassified_not_a_crash():
    stderr = ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=" + "9" * 5000
              + ", OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=45000) ran for 45001 milliseconds\n")
    o = analyse(plan(), "r1", run([{"ev": "done", "rank": 0}], rc=1, stderr=stderr), 5.0)
    assert o.torch_failure == {}


def test_a_nan_time_is_a_size_not_measured_not_a_nan_result():
    sizes = ['{"ev": "size", "rank": 0, "bytes": 1048576, "time_us": NaN, "algbw": NaN}',
             {"ev": "size", "rank": 0, "bytes": 2097152, "time_us": 20.0, "algbw": 100.0},
             {"ev": "done", "rank": 0}]
    o = analyse(plan(), "r1", run(sizes), 5.0)
    assert not o.ok and [s["bytes"] for s in o.sizes] == [2097152]
    assert all(math.isfinite(s["busbw_gbs"]) for s in o.sizes)
