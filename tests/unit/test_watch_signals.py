"""The watch's live signals of §31.2 signals 2-4 without a node: LMCache and preemption pressure per rank, bad pages
and fatal CPER records newer than the watch's start (a stale one is not news), a busy GPU at low clocks or at idle
power (an idle GPU at low clocks is healthy); each condition once, on its node and GPU/rank, cleared when it goes."""
import json

import pytest

from k3doctor.parsers import ParseError
from k3doctor.parsers.dpm import current_mhz
from k3doctor.parsers.gpu_sysfs import parse_busy_percent, parse_microwatts, parse_vram_bytes
from k3doctor.readings import CommandReading, FileReading, Unavailable
from k3doctor.registry import REGISTRY, rule_rows
from k3doctor.rules.live import RULES
from k3doctor.watch.device import judge_device
from k3doctor.watch.engine import judge_engine
from k3doctor.watch.events import Tracker
from k3doctor.watch.gpu_events import judge_bad_pages, judge_cper
from k3doctor.watch.node_conditions import Settings, judge_node
from k3doctor.watch.sources import Sample

PRESSURE = ("lmcache_load_failures_total", "lmcache_loads_pending", "lmcache_loaded_tokens_total",
            "lmcache_saved_tokens_total", "preemptions_total")


def page(ranks: dict) -> CommandReading:
    """ATOM's page, every rank serving (4 running, progress moving): rank -> its pressure families' values."""
    lines = []
    for rank, values in ranks.items():
        lines += [f'atom:requests_running{{dp_rank="{rank}"}} 4',
                  f'atom:generation_tokens_total{{dp_rank="{rank}"}} {values.get("t", 0)}']
        lines += [f'atom:{name}{{dp_rank="{rank}"}} {values[name]}' for name in PRESSURE if name in values]
    return CommandReading("fetch", 0, "\n".join(lines) + "\n", "")


def healthy(t: float, **over) -> dict:
    return {"t": 10 * t, "lmcache_load_failures_total": 2, "lmcache_loads_pending": 0,
            "lmcache_loaded_tokens_total": 100 * t, "lmcache_saved_tokens_total": 300 * t, "preemptions_total": 7,
            **over}


def codes(found) -> list:
    return sorted((c.code, c.where) for c in found)


def run(rank1, times, stall=5.0) -> list:
    """(time, codes) of each interval: rank 0 healthy, rank 1 as ``rank1(t)`` says."""
    state, out = {}, []
    for t in times:
        out.append((t, codes(judge_engine("n1", state, page({"0": healthy(t), "1": rank1(t)}), t, stall))))
    return out


def test_a_healthy_serving_engine_with_old_counts_says_nothing():
    assert all(found == [] for _, found in run(healthy, range(0, 30, 2)))


def test_lmcache_load_failures_rising_are_named_on_their_rank_and_clear_after_the_window():
    said = run(lambda t: healthy(t, lmcache_load_failures_total=2 + (t >= 4) + (t >= 6)), range(0, 20, 2))
    assert [t for t, found in said if found == [("LMCACHE-LOAD-FAILURES", "dp_rank 1")]] == [4, 6, 8, 10]
    assert all(found == [] for t, found in said if t not in (4, 6, 8, 10))


def test_preemptions_rising_in_two_reads_of_the_window_and_one_preemption_is_not():
    once = run(lambda t: healthy(t, preemptions_total=7 + (t >= 4)), range(0, 20, 2))
    assert all(found == [] for _, found in once)
    rising = run(lambda t: healthy(t, preemptions_total=7 + max(0, t - 2)), range(0, 12, 2))
    assert [t for t, found in rising if found == [("PREEMPTIONS-RISING", "dp_rank 1")]] == [6, 8, 10]



def test_reads_slower_than_the_window_hold_a_counter_rising_at_every_read():
    """A loaded watcher reads every 6 s against a 5 s window: preemptions rising at every read stay one condition."""
    rising = run(lambda t: healthy(t, preemptions_total=7 + t), range(0, 48, 6))
    assert [found for _, found in rising][2:] == [[("PREEMPTIONS-RISING", "dp_rank 1")]] * 6
    once = run(lambda t: healthy(t, lmcache_load_failures_total=2 + (t >= 12)), range(0, 48, 6))
    assert [t for t, found in once if found] == [12, 18, 24]  # held for three reads, then cleared

