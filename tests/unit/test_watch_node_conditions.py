"""The watch's judgement without a node: the metrics parser, forward progress per rank (§31.2 signal 1: a long
prefill is progress, a fresh timestamp is not), KV pressure and imbalance (§20), not serving vs down, events
once per condition, the Prometheus exposition and the NPD state file."""
import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from k3doctor.parsers import ParseError
from k3doctor.parsers.atom_metrics import parse_metrics
from k3doctor.readings import CommandReading, FileReading
from k3doctor.watch.engine import judge_engine
from k3doctor.watch.events import Condition, Tracker
from k3doctor.watch.node_conditions import Settings, judge_node
from k3doctor.watch.loop import StateFileError, load_state
from k3doctor.watch.render import exposition, live_line, npd_message
from k3doctor.watch.sources import FETCH_REFUSED, FETCH_TIMEOUT, Sample


def page(ranks: dict, stamp: float = 1.0) -> str:
    """ATOM's page: rank -> (running, generated, prompt, finished, kv, waiting)."""
    names = ("requests_running", "generation_tokens_total", "prompt_tokens_total", "requests_finished_total",
             "kv_cache_usage_ratio", "requests_waiting")
    lines = [f'atom:{name}{{dp_rank="{rank}"}} {values[i]}' for rank, values in ranks.items()
             for i, name in enumerate(names)]
    return "\n".join(["# TYPE atom:requests_running gauge", *lines,
                      f"atom:metrics_last_refresh_timestamp_seconds {stamp}"]) + "\n"


def read(text: str, rc: int = 0) -> CommandReading:
    return CommandReading("fetch", rc, text, "")


def codes(found) -> list:
    return sorted((c.code, c.where) for c in found)


def test_parser_reads_samples_and_refuses_what_is_not_a_page():
    got = parse_metrics('# HELP x y\natom:kv_cache_usage_ratio{dp_rank="0",m="a\\"b"} 0.5\nup 1 1700000000\n')
    assert got["atom:kv_cache_usage_ratio"] == [({"dp_rank": "0", "m": 'a"b'}, 0.5)] and got["up"] == [({}, 1.0)]
    for bad in ("<html>upstream error</html>\n", "atom:x 12", "atom:x abc\n", "# only comments\n", ""):
        with pytest.raises(ParseError):
            parse_metrics(bad)


def test_a_rank_frozen_with_work_running_is_stalled_after_the_threshold_and_named():
    state = {}
    healthy = {"0": (4, 100, 10, 5, 0.3, 0), "1": (4, 100, 10, 5, 0.3, 0)}
    assert judge_engine("n1", state, read(page(healthy)), 0.0, 5) == []
    for t in (2.0, 4.0):  # rank 1 frozen, timestamp fresh: not yet
        moved = {"0": (4, 100 + 10 * t, 10, 5, 0.3, 0), "1": (4, 100, 10, 5, 0.3, 0)}
        assert judge_engine("n1", state, read(page(moved, stamp=t)), t, 5) == []
    moved = {"0": (4, 200, 10, 5, 0.3, 0), "1": (4, 100, 10, 5, 0.3, 0)}
    found = judge_engine("n1", state, read(page(moved, stamp=6)), 6.0, 5)
    assert codes(found) == [("ENGINE-STALLED", "dp_rank 1")] and "for 6s" in found[0].message


def test_long_prefill_and_an_idle_engine_are_not_stalls():
    state = {}
    for t in range(0, 20, 2):  # generated tokens flat, prompt tokens moving: a long prefill
        assert judge_engine("n1", state, read(page({"0": (1, 100, 1000 * t, 5, 0.3, 0)})), float(t), 5) == []
    state = {}
    for t in range(0, 20, 2):  # nothing running, nothing moving: idle
        assert judge_engine("n1", state, read(page({"0": (0, 100, 10, 5, 0.3, 0)})), float(t), 5) == []


