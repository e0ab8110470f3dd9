"""The watch's live rules as rows (reference §31.2 signals 2-4): what a serving cluster shows only while it runs -
LMCache and preemption pressure from the engine's ``/metrics``, HBM pages retired and fatal CPER records
written during the watch, a GPU busy at low clocks or at idle power, VRAM still held after the engine exited.

Where a rule of ``check`` already names the fault, the row reuses its remediation (``GPU-BAD-PAGES`` of
gpu-bad-pages, ``GPU-CPER-FATAL`` of gpu-cper-fatal, ``RACK-STALLED-QUEUE`` and ``RACK-ORPHANED-VRAM`` of
rack-free: one rule table serves ``check``, ``triage`` and ``watch``); the others register their own.
``drain``: a hardware BLOCK that ``watch --drain`` may drain a node for (§31.2 conventions: signals 3-4 only,
never the engine's pressure).
"""
from __future__ import annotations

from dataclasses import dataclass

from k3doctor.registry import remediation

LMCACHE = remediation("WATCH-LMCACHE", "LMCache is failing or not loading on a serving rank", """
The engine's LMCache counters show the offload tier failing under a running load (§31.2 signal 2): loads
failing (`lmcache_load_failures_total` rising), loads pending that never complete (`lmcache_loads_pending`
stuck while `lmcache_loaded_tokens_total` stays flat) or nothing loaded back while saves keep growing - §25's
32 GiB-per-rank failure looked exactly like this. Read the rank's log for `LMCache` lines (`k3doctor triage`),
the host's pinned memory and OOM killer (`dmesg | grep -i oom`), and the LMCache budget per rank x ranks
against MemTotal and /dev/shm (§25, §29: `max_local_cpu_size` is per rank).
""")
PREEMPTIONS = remediation("WATCH-PREEMPTIONS", "the engine keeps preempting requests (KV cache exhausted)", """
`preemptions_total` rising interval after interval means the scheduler evicts running requests to make KV room
(§31.2 signal 2): throughput falls and latency climbs while `/health` says ok. With `kv_cache_usage_ratio`
near 1 and the queue growing it is KV pressure (lower the concurrency or `--max-num-seqs`, or add KV capacity);
on one DP rank only, it is the §20 imbalance that preceded a rank hanging at 98.6 % KV - take py-spy stacks
of that rank before anything is restarted.
""")
CLOCKS = remediation("WATCH-GPU-CLOCKS-LOW", "a busy GPU runs at a fraction of its peak clock", """
A GPU reading high `gpu_busy_percent` while its current `pp_dpm_sclk` level is far below the top level is
throttled or stuck (§31.2 signal 4: MI300X seen pinned at 60-70 MHz under load, ROCm legacy #4414): the rank on
it runs many times slower and holds back every collective. Read its power cap, temperature and violation
percentages (`amd-smi metric -p -t`; `throttle_status` is N/A on MI300+) and its
`power_dpm_force_performance_level`; compare with its peers (`k3doctor check --only gpu-peers`). A GPU idle at
low clocks is healthy.
""")


@dataclass(frozen=True)
class LiveRule:
    """One live rule: the condition code the watch reports, its severity, section and remediation code."""

    name: str
    severity: str  # fail | warn
    section: str
    what: str
    remediation: str
    drain: bool = False


RULES = tuple(LiveRule(*fields) for fields in (
    ("LMCACHE-LOAD-FAILURES", "warn", "§31.2", "LMCache loads failing on a rank", LMCACHE),
    ("LMCACHE-LOADS-STUCK", "warn", "§31.2", "LMCache loads pending and nothing loaded", LMCACHE),
    ("LMCACHE-LOADS-FLAT", "warn", "§31.2, §25", "LMCache saves grow while nothing is loaded back", LMCACHE),
    ("PREEMPTIONS-RISING", "warn", "§31.2", "requests preempted interval after interval", PREEMPTIONS),
    ("GPU-BAD-PAGES-NEW", "warn", "§31.2, §31.3", "HBM pages retired during the watch", "GPU-BAD-PAGES"),
    ("GPU-CPER-FATAL-NEW", "fail", "§31.2, §31.3", "a fatal CPER record written during the watch",
     "GPU-CPER-FATAL", True),
    ("GPU-CLOCKS-LOW-UNDER-LOAD", "warn", "§31.2", "a busy GPU at a fraction of its peak clock", CLOCKS),
    ("GPU-BUSY-AT-IDLE-POWER", "warn", "§29, §31.2", "a GPU 100 % busy at idle power: a stalled queue",
     "RACK-STALLED-QUEUE"),
    ("GPU-VRAM-HELD-AFTER-EXIT", "warn", "§29, §31.2", "VRAM still held after the engine exited",
     "RACK-ORPHANED-VRAM"),
))
for _rule in RULES:  # `k3doctor explain CODE` for every live rule, pointing to the remediation it shares
    remediation(_rule.name, f"{_rule.what} ({_rule.section})",
                f"watch rule {_rule.name}: {_rule.what} (reference {_rule.section}), {_rule.severity.upper()}, "
                "judged by `k3doctor watch` on evidence newer than the watch's start (docs/on-call.md, Watch).\n"
                f"What to do: `k3doctor explain {_rule.remediation}`.", unique=True)
BY_CODE = {rule.name: rule for rule in RULES}
DRAIN_CODES = frozenset(rule.name for rule in RULES if rule.drain)
