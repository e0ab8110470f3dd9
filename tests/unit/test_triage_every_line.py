"""Triage reads every line of every log, rank marker or not (issue 32 item 3): a line that names no rank is its log's
(the node the log is, or the file), judged by every rule that reads single lines. The LMCache wordings of §25/§29 are
all known, and a later readiness line supersedes an earlier LMCache timeout."""
import pytest
from k3rig import server_log as L

from k3doctor.results import Status
from k3doctor.triage import judge_all, node_of_source
from k3doctor.triage.rank_logs import Layout

NODES = ("ct13", "ct14", "ct16", "ct17")
AIPERF = ("aiperf.common.exceptions.ProfileMetricCoverageError: /tmp/aiperf/server_metrics.json contains no metric "
          "with required prefix 'atom:'")
GPUCORE = "gpucore files exist. not good"


def findings(results):
    return sorted((r.check, r.node, r.gpu, r.status.value, r.remediation) for r in results
                  if r.status in (Status.FAIL, Status.WARN, Status.ERROR))


def triage(texts: dict, nodes=()):
    return judge_all({name: "\n".join(lines) + "\n" for name, lines in texts.items()}, {}, Layout(nodes), now=None,
                     problems={})


@pytest.mark.parametrize("ranked", [False, True], ids=["only rankless lines", "beside the node's healthy ranks"])
def test_a_node_named_log_is_read_line_by_line_like_a_rank_log(ranked):
    """Before: node1.log dropped every line without a rank marker (READY TO LAUNCH, or nothing to judge) while the
    same lines in rank0.log were a FAIL."""
    healthy = L.node_logs(n_nodes=2)[1] if ranked else []
    got = findings(triage({"node1.log": healthy + [AIPERF, GPUCORE]}))
    assert got == [("triage-fatal", "node1", None, "FAIL", "TRIAGE-AIPERF-NO-ATOM-METRICS"),
                   ("triage-fatal", "node1", None, "FAIL", "TRIAGE-GPUCORE")]
    assert findings(triage({"rank0.log": [AIPERF, GPUCORE]})) == [
        ("triage-fatal", "node0", 0, "FAIL", "TRIAGE-AIPERF-NO-ATOM-METRICS"),
        ("triage-fatal", "node0", 0, "FAIL", "TRIAGE-GPUCORE")]


def test_with_an_inventory_the_lines_go_to_the_node_and_a_file_naming_none_says_so():
    logs = {i: lines for i, lines in L.node_logs().items()}
    texts = {f"{NODES[i]}.log": lines for i, lines in logs.items()}
    texts["ct16.log"] = texts["ct16.log"] + [GPUCORE]
    assert findings(triage(texts, NODES)) == [("triage-fatal", "ct16", None, "FAIL", "TRIAGE-GPUCORE")]
    [bad] = [r for r in triage({**texts, "ct16.log": logs[2], "bench.out": [AIPERF]}, NODES)
             if r.status == Status.FAIL]
    assert (bad.node, bad.remediation, bad.evidence["log"]) == (None, "TRIAGE-AIPERF-NO-ATOM-METRICS", "bench.out")
    assert "in log bench.out, which names no rank and no node of the layout" in bad.message


def test_a_log_with_nothing_triage_knows_and_no_rank_is_still_nothing_to_judge():
    [r] = triage({"node1.log": ["starting", "INFO:     Application startup complete."]})
    assert r.status == Status.ERROR and "nothing to judge" in r.message


def test_rules_about_a_whole_rank_do_not_read_a_logs_loose_lines():
    """A0 with no translation, a stalled log or drafter: about a rank's startup, never about lines without a rank."""
    [r] = [r for r in triage({"ct13.log": L.node_logs(stepping="A0")[0]}, NODES) if r.status != Status.PASS] or [None]
    assert r is None
    got = triage({"ct13.log": L.rank_lines(0) + ["Loading drafter model..."]}, NODES)
    assert findings(got) == []