def test_loads_pending_and_nothing_loaded_is_stuck_saves_without_loads_is_flat_named_once():
    stuck = run(lambda t: healthy(t, lmcache_loads_pending=3, lmcache_loaded_tokens_total=50), range(0, 10, 2))
    assert [found for t, found in stuck] == [[], [], [], *[[("LMCACHE-LOADS-STUCK", "dp_rank 1")]] * 2]
    flat = run(lambda t: healthy(t, lmcache_loaded_tokens_total=50), range(0, 10, 2))
    assert [found for t, found in flat][-1] == [("LMCACHE-LOADS-FLAT", "dp_rank 1")]
    unused = run(lambda t: healthy(t, lmcache_loaded_tokens_total=0, lmcache_saved_tokens_total=0), range(0, 10, 2))
    assert all(found == [] for _, found in unused)  # LMCache idle (nothing saved, nothing loaded): no finding


def test_a_restarted_engine_counters_starting_over_are_a_new_baseline():
    said = run(lambda t: healthy(t, lmcache_load_failures_total=50 if t < 4 else 0), range(0, 10, 2))
    assert all(found == [] for _, found in said)


def pages(lists: dict) -> dict:
    return {f"/sys/class/drm/{card}/device/ras/gpu_vram_bad_pages": FileReading("x", text)
            for card, text in lists.items()}


def line(i: int, flag: str = "R") -> str:
    return f"0x{0x1000 + i:08x} : 0x00001000 : {flag}\n"


def test_old_bad_pages_are_history_new_ones_are_named_on_their_card_unreadable_is_unknown():
    state = {}
    assert judge_bad_pages("n1", state, pages({"card0": line(0) * 3, "card1": ""})) == ([], [])
    found, unknown = judge_bad_pages("n1", state, pages({"card0": line(0) * 3, "card1": line(1, "P")}))
    assert codes(found) == [("GPU-BAD-PAGES-NEW", "card1")] and unknown == []
    assert "1 pending HBM page(s) newly listed" in found[0].message
    found, unknown = judge_bad_pages("n1", state, pages({"card0": "garbled\n", "card1": line(1, "P")}))
    assert codes(unknown) == [("BAD-PAGES-UNREAD", "card0")]
    assert judge_bad_pages("n1", {}, pages({"card0": None})) == ([], [])  # no list: the driver keeps none


def cper(*rows) -> CommandReading:
    head = "WARNING: No CPER files will be dumped unless --folder=<folder_name> is specified and cper entries exist.\n"
    return CommandReading("amd-smi", 0, head + "timestamp            gpu_id  severity\n" + "".join(
        f"{stamp}  {gpu}       FATAL\n" for stamp, gpu in rows), "")


def test_a_stale_fatal_cper_is_not_news_a_new_one_is_a_fail_on_its_gpu():
    stale = ("2026/12/06 13:00:00", 2)  # the ~15 h old AFID 19 record of §31.2
    state = {}
    assert judge_cper("n1", state, cper(stale)) == ([], None)
    assert judge_cper("n1", state, None) == ([], None)  # not read this interval
    found, _ = judge_cper("n1", state, cper(stale, ("2026/12/07 04:40:00", 1)))
    assert codes(found) == [("GPU-CPER-FATAL-NEW", "amd-smi GPU 1")] and found[0].severity == "fail"
    assert "2026-12-07 04:40:00 UTC" in found[0].message


def test_an_unread_cper_listing_is_unknown_until_the_next_read_and_never_a_baseline():
    state = {}
    _, unknown = judge_cper("n1", state, CommandReading("amd-smi", 124, "", "", timed_out=True))
    assert unknown.code == "CPER-UNREAD" and "no answer in time" in unknown.message
    assert judge_cper("n1", state, None)[1] == unknown  # held between reads: no start/clear flapping
    assert judge_cper("n1", state, cper(("2026/12/06 13:00:00", 0))) == ([], None)  # the first read: baseline
    _, unknown = judge_cper("n1", state, CommandReading("amd-smi", 0, "timestamp gpu_id severity\n?? junk\n", ""))
    assert unknown.code == "CPER-UNREAD"


def device(cards: dict) -> dict:
    """The device globs of a node: card -> (busy %, pp_dpm_sclk text, watts, cap watts)."""
    got = {"busy": {}, "sclk": {}, "power": {}}
    for card, (busy, sclk, watts, cap) in cards.items():
        dev = f"/sys/class/drm/{card}/device"
        got["busy"][f"{dev}/gpu_busy_percent"] = FileReading("x", f"{busy}\n")
        got["sclk"][f"{dev}/pp_dpm_sclk"] = FileReading("x", sclk)
        if watts is not None:
            got["power"][f"{dev}/hwmon/hwmon3/power1_average"] = FileReading("x", f"{watts * 10**6}\n")
        if cap is not None:
            got["power"][f"{dev}/hwmon/hwmon3/power1_cap"] = FileReading("x", f"{cap * 10**6}\n")
    return got