def test_kv_pressure_needs_a_growing_queue_and_one_full_rank_among_idle_ones_is_imbalance():
    state = {}
    ranks = {"0": (4, 1, 1, 1, 0.97, 0), "1": (4, 1, 1, 1, 0.2, 0), "2": (4, 1, 1, 1, 0.1, 0)}
    assert codes(judge_engine("n1", state, read(page(ranks)), 0.0, 60)) == [("KV-RANK-IMBALANCE", "dp_rank 0")]
    ranks["0"] = (4, 2, 2, 2, 0.97, 3)
    assert codes(judge_engine("n1", state, read(page(ranks)), 1.0, 60)) == [
        ("KV-PRESSURE", "dp_rank 0"), ("KV-RANK-IMBALANCE", "dp_rank 0")]


def test_never_served_is_quiet_refused_after_serving_is_down_no_answer_is_unknown():
    state = {}
    assert judge_engine("n1", state, read("", FETCH_REFUSED), 0.0, 60) == []
    judge_engine("n1", state, read(page({"0": (0, 1, 1, 1, 0.1, 0)})), 1.0, 60)
    assert codes(judge_engine("n1", state, read("", FETCH_REFUSED), 2.0, 60)) == [("ENGINE-DOWN", "engine")]
    busy = judge_engine("n1", state, read("", FETCH_TIMEOUT), 3.0, 60)
    assert [(c.code, c.severity) for c in busy] == [("METRICS-NO-ANSWER", "unknown")]
    garbled = judge_engine("n1", state, read("<html>oops</html>\n"), 4.0, 60)
    assert [(c.code, c.severity) for c in garbled] == [("METRICS-UNREAD", "unknown")]


def sample(at: float, dmesg: str, ras: str = "ue: 0\nce: 0\n", boot: str = "b1") -> Sample:
    path = "/sys/class/drm/card3/device/ras/umc_err_count"
    return Sample("n1", at, readings={
        "boot_id": FileReading("/proc/sys/kernel/random/boot_id", boot + "\n"),
        "kernel": CommandReading("dmesg", 0, dmesg, ""), "ras": {path: FileReading(path, ras)},
        "procs": CommandReading("ps", 0, "1 Ss /sbin/init\n", "")})


def test_old_kernel_lines_are_baseline_new_ones_are_judged_and_a_reboot_starts_over():
    old = "[   10.000000] amdgpu 0000:05:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=1, emitted seq=2\n"
    state, settings = {}, Settings()
    assert judge_node("n1", state, sample(0, old), [], settings) == []
    new = old + "[   99.000000] amdgpu 0000:06:00.0: amdgpu: GPU reset begin!\n"
    found = judge_node("n1", state, sample(1, new, ras="ue: 2\nce: 0\n"), [], settings)
    assert codes(found) == [("KERNEL-GPU-RESET", "gpu 0000:06:00.0"), ("RAS-UE-RISING", "card3")]
    assert codes(judge_node("n1", state, sample(2, new, ras="ue: 2\nce: 0\n"), [], settings)) == codes(found)
    rebooted = judge_node("n1", state, sample(3, old, boot="b2"), [], settings)
    assert codes(rebooted) == [("KERNEL-RING-TIMEOUT", "gpu 0000:05:00.0"), ("NODE-REBOOTED", "node")]


def test_an_unread_node_is_unknown_and_keeps_its_faults():
    held = [Condition("RAS-UE-RISING", "n1", "card3", "fail", "x")]
    found = judge_node("n1", {}, Sample("n1", 0, "connection refused"), held, Settings())
    assert codes(found) == [("NODE-UNREAD", "node"), ("RAS-UE-RISING", "card3")]


def test_events_once_per_condition_start_and_clear():
    tracker, cond = Tracker(), Condition("ENGINE-STALLED", "n1", "dp_rank 1", "fail", "for 61s")
    assert [e["event"] for e in tracker.update("n1", [cond], 1)] == ["start"]
    longer = Condition("ENGINE-STALLED", "n1", "dp_rank 1", "fail", "for 71s")
    assert tracker.update("n1", [longer], 2) == [] and tracker.update("n2", [], 2) == []
    assert [e["event"] for e in tracker.update("n1", [], 3)] == ["clear"]
    assert live_line(tracker.update("n1", [cond], 4)[0]).endswith("FAIL    n1 dp_rank 1  ENGINE-STALLED: for 61s")