@pytest.mark.parametrize("line, code", [
    ("LMCache WARNING: Failed to import backend lmcache.c_ops: libcudart.so.13: cannot open shared object file: No "
     "such file or directory", "TRIAGE-LMCACHE-CUDA-BUILD"),
    ("LMCache WARNING: Failed to import backend lmcache.c_ops: libc10_cuda.so: cannot open shared object file: No "
     "such file or directory", "TRIAGE-LMCACHE-CUDA-BUILD"),
    ("[LMCache WARNING] Failed to import backend lmcache.c_ops: /opt/venv/lib/python3.12/site-packages/torch/lib/"
     "libc10_cuda.so: cannot open shared object file", "TRIAGE-LMCACHE-CUDA-BUILD"),
    ("RuntimeError: Timed out waiting for LMCache server on port 5555", "TRIAGE-LMCACHE-SERVER-HUNG"),
    ("RuntimeError: Timed out waiting for LMCache server healthcheck", "TRIAGE-LMCACHE-SERVER-HUNG"),
    ("TimeoutError: Timed out waiting for LMCache server.", "TRIAGE-LMCACHE-SERVER-HUNG"),
])
def test_every_lmcache_wording_is_named(line, code):
    """Before: the healthcheck and bare wordings of the timeout and the libc10_cuda.so form of the warning passed."""
    prefix = "(EngineCore_DP2 pid=4002) "
    assert [f[4] for f in findings(triage({"ct13.log": L.rank_lines(2, stop_at="load") + [prefix + line]},
                                          NODES))] == [code]


TIMEOUT = "(EngineCore_DP0 pid=4000) RuntimeError: Timed out waiting for LMCache server healthcheck"


@pytest.mark.parametrize("after", ["(EngineCore_DP0 pid=4000) LMCache server is ready on port 5555",
                                   "INFO:     Application startup complete."])
def test_a_later_readiness_supersedes_an_earlier_lmcache_timeout(after):
    """Before: `never came up` though the next line said it was up; readiness first, timeout after, is still one."""
    start = L.rank_lines(0, stop_at="load")
    assert findings(triage({"rank0.log": start + [TIMEOUT, after]})) == []
    assert findings(triage({"ct13.log": start + [TIMEOUT, after]}, NODES)) == []
    assert findings(triage({"ct13.log": start + [after, TIMEOUT]}, NODES)) == [
        ("triage-startup", "ct13", 0, "FAIL", "TRIAGE-LMCACHE-SERVER-HUNG")]


def test_a_server_up_later_on_another_log_supersedes_a_stamped_timeout():
    """Uvicorn's line is node 0's, the timeout rank 4's on node 1: their times order them."""
    ct14 = L.stamped(L.rank_lines(4, stop_at="load") + [TIMEOUT.replace("DP0 pid=4000", "DP4 pid=4004")])
    ct13 = L.stamped(L.rank_lines(0), step_s=60)  # its serving line is stamped minutes after ct14's timeout
    results = judge_all({"ct13": ct13, "ct14": ct14}, {}, Layout(NODES[:2]), now=None, problems={})
    assert findings(results) == []
    late = L.stamped(L.rank_lines(0), step_s=0.01)  # up before the timeout: it never came up after it
    results = judge_all({"ct13": late, "ct14": ct14}, {}, Layout(NODES[:2]), now=None, problems={})
    assert findings(results) == [("triage-startup", "ct14", 0, "FAIL", "TRIAGE-LMCACHE-SERVER-HUNG")]


@pytest.mark.parametrize("source, nodes, node", [
    ("ct13", NODES, "ct13"), ("ct13.example.com", ("ct13.example.com",), "ct13.example.com"),
    ("node1.log", (), "node1"), ("node1.log", NODES, None), ("rank3.log", (), None), ("a b.log", (), None),
])
def test_the_node_a_log_is(source, nodes, node):
    assert node_of_source(source, Layout(nodes)) == node
