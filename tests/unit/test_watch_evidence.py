"""--bundle-dir's capture (k3doctor/watch/evidence.py): which processes are the engine's ranks, one capture per
stall of a node taken off the watch's thread, a bounded metrics history. The capture over real sshd and py-spy
is in tests/e2e/test_watch.py."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from k3doctor.readings import CommandReading
from k3doctor.transport.base import TransportError
from k3doctor.watch.evidence import Evidence, MetricsHistory, rank_pids
from k3doctor.watch.sources import Sample

PS = """\
  100     1 python3 -m k3rig.model_server --ranks 4 --control /a.json
  101   100 ATOM::DP0TP0 model_runner.py 0 /a.json 100
  102   100 ATOM::DP1TP0 model_runner.py 1 /a.json 100
  103   102 ATOM::DP7TP0 a grandchild of the engine
  200     1 python3 -m k3rig.model_server --ranks 2 --control /b.json
  201   200 ATOM::DP0TP0 model_runner.py 0 /b.json 200
  300     1 ATOM::DP3TP0 nobody's
"""


def test_ranks_are_the_engines_own_model_runners():
    assert rank_pids(PS, r"model_server --ranks 4 --control /a\.json") == {0: 101, 1: 102, 7: 103}
    assert rank_pids(PS, r"ATOM::") == {0: 201, 1: 102, 7: 103, 3: 300}  # the default pattern: every ModelRunner
    assert rank_pids("garbage\n\n 1 2\n", r"x") == {}


class SlowNode:
    """A node whose connect takes until ``release`` is set, then fails (the capture's worst case)."""

    def __init__(self, release: threading.Event, calls: list):
        self.release, self.calls = release, calls

    def connect(self):
        self.calls.append(time.monotonic())
        self.release.wait(10)
        raise TransportError("cannot reach n1: timed out", "NODE-UNREACHABLE")

    def cancel(self):
        self.release.set()

    def close(self):
        pass


def stall(kind: str, where: str) -> dict:
    return {"time": time.time(), "event": kind, "code": "ENGINE-STALLED", "node": "n1", "where": where,
            "severity": "fail", "message": "m", "section": "§31.2"}


def test_one_capture_per_stall_of_a_node_never_on_the_watchs_thread(tmp_path):
    release, calls = threading.Event(), []
    inv = SimpleNamespace(nodes=[SimpleNamespace(name="n1")], cluster=SimpleNamespace(gpus_per_node=8))
    evidence = Evidence(str(tmp_path), lambda name: SlowNode(release, calls), inv, MetricsHistory(10), "x")
    began = time.monotonic()
    evidence.consider(stall("start", "dp_rank 2"))
    evidence.consider(stall("start", "dp_rank 3"))  # the same stall, spreading: no second capture
    assert time.monotonic() - began < 0.5 and evidence.done() == []  # in flight, not waited for
    release.set()
    said = evidence.done(wait_s=5)
    assert [(e["event"], e["code"], e["where"]) for e in said] == [("action", "EVIDENCE-CAPTURED", "dp_rank 2")]
    assert "not read: evidence not read: cannot reach n1: timed out" in said[0]["message"]
    assert len(list(tmp_path.iterdir())) == 1  # what could be said is bundled all the same (the metrics)
    evidence.consider(stall("clear", "dp_rank 2"))
    evidence.consider(stall("start", "dp_rank 2"))  # rank 3 still stalled: the same stall
    evidence.consider(stall("clear", "dp_rank 2"))
    evidence.consider(stall("clear", "dp_rank 3"))
    evidence.consider(stall("start", "dp_rank 1"))  # a new stall of the node
    assert len(evidence.close()) == 1 and len(calls) == 2 and evidence.count == 2


def page(tokens: int) -> Sample:
    text = (f'atom:requests_running{{dp_rank="0"}} 4\natom:generation_tokens_total{{dp_rank="0"}} {tokens}\n'
            f'atom:requests_running{{dp_rank="1"}} 4\natom:generation_tokens_total{{dp_rank="1"}} {tokens}\n')
    return Sample("n1", 1000.0 + tokens, readings={"metrics": CommandReading("fetch", 0, text, "")})


def test_metrics_history_is_bounded_and_skips_what_was_not_read():
    history = MetricsHistory(interval_s=100)  # 300 s kept: 4 pages
    for tokens in range(10):
        history.add("n1", page(tokens))
    history.add("n1", Sample("n1", 5.0, "unreachable"))
    history.add("n1", Sample("n1", 6.0, readings={"metrics": CommandReading("fetch", 7, "", "refused")}))
    kept = history.of("n1")
    assert [h["ranks"]["1"]["generation_tokens_total"] for h in kept] == [6, 7, 8, 9] and history.of("n2") == []


class Broken:
    """A node whose read fails in a way its transport did not foresee (paramiko's bare EOFError once did)."""

    node, closed = "n2", 0

    def read(self):
        raise EOFError()

    def close(self):
        self.closed += 1

    def cancel(self):
        pass


class Fine:
    node = "n1"

    def read(self):
        return Sample("n1", time.time(), "unreachable")

    def close(self):
        pass

    def cancel(self):
        pass


def test_one_nodes_surprise_is_that_node_unread_never_the_end_of_the_watch():
    from k3doctor.watch.node_conditions import Settings
    from k3doctor.watch.loop import Watch

    broken = Broken()
    watch = Watch({"n1": Fine(), "n2": broken}, Settings())
    try:
        events = watch.round() + watch.round()
    finally:
        watch.stop()
    assert [(e["event"], e["node"], e["code"]) for e in events] == [
        ("start", "n1", "NODE-UNREAD"), ("start", "n2", "NODE-UNREAD")]
    assert "not read: EOFError: no message (connection closed)" in events[1]["message"] and broken.closed >= 2