def sclk(current: str) -> str:
    levels = {"S": 19, "0": 500, "1": 1600, "2": 2400}
    return "".join(f"{k}: {v}Mhz {'*' if k == current else ''}\n" for k, v in levels.items())


def test_device_health_under_load_needs_two_reads_and_idle_at_low_clocks_is_healthy():
    state = {}
    idle = {"card0": (0, sclk("S"), 140, 1000), "card1": (3, sclk("0"), 150, 1000)}
    working = {"card2": (100, sclk("2"), 650, 1000)}
    throttled = {"card3": (97, sclk("0"), 400, 1000)}
    stalled = {"card4": (100, sclk("S"), 140, 1000)}
    cards = {**idle, **working, **throttled, **stalled}
    assert judge_device("n1", state, device(cards)) == []  # one read is not enough: a clock ramping up
    found = {c.code: c for c in judge_device("n1", state, device(cards))}
    assert {code: c.where for code, c in found.items()} == {"GPU-BUSY-AT-IDLE-POWER": "card4",
                                                             "GPU-CLOCKS-LOW-UNDER-LOAD": "card3"}
    assert "97 % busy at 500 MHz, under half its top gfx clock 2400 MHz" in found["GPU-CLOCKS-LOW-UNDER-LOAD"].message
    assert "100 % busy while drawing 140 W of its 1000 W cap" in found["GPU-BUSY-AT-IDLE-POWER"].message
    assert judge_device("n1", state, device({**cards, "card3": (97, sclk("2"), 600, 1000)}))[0].where == "card4"


def test_device_without_a_cap_judges_clocks_only_and_garbled_values_are_unknown():
    state = {}
    cards = {"card0": (100, sclk("S"), 140, None)}
    judge_device("n1", state, device(cards))
    assert codes(judge_device("n1", state, device(cards))) == [("GPU-CLOCKS-LOW-UNDER-LOAD", "card0")]
    found = judge_device("n1", state, device({"card0": (250, sclk("S"), 140, None)}))
    assert codes(found) == [("DEVICE-UNREAD", "card0")] and found[0].severity == "unknown"
    found = judge_device("n1", {}, {"busy": Unavailable("timed out"), "sclk": {}, "power": {}})
    assert codes(found) == [("DEVICE-UNREAD", "node")]



def vram(used_gib: dict, total_gib: int = 432) -> dict:
    out = {}
    for card, used in used_gib.items():
        dev = f"/sys/class/drm/{card}/device"
        text = used if isinstance(used, str) else f"{int(used * 2**30)}\n"
        out[f"{dev}/mem_info_vram_used"] = FileReading("x", text)
        out[f"{dev}/mem_info_vram_total"] = FileReading("x", f"{total_gib * 2**30}\n")
    return {"vram": out}


def test_vram_held_after_the_engine_exited_is_named_per_card_while_it_runs_it_is_its_own():
    held = vram({"card0": 0.2, "card1": 60})  # card1: ~14 % still in use (sglang PR #30431's 13-16 %)
    running = {"engine_exited": False}
    assert judge_device("n1", running, held) == [] and judge_device("n1", running, held) == []
    state = {"engine_exited": True}
    assert judge_device("n1", state, held) == []  # the driver frees VRAM as the last file closes: one read of grace
    found = judge_device("n1", state, held)
    assert codes(found) == [("GPU-VRAM-HELD-AFTER-EXIT", "card1")]
    assert "60.0 of 432 GiB VRAM still in use after the engine's processes exited (> 10 %)" in found[0].message
    assert judge_device("n1", state, vram({"card0": 0.2, "card1": 0.2})) == []  # freed: cleared
    assert codes(judge_device("n1", state, vram({"card1": "lots"}))) == [("DEVICE-UNREAD", "card1")]


def test_the_process_judge_says_when_the_engine_it_saw_has_exited():
    from k3doctor.watch.hardware import judge_processes

    def ps(rows):
        text = "".join(f"{pid} {stat} python -m atom.entrypoints x\n" for pid, stat in rows)
        return CommandReading("ps", 0, text, "")

    state = {}
    judge_processes("n1", state, ps([]), "atom")
    assert state["engine_exited"] is False  # never saw one: nothing exited
    judge_processes("n1", state, ps([(7, "Sl")]), "atom")
    assert state["engine_exited"] is False
    judge_processes("n1", state, ps([(7, "Z")]), "atom")
    assert state["engine_exited"] is False  # defunct still holds its files: the §10 wedge, not an exit
    judge_processes("n1", state, ps([]), "atom")
    assert state["engine_exited"] is True

