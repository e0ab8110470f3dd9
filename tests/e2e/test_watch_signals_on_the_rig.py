"""The watch's live signals of §31.2 signals 2-4 end to end, over real sshd (light nodes), the rig's ATOM engine fake
and the node's fake sysfs and amd-smi: LMCache failing or stuck and preemptions rising on one DP rank, a page
retired and a fatal CPER record written while watched, a busy GPU at low clocks or at idle power - each named once
on its node and GPU/rank; a stale CPER record, an old bad page and a GPU busy at full clock say nothing. VRAM still
held once the engine exited is named on its card (the last test: its engine dies)."""
from __future__ import annotations

import json
import re
import time

import pytest
from k3rig.live_faults import add_fatal_cper, hold_vram, retire_page, set_gpu_load

from tests.e2e import test_watch as base
from tests.e2e.test_watch import Watching, inventory, tree

pytestmark = pytest.mark.e2e
rack, engines = base.rack, base.engines  # test_watch's fixtures: this module gets its own rack and engines
WITHIN_S = 15  # generous: the detection times are the bench's targets, not what a shared CI machine promises


def ports(engines) -> list:
    """The engines' ports, and their processes by their control files' folder: the rig's nodes share the host's
    PIDs, where other tests' (and other checkouts') engines come and go."""
    folder = re.escape(str(next(iter(engines.values()))[1].parent))
    return [w for name, (port, _) in engines.items() for w in ("--metrics-port", f"{name}={port}")] + [
        "--engine-process", f"k3rig[.]model_server --ranks .* --control {folder}/"]


def test_pressure_new_gpu_events_and_device_health_are_named_once_and_history_is_not(rack, engines, tmp_path):
    first, second = (n for n, _, _ in rack.hosts)
    # before the watch: history, not news
    add_fatal_cper(tree(rack, second), gpu=1, at=time.time() - 15 * 3600)  # §31.2: the ~15 h old AFID 19 record
    retire_page(tree(rack, first), card=0)
    prom = tmp_path / "watch.prom"
    watch = Watching("--nodes", inventory(rack, tmp_path, {first, second}), "--interval", "1", "--stall", "4",
                     "--cper-every", "1", "--format", "jsonl", "--prom-file", prom, *ports(engines))
    try:
        watch.started(prom)
        set_gpu_load(tree(rack, first), card=0, busy_pct=100, sclk_mhz=2400, watts=650)  # working: healthy
        time.sleep(3)  # a serving cluster, one GPU at work: nothing to say
        assert watch.proc.poll() is None, watch.proc.stderr.read()
        assert watch.drain() == []

        engines[first][1].write_text(json.dumps({"lmcache_fail": [1], "preempt": [3]}))
        engines[second][1].write_text(json.dumps({"lmcache_stuck": [0]}))
        watch.wait_for("LMCACHE-LOAD-FAILURES", first, "dp_rank 1", within_s=WITHIN_S)
        watch.wait_for("PREEMPTIONS-RISING", first, "dp_rank 3", within_s=WITHIN_S)
        retire_page(tree(rack, second), card=2, flag="P")
        watch.wait_for("GPU-BAD-PAGES-NEW", second, "card2", within_s=WITHIN_S)
        add_fatal_cper(tree(rack, second), gpu=1)
        watch.wait_for("GPU-CPER-FATAL-NEW", second, "amd-smi GPU 1", within_s=WITHIN_S)
        set_gpu_load(tree(rack, first), card=1, busy_pct=98, sclk_mhz=500, watts=400)
        set_gpu_load(tree(rack, first), card=3, busy_pct=100, sclk_mhz=None, watts=140)
        watch.wait_for("GPU-CLOCKS-LOW-UNDER-LOAD", first, "card1", within_s=WITHIN_S)
        watch.wait_for("GPU-BUSY-AT-IDLE-POWER", first, "card3", within_s=WITHIN_S)
        watch.wait_for("LMCACHE-LOADS-STUCK", second, "dp_rank 0", within_s=WITHIN_S)

        engines[first][1].write_text("{}")  # the pressure ends: cleared once the window passes without it
        engines[second][1].write_text("{}")
        set_gpu_load(tree(rack, first), card=1, busy_pct=0)
        watch.wait_for("LMCACHE-LOAD-FAILURES", first, "dp_rank 1", within_s=WITHIN_S, kind="clear")
        watch.wait_for("GPU-CLOCKS-LOW-UNDER-LOAD", first, "card1", within_s=WITHIN_S, kind="clear")
        time.sleep(1)
    finally:
        for name in (first, second):
            engines[name][1].write_text("{}")
        for card in (0, 1, 3):
            set_gpu_load(tree(rack, first), card=card, busy_pct=0)
        rc, events, err = watch.stop()
    starts = sorted((e["code"], e["node"], e["where"]) for e in events if e["event"] == "start")
    assert starts == sorted([
        ("LMCACHE-LOAD-FAILURES", first, "dp_rank 1"), ("PREEMPTIONS-RISING", first, "dp_rank 3"),
        ("LMCACHE-LOADS-STUCK", second, "dp_rank 0"), ("GPU-BAD-PAGES-NEW", second, "card2"),
        ("GPU-CPER-FATAL-NEW", second, "amd-smi GPU 1"), ("GPU-CLOCKS-LOW-UNDER-LOAD", first, "card1"),
        ("GPU-BUSY-AT-IDLE-POWER", first, "card3")]), starts
    cleared = {(e["code"], e["where"]) for e in events if e["event"] == "clear"}
    assert {("LMCACHE-LOAD-FAILURES", "dp_rank 1"), ("GPU-CLOCKS-LOW-UNDER-LOAD", "card1")} <= cleared
    assert ("GPU-CPER-FATAL-NEW", "amd-smi GPU 1") not in cleared  # a fact of this boot: it stays
    assert (rc, err) == (1, "")



