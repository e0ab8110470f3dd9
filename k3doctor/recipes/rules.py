"""The arithmetic and consistency rules beside the recipes (reference §25, §29, §30), stated once here and
shown with their numbers in every finding. Each rule reads a resolved launch (the server's argv and
environment, what the benchmark client was started with) against a recipe point and the host facts the
recipe names, and returns findings; a rule with nothing to judge returns none.

Statuses: BLOCK (the launch breaks or hangs), WARN (it runs, wrongly or slowly), INFO (worth knowing,
nothing to fix), PASS (judged and right - the numbers are still shown).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import ROUND_DOWN, Decimal

from k3doctor.views.env_rules import AITER_LOG_LEVELS  # aiter/__init__.py (aiter #1795), §29

BLOCK, WARN, INFO, PASS = "BLOCK", "WARN", "INFO", "PASS"
MIN_STAGING_CHUNKS = 16  # one 54.78 MiB K3 state entry; the default 2 chunks are 8 MiB (§25)
PINNED_SHARE_LIMIT = 0.80  # of MemTotal, "above ~80%" (§29); a recipe's host.pinned_share_limit overrides it
GIB = 2 ** 30


@dataclass
class Launch:
    """What will really run: the server's flags and environment, the client's where it was seen."""

    flags: dict  # --flag -> value, or True for a flag given without one
    env: dict  # the server's environment as it starts
    client_flags: dict | None = None  # the benchmark client's (aiperf) flags, when its call was seen
    client_env: dict | None = None
    shm_bytes: int = 0  # the container's --shm-size, where known
    mem_total_bytes: int | None = None  # the node's MemTotal, where read (else the recipe's host facts)
    hf_cache: set | None = None  # repo ids complete in the mounted HF cache, where read


@dataclass
class Ruling:
    """What one recipe rule says about one subject of a launch (a status and a message, for `recipe diff`); not
    a probe's ``kit.Finding`` (where a fault lies) nor a kernel-log ``dmesg.SignatureHit``."""

    rule: str
    subject: str  # the variable or flag to fix
    status: str
    message: str
    numbers: dict = field(default_factory=dict)