def test_parsers_refuse_what_is_not_a_value():
    assert current_mhz(sclk("1"), "x") == 1600 and current_mhz(sclk("S"), "x") == 19
    assert parse_busy_percent("100\n") == 100 and parse_microwatts("140000000\n", "p") == 140.0
    assert parse_vram_bytes("463856467968\n", "v") == 432 * 2**30
    for bad in ("", "-1", "1e9", "12345678901234567"):
        with pytest.raises(ParseError):
            parse_vram_bytes(bad, "mem_info_vram_used")
    for bad in (sclk("none"), "0: 500Mhz *\n1: 900Mhz *\n", ""):
        with pytest.raises(ParseError):
            current_mhz(bad, "pp_dpm_sclk")
    for bad in ("101", "-1", "", "N/A"):
        with pytest.raises(ParseError):
            parse_busy_percent(bad)
    for bad in ("", "12.5", str(20_000 * 10**6)):
        with pytest.raises(ParseError):
            parse_microwatts(bad, "power1_average")


def test_live_rules_are_rows_whose_remediation_explains_them():
    from k3doctor.registry import load_checks

    load_checks()  # the checks whose remediations the live rules reuse

    for rule in RULES:
        assert rule.remediation in REGISTRY.remediations, rule
        assert f"`k3doctor explain {rule.remediation}`" in REGISTRY.remediations[rule.name].text  # explain ROW
    assert {r.name: r.remediation for r in RULES}["GPU-CPER-FATAL-NEW"] == "GPU-CPER-FATAL"
    # `k3doctor explain` lists the watch's rows beside the check that raises the same remediation
    assert "watch rule GPU-CPER-FATAL-NEW" in rule_rows("GPU-CPER-FATAL")
    assert rule_rows("WATCH-LMCACHE") == [f"watch rule {code}" for code in (
        "LMCACHE-LOAD-FAILURES", "LMCACHE-LOADS-STUCK", "LMCACHE-LOADS-FLAT")]


def test_through_the_node_judge_a_new_page_is_one_event_held_across_a_reboot():
    tracker, state, settings = Tracker(), {}, Settings()

    def sample(t, lists, boot="boot-a"):
        got = {"boot_id": FileReading("b", boot + "\n"), "ras": {},
               "kernel": CommandReading("dmesg", 0, "[    1.000000] up\n", ""),
               "procs": CommandReading("ps", 0, "1 Ss /sbin/init\n", ""), "bad_pages": pages(lists)}
        found = judge_node("n1", state, Sample("n1", t, readings=got), tracker.of("n1"), settings)
        return [(e["event"], e["code"], e["where"]) for e in tracker.update("n1", found, t)]

    assert sample(0, {"card0": line(0)}) == []
    assert sample(1, {"card0": line(0) + line(1)}) == [("start", "GPU-BAD-PAGES-NEW", "card0")]
    assert sample(2, {"card0": line(0) + line(1)}) == []
    # the board keeps its pages: still news against the watch's start after a reboot, and not said twice
    assert sample(3, {"card0": line(0) + line(1)}, boot="boot-b") == [("start", "NODE-REBOOTED", "node")]


@pytest.mark.parametrize("code, drained", [("GPU-CPER-FATAL-NEW", True), ("GPU-BAD-PAGES-NEW", False),
                                           ("LMCACHE-LOAD-FAILURES", False), ("PREEMPTIONS-RISING", False),
                                           ("GPU-CLOCKS-LOW-UNDER-LOAD", False), ("GPU-BUSY-AT-IDLE-POWER", False)])
def test_only_a_new_fatal_cper_drains_and_each_event_points_to_its_rows_remediation(code, drained):
    from k3doctor.rules.live import BY_CODE
    from k3doctor.watch.actions import drains
    from k3doctor.watch.webhook import fix_for

    rule = BY_CODE[code]
    event = {"time": 1.0, "event": "start", "code": code, "node": "n1", "where": "card1", "severity": rule.severity,
             "message": "m", "section": rule.section}
    assert drains(event) is drained
    assert fix_for(event) == f"k3doctor explain {rule.remediation} (reference {rule.section})"


def tail_reading(offset: int, text: str, rc: int = 0, stderr: str = "") -> CommandReading:
    return CommandReading("tail", rc, f"{offset}\n{text}" if rc == 0 else "", stderr)