def test_exposition_parses_and_says_each_target_with_its_reason():
    tracker = Tracker()
    tracker.update("n1", [Condition("ENGINE-STALLED", "n1", "dp_rank 1", "fail", "x"),
                          Condition("METRICS-NO-ANSWER", "n1", "engine", "unknown", "y")], 1)
    nodes = {"n1": {"up": True, "last_success": 1700000000.5, "serving": True},
             "n2": {"up": False, "last_success": None, "serving": False}}
    families = {f.name: f for f in text_string_to_metric_families(exposition(tracker, nodes))}
    health = {(s.labels["node"], s.labels["target"], s.labels["reason"]): s.value
              for s in families["k3doctor_watch_health"].samples}
    assert health == {("n1", "dp_rank 1", "ENGINE-STALLED"): 0}  # n2 not read: never said healthy (§31.2 item 5)
    assert {s.labels["node"]: s.value for s in families["k3doctor_watch_up"].samples} == {"n1": 1, "n2": 0}
    assert [s.value for s in families["k3doctor_watch_last_success_timestamp_seconds"].samples] == [1700000000.5]
    assert npd_message(tracker, 1, 2).startswith("FAIL n1 dp_rank 1 ENGINE-STALLED: x (+1 more)")


def test_state_file_round_trip_and_refusal(tmp_path):
    path = tmp_path / "state.json"
    assert load_state(str(path), ["n1"])[1].active == {}
    cond = Condition("RAS-UE-RISING", "n1", "card3", "fail", "x")
    path.write_text(json.dumps({"version": 1, "nodes": {"n1": {"baseline": True}}, "active": [cond.to_json()]}))
    states, tracker = load_state(str(path), ["n1"])
    assert states == {"n1": {"baseline": True}} and list(tracker.active.values()) == [cond]
    path.write_text("{not json")
    with pytest.raises(StateFileError):
        load_state(str(path), ["n1"])


class _Tty:
    def isatty(self):
        return True


def test_live_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch):
    from k3doctor.watch.render import Sink

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert Sink("live", _Tty()).color and not Sink("jsonl", _Tty()).color
    monkeypatch.setenv("NO_COLOR", "")
    assert not Sink("live", _Tty()).color


class BrokenByCancel:
    """A transport whose command breaks because the watch's stop cancelled it (the boundary, faked)."""

    closed = 0

    def connect(self):
        from k3doctor.transport.base import TransportError

        raise TransportError("cancelled: the run is stopping")

    def cancel(self):
        pass

    def close(self):
        BrokenByCancel.closed += 1


def test_a_read_broken_by_the_stop_leaves_the_connection_to_the_stop():
    """Closing it there raced the stop's own session on it ("could not stop k3doctor's processes")."""
    from k3doctor.watch.sources import NodeSource

    source = NodeSource("n1", BrokenByCancel, metrics_url=None, read_timeout_s=1)
    source.read()  # a node lost while watching: closed, retried later
    assert BrokenByCancel.closed == 1
    source = NodeSource("n1", BrokenByCancel, metrics_url=None, read_timeout_s=1)
    source.transport = BrokenByCancel()
    source.cancel()
    assert source.read().problem == "the watch stopped" and BrokenByCancel.closed == 1
    source.close()
    assert BrokenByCancel.closed == 2


def test_a_stall_is_held_while_the_metrics_do_not_answer_never_cleared_by_unknown():
    state, settings = {}, Settings(stall_s=5)
    base = sample(0, "[    1.000000] boot\n")

    def at(t: float, reading) -> Sample:
        return Sample("n1", t, readings={**base.readings, "metrics": reading})

    frozen = read(page({"0": (4, 100, 10, 5, 0.3, 0), "1": (4, 100, 10, 5, 0.3, 0)}))
    held = []
    for t in (0.0, 3.0, 6.0):
        held = judge_node("n1", state, at(t, frozen), held, settings)
    assert codes(held) == [("ENGINE-STALLED", "dp_rank 0"), ("ENGINE-STALLED", "dp_rank 1")]
    busy = judge_node("n1", state, at(9.0, read("", FETCH_TIMEOUT)), held, settings)
    assert codes(busy) == [("ENGINE-STALLED", "dp_rank 0"), ("ENGINE-STALLED", "dp_rank 1"),
                           ("METRICS-NO-ANSWER", "engine")]
    again = judge_node("n1", state, at(12.0, frozen), busy, settings)
    assert codes(again) == codes(held) and "for 12s" in again[0].message  # frozen since 0 s: the same stall
