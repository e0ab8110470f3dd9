"""ATOM's ``/metrics`` as a serving engine shows it (reference §31.2), for the watch's end-to-end tests.

Per DP rank (label ``dp_rank``): ``atom:requests_running``, ``atom:requests_waiting``,
``atom:generation_tokens_total``, ``atom:prompt_tokens_total``, ``atom:requests_finished_total``,
``atom:kv_cache_usage_ratio``, ``atom:preemptions_total``, LMCache's ``atom:lmcache_load_failures_total``,
``atom:lmcache_loads_pending``, ``atom:lmcache_loaded_tokens_total`` and ``atom:lmcache_saved_tokens_total``, and
the page's ``atom:metrics_last_refresh_timestamp_seconds``. The counters advance with time while a rank serves
(LMCache loads back a share of what it saves; nothing fails, nothing is preempted). A control file (JSON,
re-read on every scrape and every 0.2 s) injects the faults of §31.2: ``{"stall": [ranks]}`` freezes those
ranks' counters with work still running (the timestamp stays fresh and ``/health`` keeps answering ok, as ATOM's
API server does), ``{"kv_full": [ranks]}`` fills their KV cache with a growing queue, ``{"lmcache_fail":
[ranks]}`` fails a load at every scrape, ``{"lmcache_stuck": [ranks]}`` leaves loads pending and loads nothing back
while saves grow (§25), ``{"preempt": [ranks]}`` preempts a request at every scrape (signal 2), ``{"die": true}``
ends the process (its port then refuses).
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

TOKENS_PER_S, PROMPT_PER_S, FINISHED_PER_S = 40.0, 400.0, 0.5
SAVED_PER_S, LOADED_PER_S = 300.0, 100.0  # LMCache's tokens saved and loaded back while a rank serves
STUCK_PENDING = 3  # the loads an LMCache that stopped loading keeps pending


class AtomEngine:
    """The metrics state of ``ranks`` DP ranks, steered by ``control`` (a path; None: always healthy)."""

    def __init__(self, ranks: int, control: str | None):
        self.ranks, self.control = ranks, control
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._counts = {r: {"gen": 0.0, "prompt": 0.0, "fin": 0.0, "waiting": 0.0, "saved": 0.0, "loaded": 0.0,
                            "load_failures": 0, "preempted": 0} for r in range(ranks)}
        if control:
            threading.Thread(target=self._watch_for_death, daemon=True).start()

    def faults(self) -> dict:
        try:
            doc = json.loads(Path(self.control).read_text()) if self.control else {}
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def _watch_for_death(self) -> None:
        while True:
            if self.faults().get("die"):
                os._exit(0)
            time.sleep(0.2)

    def page(self) -> str:
        faults = self.faults()
        stalled, full = set(faults.get("stall", [])), set(faults.get("kv_full", []))
        failing, stuck = set(faults.get("lmcache_fail", [])), set(faults.get("lmcache_stuck", []))
        preempting = set(faults.get("preempt", []))
        with self._lock:
            now = time.monotonic()
            dt, self._last = now - self._last, now
            for rank, c in self._counts.items():
                if rank not in stalled:
                    c["gen"] += TOKENS_PER_S * dt
                    c["prompt"] += PROMPT_PER_S * dt
                    c["fin"] += FINISHED_PER_S * dt
                    c["saved"] += SAVED_PER_S * dt
                    c["loaded"] += 0.0 if rank in stuck else LOADED_PER_S * dt
                c["load_failures"] += rank in failing
                c["preempted"] += rank in preempting
                c["waiting"] = c["waiting"] + 1 if rank in full else 0.0
            rows = {
                "requests_running": ("gauge", lambda r, c: 4),
                "requests_waiting": ("gauge", lambda r, c: c["waiting"]),
                "generation_tokens_total": ("counter", lambda r, c: int(c["gen"])),
                "prompt_tokens_total": ("counter", lambda r, c: int(c["prompt"])),
                "requests_finished_total": ("counter", lambda r, c: int(c["fin"])),
                "kv_cache_usage_ratio": ("gauge", lambda r, c: 0.97 if r in full else 0.31),
                "preemptions_total": ("counter", lambda r, c: c["preempted"]),
                "lmcache_load_failures_total": ("counter", lambda r, c: c["load_failures"]),
                "lmcache_loads_pending": ("gauge", lambda r, c: STUCK_PENDING if r in stuck else 0),
                "lmcache_loaded_tokens_total": ("counter", lambda r, c: int(c["loaded"])),
                "lmcache_saved_tokens_total": ("counter", lambda r, c: int(c["saved"])),
            }
            out = []
            for name, (kind, value) in rows.items():
                out += [f"# HELP atom:{name} {name}", f"# TYPE atom:{name} {kind}"]
                out += [f'atom:{name}{{dp_rank="{r}",model_name="moonshotai/Kimi-K3"}} {value(r, c)}'
                        for r, c in self._counts.items()]
        out += ["# TYPE atom:metrics_last_refresh_timestamp_seconds gauge",
                f"atom:metrics_last_refresh_timestamp_seconds {time.time():.3f}"]
        return "\n".join(out) + "\n"