def test_new_server_log_lines_are_judged_by_triages_rows_on_their_rank():
    from k3doctor.watch.server_log import judge_server_log

    assert judge_server_log("n1", None) == ([], None)  # no log named
    assert judge_server_log("n1", tail_reading(4096, "")) == ([], None)  # the first read: the size only
    text = ("(EngineCore_DP3 pid=41) INFO: Avg prompt throughput: 0.0 tokens/s, Running: 4 reqs\n"
            "(EngineCore_DP3 pid=41) ERROR ModelRunner exited with exitcode=-6\n"
            "INFO:     Application startup complete.\n"
            "Memory access fault by GPU node-2 (Agent handle: 0x55d0c2a1b7e0) on address (nil). Reason: unknown.\n")
    found, unknown = judge_server_log("n1", tail_reading(8192, text))
    assert unknown is None
    assert codes(found) == [("TRIAGE-ROCR-GPU-FAULT", "server log"), ("TRIAGE-RUNNER-DIED", "rank 3")]
    died = next(c for c in found if c.where == "rank 3")
    assert died.severity == "fail" and died.message.startswith("rank 3: ModelRunner died: ")
    from k3doctor.watch.webhook import fix_for

    assert fix_for({**died.to_json(), "event": "start"}) == "k3doctor explain TRIAGE-RUNNER-DIED (reference §10, §16)"


def test_a_secret_in_a_judged_server_log_line_never_reaches_the_event():
    """A rule's message quotes its line, and events go to stdout and webhooks: the tail is redacted first."""
    from k3doctor.watch.server_log import judge_server_log

    text = ("(EngineCore_DP3 pid=41) ERROR ModelRunner exited with exitcode=-6 "
            "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz012345 https://user:s3cretpw@hub.example/models\n")
    found, unknown = judge_server_log("n1", tail_reading(8192, text))
    assert unknown is None and codes(found) == [("TRIAGE-RUNNER-DIED", "rank 3")]
    event = json.dumps(found[0].to_json())
    assert "hf_abcdefghijklmnopqrstuvwxyz012345" not in event and "s3cretpw" not in event


def test_an_unreadable_server_log_is_unknown_and_the_reader_resumes_where_it_stopped():
    from k3doctor.watch.server_log import judge_server_log, next_offset

    _, unknown = judge_server_log("n1", tail_reading(0, "", rc=2, stderr="[Errno 2] No such file: '/x.log'"))
    assert (unknown.code, unknown.where, unknown.severity) == ("SERVER-LOG-UNREAD", "server log", "unknown")
    assert "No such file" in unknown.message
    _, unknown = judge_server_log("n1", CommandReading("tail", 0, "not a position\n", ""))
    assert unknown.code == "SERVER-LOG-UNREAD"
    assert next_offset(tail_reading(77, "x\n"), 5) == 77 and next_offset(tail_reading(0, "", rc=2), 5) == 5


def test_the_tail_reader_gives_whole_new_lines_from_its_position_and_restarts_a_rotated_log(tmp_path):
    import subprocess
    import sys

    from k3doctor.watch.server_log import TAIL

    log = tmp_path / "server.log"
    log.write_text("old line\n")

    def read(offset):
        done = subprocess.run([sys.executable, "-I", "-S", "-c", TAIL, str(log), str(offset), "64"],
                              capture_output=True, text=True, timeout=30)
        return done.returncode, done.stdout

    assert read(-1) == (0, "9\n")  # the first read: where the log ends, no line
    with open(log, "a") as out:
        out.write("new one\nnew two\npartial")
    assert read(9) == (0, "25\nnew one\nnew two\n")  # a line still being written waits for its newline
    log.write_text("rotated\n")
    assert read(25) == (0, "8\nrotated\n")
    log.write_text("x" * 100)
    assert read(0) == (0, "64\n" + "x" * 64)  # a line longer than the cap is read in pieces, never stuck
    log.unlink()
    assert read(0)[0] == 2  # no log: the reader says so (UNKNOWN), never "no new line"


@pytest.mark.parametrize("args, said", [
    (["--server-log", "relative.log"], "expected /absolute/path or NODE=/absolute/path"),
    (["--server-log", "n1="], "expected /absolute/path or NODE=/absolute/path"),
    (["--once", "--state", "/tmp/k3doctor-watch-state.json", "--server-log", "/x.log"], "--server-log does not apply"),
    (["--cper-every", "0"], "--cper-every"),
])
def test_the_new_options_refuse_bad_input_in_one_line(args, said):
    from click.testing import CliRunner

    from k3doctor.cli.watch import watch_cmd

    out = CliRunner().invoke(watch_cmd, args)
    assert out.exit_code != 0 and said in out.output, out.output
