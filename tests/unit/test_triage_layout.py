"""Offline triage names nodes as the files do, and never invents a node for a rank outside the layout
(issue 22 §4)."""
import subprocess
import sys

from k3rig import server_log as L

from k3doctor.results import Status
from k3doctor.triage import judge_all
from k3doctor.triage.rank_logs import Layout

NAMES = ("ct13", "ct14", "ct16", "ct17")


def per_node_files(logs):
    return {f"{NAMES[i]}.log": "\n".join(lines) + "\n" for i, lines in logs.items()}


def bad(results):
    return [(r.check, r.node, r.gpu, r.status) for r in results if r.status in (Status.FAIL, Status.WARN)]


def test_a_node_log_file_names_its_node():
    texts = per_node_files(L.node_logs(extra=L.missing_participant(stalled=14)))
    results = judge_all(texts, {}, Layout(nodes=(), per_node=4), now=None, problems={})
    assert bad(results) == [("triage-collective", "ct17", 2, Status.FAIL)]
    assert "rank 14 (ct17)" in next(r.message for r in results if r.status == Status.FAIL)


def test_per_rank_files_name_no_node():
    logs = L.node_logs(extra=L.missing_participant(stalled=14))
    lines = [ln for node in logs.values() for ln in node]
    texts = {f"rank{r}.log": "\n".join(ln for ln in lines if f"DP{r} " in ln or f"Engine {r:03d}" in ln) + "\n"
             for r in range(16)}
    results = judge_all(texts, {}, Layout(nodes=(), per_node=4), now=None, problems={})
    assert bad(results) == [("triage-collective", "node3", 2, Status.FAIL)]


def test_a_rank_outside_the_layout_is_said_to_be_outside_it(tmp_path):
    logs = L.node_logs(ranks={5: {"kv": "-4.67"}})
    logs[3] += [ln.replace("DP5 ", "DP999 ").replace("Engine 005", "Engine 999") for ln in logs[1] if "DP5 " in ln]
    texts = per_node_files(logs)
    for layout in (Layout(nodes=NAMES, per_node=4), Layout(nodes=(), per_node=4)):
        results = judge_all(texts, {}, layout, now=None, problems={})
        found = {(r.node, r.gpu, r.evidence.get("rank")) for r in results if r.status == Status.FAIL}
        assert found == {("ct14", 1, 5), (None, None, 999)}, found
        [outside] = [r for r in results if r.evidence.get("rank") == 999 and r.status == Status.FAIL]
        assert "rank 999 is outside the layout: 4 node(s) x 4 GPUs hold ranks 0-15" in outside.message
        assert not any("node249" in r.message or r.node == "node249" for r in results)
    for name, text in texts.items():
        (tmp_path / name).write_text(text)
    proc = subprocess.run([sys.executable, "-m", "k3doctor.cli", "triage", "--logs", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert "node249" not in proc.stdout and "ct14" in proc.stdout, proc.stdout + proc.stderr
