"""What triage reads off files or a bundle is bounded: members, bytes in all, memory per rank (not per
line), and the time local work may take. An 8.4 kB .tar.gz with one 8 MiB member of `DP0` lines cost
811 MB and 37 s in `judge`; a 255 kB bundle of such members projected to ~26 GB."""
import io
import json
import tarfile
import tracemalloc

import pytest

from k3doctor import triage
from k3doctor.deadline import Deadline
from k3doctor.results import Status
from k3doctor.triage import bundle
from k3doctor.triage.rank_logs import Layout


def make_bundle(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in [("manifest.json", json.dumps({"schema": bundle.SCHEMA, "layout": {
                "nodes": ["ct13"], "per_node": 4}, "now": None, "problems": {}}).encode()), *members]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def test_judging_millions_of_lines_keeps_memory_per_rank_not_per_line(tmp_path):
    _, texts, dumps, _ = bundle.read(make_bundle(tmp_path / "amp.tar.gz", [("logs/ct13", b"DP0\n" * (1 << 19))]))
    tracemalloc.start()
    try:
        texts, _ = triage.redacted(texts)  # as `triage --logs` does first
        results = triage.judge_all(texts, dumps, Layout(nodes=("ct13",)), now=None, problems={})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak >> 20} MiB"  # ~400 B per line held before: 200 MB here
    assert [r.status for r in results] == [Status.PASS]


@pytest.mark.parametrize("members", [
    [(f"logs/n{i}", b"DP0\n") for i in range(bundle.MAX_MEMBERS + 1)],
    [(f"logs/n{i}", b"\n" * bundle.MAX_MEMBER_BYTES) for i in range(bundle.MAX_TOTAL_BYTES // bundle.MAX_MEMBER_BYTES
                                                                       + 1)],
], ids=["members", "total"])
def test_a_bundle_past_its_member_or_total_cap_is_refused(tmp_path, members):
    with pytest.raises(bundle.BundleError, match="members or"):
        bundle.read(make_bundle(tmp_path / "big.tar.gz", members))


def test_a_log_directory_past_its_total_is_an_error_for_the_files_over_it(tmp_path, monkeypatch):
    monkeypatch.setattr(triage, "MAX_TOTAL_LOG_BYTES", 10)
    (tmp_path / "a.log").write_text("DP0 x\n")
    (tmp_path / "b.log").write_text("DP1 y\n")
    texts, problems = triage.read_log_dir(str(tmp_path))
    assert list(texts) == ["a.log"] and problems == ["b.log: past 0 MiB of logs in all: pass each node's tail"]


def test_judging_stops_at_its_deadline_with_an_error_not_a_partial_pass():
    texts = {"ct13": "DP0\n" * 70000}
    expired = Deadline(0.1)
    expired.at = 0.0
    parsed = triage.parse_sources(texts, {})
    results = triage.triage_results(parsed, Layout(nodes=("ct13",)), now=None, problems={}, deadline=expired)
    assert [(r.status, "deadline" in r.message) for r in results] == [(Status.ERROR, True)]


@pytest.mark.parametrize("now", [float("nan"), float("inf"), 1e18, -5, {"ct13": float("nan")}, "soon"])
def test_a_bundle_whose_clock_is_not_a_time_is_refused(tmp_path, now):
    path = tmp_path / "b.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        data = json.dumps({"schema": bundle.SCHEMA, "layout": {"nodes": ["ct13"], "per_node": 4}, "now": now}).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(bundle.BundleError, match="not a time"):
        bundle.read(str(path))