def test_new_server_log_lines_are_judged_by_triages_rows_on_their_rank_old_ones_are_not(rack, engines, tmp_path):
    """--server-log: a fatal line written before the watch is history; a ModelRunner's death written while
    watched is named on its node and rank, once, by triage's own row; a missing log on the other node is UNKNOWN."""
    first, second = (n for n, _, _ in rack.hosts)
    log = tree(rack, first) / "root/atom-server.log"
    log.write_text("(EngineCore_DP1 pid=40) ERROR ModelRunner exited with exitcode=-6\n")  # an earlier run's
    prom = tmp_path / "watch.prom"
    watch = Watching("--nodes", inventory(rack, tmp_path, {first, second}), "--interval", "1", "--stall", "4",
                     "--format", "jsonl", "--prom-file", prom, "--server-log", f"{first}=/root/atom-server.log",
                     "--server-log", f"{second}=/root/no-such-server.log", *ports(engines))
    try:
        watch.started(prom)
        watch.wait_for("SERVER-LOG-UNREAD", second, "server log", within_s=WITHIN_S)
        time.sleep(1.5)
        with open(log, "a") as out:
            out.write("(EngineCore_DP2 pid=41) INFO: Avg prompt throughput: 0.0 tokens/s, Running: 4 reqs\n"
                      "(EngineCore_DP2 pid=41) ERROR ModelRunner exited with exitcode=-6\n")
        watch.wait_for("TRIAGE-RUNNER-DIED", first, "rank 2", within_s=WITHIN_S)
        time.sleep(1.5)
    finally:
        rc, events, err = watch.stop()
        log.unlink()
    starts = sorted((e["code"], e["node"], e["where"]) for e in events if e["event"] == "start")
    assert starts == [("SERVER-LOG-UNREAD", second, "server log"), ("TRIAGE-RUNNER-DIED", first, "rank 2")], starts
    assert (rc, err) == (1, "")

def test_vram_still_held_after_the_engine_exited_is_named_on_its_card(rack, engines, tmp_path):
    """The engine of the first node holds VRAM while it serves (its own, nothing said); the engines die (both: the
    rig's nodes share the host's PIDs, each sees the other's engine) and card2's VRAM stays in use: named there,
    on that node only, beside the dead engines, once."""
    first, second = (n for n, _, _ in rack.hosts)
    card2 = tree(rack, first) / "sys/class/drm/card2/device/mem_info_vram_used"
    idle = card2.read_text()
    hold_vram(tree(rack, first), card=2, used_bytes=60 * 2**30)
    prom = tmp_path / "watch.prom"
    watch = Watching("--nodes", inventory(rack, tmp_path, {first, second}), "--interval", "1", "--stall", "4",
                     "--format", "jsonl", "--prom-file", prom, *ports(engines))
    try:
        watch.started(prom)
        time.sleep(2)
        assert watch.drain() == []  # VRAM in use by a running engine is its own
        for name in (first, second):
            engines[name][1].write_text(json.dumps({"die": True}))
        watch.wait_for("GPU-VRAM-HELD-AFTER-EXIT", first, "card2", within_s=WITHIN_S)
        hold_vram(tree(rack, first), card=2, used_bytes=int(idle))  # a reset freed it
        watch.wait_for("GPU-VRAM-HELD-AFTER-EXIT", first, "card2", within_s=WITHIN_S, kind="clear")
    finally:
        hold_vram(tree(rack, first), card=2, used_bytes=int(idle))
        rc, events, err = watch.stop()
    starts = sorted((e["code"], e["node"], e["where"]) for e in events if e["event"] == "start")
    assert starts == sorted([*((code, node, "engine") for code in ("ENGINE-DOWN", "ENGINE-PROCESS-GONE")
                               for node in (first, second)), ("GPU-VRAM-HELD-AFTER-EXIT", first, "card2")]), starts
    assert (rc, err) == (1, "")