def _int(value) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _float(value) -> float | None:
    try:
        number = float(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def dram_budget_gb(avail_mib: int, cap_mib: int, util: float, tp: int, gpus_per_node: int) -> int:
    """§25: floor(min(avail_mib, cap) x 1,048,576 x util x tp / gpus_per_node / 1e9), in Decimal as
    InferenceX's generate_sweep_configs.py computes it (a float would round 257.99... differently)."""
    total = Decimal(min(avail_mib, cap_mib)) * 1048576 * Decimal(str(util)) * tp / gpus_per_node / Decimal(10 ** 9)
    return int(total)


def _budget_text(avail, cap, util, tp, gpus) -> str:
    exact = Decimal(min(avail, cap)) * 1048576 * Decimal(str(util)) * tp / gpus / Decimal(10 ** 9)
    shown = exact.quantize(Decimal("0.01"), rounding=ROUND_DOWN)
    return (f"floor(min({avail:,}, {cap:,}) MiB x 1,048,576 x {util} x TP {tp} / {gpus} GPUs / 1e9) = "
            f"floor({shown}) = {int(exact)} GB")


def _tp(launch: Launch) -> int:
    return _int(launch.flags.get("--tensor-parallel-size")) or 1


def dram_per_rank(launch: Launch, recipe, point) -> list:
    """§25, §30: LMCACHE_MAX_LOCAL_CPU_SIZE is per rank = the DRAM budget / TP; the aggregate handed to
    every rank never finishes pinning and hangs the launch partway (observed at rank 2)."""
    value = launch.env.get("LMCACHE_MAX_LOCAL_CPU_SIZE")
    host = recipe.host
    if value is None or point.dram_utilization is None or not {"available_cpu_dram_mib", "dram_cap_mib",
                                                               "gpus_per_node"} <= set(host):
        return []
    tp, util = _tp(launch), point.dram_utilization
    avail, cap, gpus = int(host["available_cpu_dram_mib"]), int(host["dram_cap_mib"]), int(host["gpus_per_node"])
    budget = dram_budget_gb(avail, cap, util, tp, gpus)
    per_rank = budget // tp
    arithmetic = f"{_budget_text(avail, cap, util, tp, gpus)}; {budget} // TP {tp} = {per_rank} GB per rank"
    numbers = {"budget_gb": budget, "per_rank_gb": per_rank, "dram_utilization": util, "tp": tp}
    given = _int(value)
    name = "LMCACHE_MAX_LOCAL_CPU_SIZE"
    if given is None:
        return [Ruling("dram-per-rank", name, BLOCK, f"{name}={value} is not a whole number of GiB "
                       f"({arithmetic}) (§25)", numbers)]
    if given == per_rank:
        return [Ruling("dram-per-rank", name, PASS, f"{name}={given} per rank: {arithmetic} (§25)", numbers)]
    if tp > 1 and given >= budget:
        return [Ruling("dram-per-rank", name, BLOCK, f"{name}={given} is the whole DRAM budget handed to each of "
                       f"the {tp} ranks ({given * tp} GB pinned): every rank pins its own pool and the launch "
                       f"hangs partway while pinning; set {per_rank} ({arithmetic}) (§25)", numbers)]
    explained = [u / 1000 for u in range(1, 1001)
                 if dram_budget_gb(avail, cap, u / 1000, tp, gpus) // tp == given]
    why = ""
    if explained:
        nearest = min(explained, key=lambda u: abs(u - util))
        other = dram_budget_gb(avail, cap, nearest, tp, gpus)
        why = f"; {given} is what dram-utilization {nearest} gives ({other} // {tp} = {given})"
        numbers["explained_by_dram_utilization"] = nearest
    return [Ruling("dram-per-rank", name, WARN, f"{name}={given} GB per rank, the recipe's arithmetic gives "
                   f"{per_rank}: {arithmetic}{why} (§25, §30)", numbers)]


def pinned_host_memory(launch: Launch, recipe, point) -> list:
    """§29: every rank pins its own LMCache pool (and its state tier): per rank x ranks on the node
    (+ --shm-size) must stay under ~80% of MemTotal, or the host stalls / the launch is OOM-killed."""
    per_rank = _int(launch.env.get("LMCACHE_MAX_LOCAL_CPU_SIZE"))
    if per_rank is None:
        return []
    gpus = int(recipe.host.get("gpus_per_node", _tp(launch)))
    ranks = min(_tp(launch), gpus)
    state = 0
    if launch.env.get("OFFLOAD_STATE") == "1":
        state = _int(launch.env.get("OFFLOAD_STATE_CPU_SIZE")) or int(recipe.host.get("state_cpu_gib_default", 16))
    if launch.mem_total_bytes:
        total, where = launch.mem_total_bytes, "MemTotal"
    elif "available_cpu_dram_mib" in recipe.host:
        total, where = int(recipe.host["available_cpu_dram_mib"]) * 2 ** 20, "the recipe host's available DRAM"
    else:
        return []
    pinned = (per_rank + state) * ranks * GIB + launch.shm_bytes
    share, limit = pinned / total, float(recipe.host.get("pinned_share_limit", PINNED_SHARE_LIMIT))
    text = (f"({per_rank} GiB LMCache + {state} GiB state tier) x {ranks} ranks"
            + (f" + --shm-size {launch.shm_bytes / GIB:.0f} GiB" if launch.shm_bytes else "")
            + f" = {pinned / GIB:,.0f} GiB pinned of {total / GIB:,.0f} GiB {where} ({share:.0%}; "
            "per-rank semantics, as ATOM allocates)")
    numbers = {"pinned_gib": round(pinned / GIB), "total_gib": round(total / GIB), "share": round(share, 3)}
    if share > limit:
        return [Ruling("pinned-host-memory", "LMCACHE_MAX_LOCAL_CPU_SIZE", BLOCK, f"{text}: above "
                       f"{limit:.0%}, the pinning stalls the host or is OOM-killed with no log line "
                       "(§29)", numbers)]
    return [Ruling("pinned-host-memory", "LMCACHE_MAX_LOCAL_CPU_SIZE", PASS, f"{text} (§29)", numbers)]


def _lmcache_connector(launch: Launch) -> bool:
    return "lmcache_offload" in str(launch.flags.get("--kv-transfer-config") or "")


def offload_tiers_together(launch: Launch, recipe, point) -> list:
    """§30: Kimi-K3's KDA keeps a per-request recurrent state beside the paged KV; a resumed agentic request
    needs both back, so the LMCache DRAM tier and ATOM's CPU state-offload tier go on together."""
    lmcache, state = _lmcache_connector(launch), launch.env.get("OFFLOAD_STATE") == "1"
    if lmcache == state:
        return []
    if lmcache:
        return [Ruling("offload-tiers-together", "OFFLOAD_STATE", WARN, "--kv-transfer-config lmcache_offload "
                       f"without OFFLOAD_STATE=1 (it is {launch.env.get('OFFLOAD_STATE', '(unset)')}): the paged "
                       "KV comes back but the KDA recurrent state does not, so resumed requests recompute (§30)")]
    return [Ruling("offload-tiers-together", "--kv-transfer-config", WARN, "OFFLOAD_STATE=1 without "
                   "--kv-transfer-config lmcache_offload: the state tier alone cannot restore a resumed request's "
                   "paged KV (§30)")]


def staging_chunks(launch: Launch, recipe, point) -> list:
    """§25: with OFFLOAD_STATE=1 each staging buffer must hold one 54.78 MiB state entry: >= 16 chunks."""
    if launch.env.get("OFFLOAD_STATE") != "1":
        return []
    value = launch.env.get("OFFLOAD_GPU_STAGING_CHUNKS")
    chunks = 2 if value is None else _int(value)
    if chunks is not None and chunks >= MIN_STAGING_CHUNKS:
        return [Ruling("staging-chunks", "OFFLOAD_GPU_STAGING_CHUNKS", PASS,
                       f"OFFLOAD_GPU_STAGING_CHUNKS={chunks} >= {MIN_STAGING_CHUNKS} (§25)", {"chunks": chunks})]
    shown = "unset (default 2 chunks = 8 MiB)" if value is None else value
    return [Ruling("staging-chunks", "OFFLOAD_GPU_STAGING_CHUNKS", BLOCK, f"OFFLOAD_GPU_STAGING_CHUNKS is {shown} "
                   f"with OFFLOAD_STATE=1: below {MIN_STAGING_CHUNKS} a staging buffer cannot hold one 54.78 MiB K3 "
                   "state entry, the state tier declines to build after one log line and looks on but idle (§25)",
                   {"chunks": chunks})]


def aiter_log_level(launch: Launch, recipe, point) -> list:
    """§25, §29: aiter upper-cases AITER_LOG_LEVEL and accepts DEBUG/INFO/WARNING/ERROR; anything else (or
    unset) means INFO, whose kernel logs flood the server log for the whole 3600 s replay."""
    value = launch.env.get("AITER_LOG_LEVEL")
    if value is not None and value.upper() in AITER_LOG_LEVELS:
        return []
    what = "unset" if value is None else \
        f"{value!r}, not one of {'/'.join(AITER_LOG_LEVELS)} (aiter falls back to INFO)"
    return [Ruling("aiter-log-level", "AITER_LOG_LEVEL", WARN, f"AITER_LOG_LEVEL is {what}: aiter's kernel logs "
                   "flood the server log for the whole replay; set WARNING (§25, §29)")]


def spec_decode(launch: Launch, recipe, point) -> list:
    """§25, §30: a forced acceptance is --spec-decode-acceptance-length AL or -rate r = (AL - 1) / k, never
    both, never on an EVAL_ONLY run, and AL is the golden one for the draft-token count k."""
    length = launch.flags.get("--spec-decode-acceptance-length")
    rate = launch.flags.get("--spec-decode-acceptance-rate")
    if length is None and rate is None:
        return []
    subject = "--spec-decode-acceptance-length" if length is not None else "--spec-decode-acceptance-rate"
    if length is not None and rate is not None:
        return [Ruling("spec-decode", "--spec-decode-acceptance-rate", BLOCK, "--spec-decode-acceptance-length "
                       f"{length} and --spec-decode-acceptance-rate {rate} together: mutually exclusive (§25)")]
    if str(launch.env.get("EVAL_ONLY", "")).lower() == "true":
        return [Ruling("spec-decode", subject, BLOCK, f"{subject} is set on an EVAL_ONLY run: a forced acceptance "
                       "is for performance only, evaluations use the real one (§25, §30)")]
    k = _int(launch.flags.get("--num-speculative-tokens"))
    golden = recipe.golden_acceptance_length.get(k) if k else None
    if golden is None:
        return []
    if length is not None:
        al, how = _float(length), f"AL {length}"
    else:
        r = _float(rate)
        al = None if r is None else 1 + r * k
        how = f"AL = 1 + rate {rate} x k {k} = {al:.2f}" if al is not None else f"rate {rate}"
    numbers = {"k": k, "golden_al": golden, "al": al}
    if al is not None and abs(al - golden) <= 0.005:
        return [Ruling("spec-decode", subject, PASS, f"{how}, golden {golden} for k={k} (§25)", numbers)]
    return [Ruling("spec-decode", subject, WARN, f"{how} for k={k} draft tokens, golden AL {golden} (rate "
                   f"{(golden - 1) / k:.3f}); a forced acceptance off the golden curve misstates throughput (§25, "
                   "§30)", numbers)]


def draft_model(launch: Launch, recipe, point) -> list:
    """§25, §30: the drafter must be a local directory or complete in the mounted HF cache; otherwise every
    rank downloads ~7 GB silently after `Loading drafter model...` (HF_HUB_OFFLINE=1 makes that an error)."""
    model = launch.flags.get("--draft-model")
    if not isinstance(model, str):
        return []
    if model.startswith(("/", "./", "~")):
        return [Ruling("draft-model", "--draft-model", PASS, f"--draft-model {model} is a local directory (§25)")]
    cache_dir = f"models--{model.replace('/', '--')}"
    if launch.hf_cache is not None:
        if model in launch.hf_cache:
            return [Ruling("draft-model", "--draft-model", PASS, f"--draft-model {model}: {cache_dir} is complete in "
                           "the mounted HF cache (§30)")]
        return [Ruling("draft-model", "--draft-model", BLOCK, f"--draft-model {model} is a repo id and {cache_dir} is "
                       "not complete in the mounted HF cache: every rank downloads ~7 GB silently and the launch "
                       "stalls after `Loading drafter model...` (§25, §30)")]
    if launch.env.get("HF_HUB_OFFLINE") == "1":
        return [Ruling("draft-model", "--draft-model", PASS, f"--draft-model {model} with HF_HUB_OFFLINE=1: a missing "
                       "cache entry is an error, not a silent download (§25)")]
    return [Ruling("draft-model", "--draft-model", INFO, f"--draft-model {model} is a repo id: it relies on "
                   f"{cache_dir} complete in $HF_HUB_CACHE on the node (not read here; HF_HUB_OFFLINE=1 turns a "
                   "download into an error) (§25, §30)")]


def hsa_override(launch: Launch, recipe, point) -> list:
    """§29, §30: HSA_OVERRIDE_GFX_VERSION, where set, is the device's own target (12.5.0 on gfx1250, 9.5.0 on
    gfx950); a gfx1250 environment file reused on MI355X (or the reverse) faults on address (nil)."""
    from k3doctor import platforms

    value = launch.env.get("HSA_OVERRIDE_GFX_VERSION")
    if value is None:
        return []
    want = platforms.get(recipe.platform)
    if value == want.hsa_override_gfx_version:
        return [Ruling("hsa-override", "HSA_OVERRIDE_GFX_VERSION", PASS, f"HSA_OVERRIDE_GFX_VERSION={value}, the "
                       f"{want.name} target ({want.gfx}) (§29)")]
    other = next((p for p in map(platforms.get, platforms.names()) if p.hsa_override_gfx_version == value), None)
    whose = f" ({other.name}'s {other.gfx})" if other else ""
    return [Ruling("hsa-override", "HSA_OVERRIDE_GFX_VERSION", BLOCK, f"HSA_OVERRIDE_GFX_VERSION={value}{whose} on "
                   f"a {want.name} recipe, whose GPUs are {want.gfx} ({want.hsa_override_gfx_version}): kernels for "
                   "the wrong target fault with `Memory access fault by GPU node-N on address (nil)`; unset it or "
                   f"set {want.hsa_override_gfx_version} (§29, §30)")]


def served_model_name(launch: Launch, recipe, point) -> list:
    """§22, §30: ATOM serves --served-model-name, else the --model string; the client must send exactly it."""
    served = launch.flags.get("--served-model-name") or launch.flags.get("--model")
    if not isinstance(served, str):
        return []
    how = "--served-model-name" if launch.flags.get("--served-model-name") else "--model (no --served-model-name)"
    client = (launch.client_flags or {}).get("--model")
    if isinstance(client, str):
        if client == served:
            return [Ruling("served-model-name", "--served-model-name", PASS, f"served as {served} ({how}), the "
                           "client sends the same (§22)")]
        return [Ruling("served-model-name", "--served-model-name", BLOCK, f"the server answers to {served} ({how}) "
                       f"and the client sends --model {client}: every request gets a 4xx and the benchmark "
                       "\"succeeds\" with all-zero metrics; pass --served-model-name (§22, §30)")]
    if how.startswith("--model") and served.startswith(("/", "./")):
        return [Ruling("served-model-name", "--served-model-name", WARN, f"no --served-model-name: ATOM serves under "
                       f"the path {served}, and clients sending the repo id get a 4xx on every request (§22, §30)")]
    return []


# Every rule, in the order findings are shown (reference section in each docstring).
RULES = (dram_per_rank, pinned_host_memory, offload_tiers_together, staging_chunks, aiter_log_level, spec_decode,
         draft_model, hsa_override, served_model_name)


def apply(launch: Launch, recipe, point) -> list:
    """Every rule's findings for one resolved launch against one recipe point."""
    return [finding for rule in RULES for finding in rule(launch, recipe, point)]
