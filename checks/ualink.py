"""UALink sysfs state per GPU (reference §6, §28, §27 items 3 and 13), and its drift from a baseline.

The cards' ``ualink/`` files come from the shared UALink view (:mod:`k3doctor.views.ualink`).
"""
from __future__ import annotations

from itertools import zip_longest

from k3doctor.api import (
    CardId,
    Glob,
    Param,
    ParseError,
    ReadingUnavailable,
    check,
    error,
    fail,
    passed,
    remediation,
    verdict,
    warn,
)
from k3doctor.views.gpu import UALINK_DIR, VENDOR_GLOB, accel_ids, amd_cards
from k3doctor.views.kernel_log import BOOT_ID, DMESG, UPTIME, seconds_since_amdgpu_load
from k3doctor.views.peers import majority
from k3doctor.views.ualink import UALINK_READS, Card, nibbles, ualink_cards
from k3doctor.parsers.common import UINT32_MAX

BITMAP = "station_lane_en_bitmap"
HALF_NIBBLES = {"3": "port 1 down, port 0 up", "c": "port 0 down, port 1 up"}  # CVS monitor reading (§28)
RECORDED_FIELDS = ("accel_id", "local_accels", BITMAP, "link_type")
SUMMARY = ("accel_state", *RECORDED_FIELDS)

NOT_ACTIVE = remediation("UALINK-NOT-ACTIVE", "a GPU's UALink accelerator is not active", """
Every GPU's ualink/accel_state must read `active` before anything multi-node (§6);
`ready` is tolerated (ROCr and RCCL accept it, §27 item 13). Right after `modprobe amdgpu` a
card reads `unconfigured` for tens of seconds while inb-node-agent configures it: wait ~60 s
and re-check. Still `unconfigured` after that: waiting will not fix it - confirm
`lsmod | grep ^ifoe`, then `rmmod amdgpu && modprobe amdgpu ...` (§5 parameters).
`error`/`invalid`: reload the driver; if it persists, reset the tray (§11). Note `active` is
necessary, not sufficient: run the deep-tier fabric probe before a multi-node launch (§8).
""")

JOB_FALLBACK = remediation("UALINK-JOB-FALLBACK", "a GPU is UALink-configured, not ready: the whole job falls back",
                           """
RCCL uses MNNVL over UALoE only when every rank's accelerator is ACTIVE or READY (rocm-systems PR #6112,
§29); the revision-B states `configured`, `ppod_configured` and `vpod_configured` are not ready, so one such
card moves the whole communicator - every rank of the job, not this GPU alone - off the fabric onto the
TCP fallback (~4.5 GB/s, §8), and MORI's cco leaves it too. Wait for inb-node-agent to finish (it moves
the card on to active), else reload amdgpu (ifoe first, §5) and re-check all 16 cards (§6).
""")
# Revision-B accel_state values that are past `unconfigured` but not ready (§29, rocm-systems #6112).
JOB_FALLBACK_STATES = ("configured", "ppod_configured", "vpod_configured")

STUCK = remediation("UALINK-STUCK-UNCONFIGURED", "a GPU is stuck unconfigured; waiting will not fix it", """
The card shows the stuck signature of §6: accel_state `unconfigured` past the grace period
with ppod_id all-zero, accel_id 4294967295 and link_type `invalid` (seen lasting 12+ hours).
inb-node-agent never configured it and it will not recover by waiting. Confirm the ifoe stack
is loaded (`lsmod | grep ^ifoe`; load it with `modprobe ifoe` if missing - it must be loaded
before amdgpu initialises, §5), then `rmmod amdgpu` and `modprobe amdgpu gpu_recovery=0
halt_if_hws_hang=1` (or perf_setup menu D). With ifoe loaded first all four cards normally
flip to `active` in under 15 s. Re-run k3doctor afterwards.
""")

CARD_INVALID = remediation("UALINK-CARD-INVALID", "a GPU's UALink identity is unset or invalid", """
An active card must have a real accel_id (not 4294967295, the driver's "unset" value) and a
link_type of UALoE or UALink (not `invalid`) - RCCL only uses the fabric for those types (§6).
A card that reads active but lacks either was not configured consistently: reload the driver
(`rmmod amdgpu && modprobe amdgpu ...`, ifoe first, §5); if it persists, reset the tray (§11).
""")

LANES = remediation("UALINK-LANES", "a GPU's UALink lane bitmap is zero, half-enabled or differs", """
station_lane_en_bitmap has one hex nibble per station (§28): `f` fully enabled, `0` disabled
(allowed), `3`/`c` only half of the station's lanes (one port down) - CVS preflight fails those.
The bitmap must be non-zero and identical on all cards of a node; a card that differs from its
peers (or from its own baseline) has a partially trained link (§6), which hangs collectives
rather than erroring. Reload amdgpu to retrain (`rmmod amdgpu && modprobe amdgpu ...`, ifoe
first, §5); if the same station stays down, check the cable/port for that station and reset the
tray (§11). Confirm with the deep-tier fabric probe (ubench 07_ualoe, §8).
""")

LOCAL_ACCELS = remediation("UALINK-LOCAL-ACCELS", "a node's cards disagree on their local accelerators", """
Every card of a node must list the same local_accels (e.g. `3 2 1 0`), and that list must hold
each card's own accel_id (§6). A disagreement means the node's cards were configured from
different states of the fabric manager: reload amdgpu (ifoe first, §5) so inb-node-agent
configures all four together, then re-check.
""")

MISSING = remediation("UALINK-MISSING", "a GPU has no ualink/ directory", """
§6 gates multi-node work on accel_state `active` on ALL GPUs; a GPU without a ualink/
directory has no UALink accelerator at all, so the fabric cannot include it and the rendezvous
hangs. Look in dmesg for that card's `Failed to init UALink sw` / `Failed to start UALink
manager` (§6), confirm `lsmod | grep ^ifoe`, then reload amdgpu (`rmmod amdgpu && modprobe amdgpu
...`, ifoe first, §5). A GPU that is not visible at all is a GPU-count problem: see gpu-inventory.
""")

DRIFT = remediation("UALINK-DRIFT", "a GPU's UALink readings differ from the node's healthy baseline", """
There is no single correct lane bitmap (§27 item 3): the check is the node's own healthy record
(`k3doctor baseline record`). A card whose bitmap, local accels, accel id or link type changed
since then (typically after a reboot, §10) has a link that trained differently: reload amdgpu
to retrain (ifoe first, §5), and run the deep-tier fabric probe (§8). If the new reading is the
intended state (re-cabling, re-partitioning), record a new baseline on the healthy rack.
""")


def half_stations(digits: str) -> list:
    """(station, nibble) for every half-enabled station (`3`/`c`, §28)."""
    return [(i, nib) for i, nib in enumerate(digits) if nib in HALF_NIBBLES]


def groups(values: dict, name=str) -> str:
    """``'a' on card0, card1; 'b' on card2`` - every distinct value with who holds it."""
    by_value: dict = {}
    for key, value in sorted(values.items()):
        by_value.setdefault(value, []).append(name(key))
    return "; ".join(f"{value} on {', '.join(keys)}" for value, keys in by_value.items())


def _unconfigured(card: Card, ctx, load) -> object:
    """§6: normal for ~60 s after load; past that, the stuck signature gets its own remedy."""
    grace = ctx.param("unconfigured_grace_s")
    since, how = load
    evidence = {**card.evidence(), "driver_load": how}
    if since is not None and since <= grace:
        return warn(f"card{card.index} accel_state 'unconfigured', {how} (within the {grace:g}s grace: "
                    "inb-node-agent is still configuring it; re-check in a minute)",
                    gpu=card.index, evidence=evidence, remediation=NOT_ACTIVE)
    beyond = f"{how}, beyond the {grace:g}s grace" if since is not None else \
        f"{how}: treated as beyond the {grace:g}s grace"
    ppod = (card.get("ppod_id") or "").replace("-", "")
    stuck = (ppod != "" and set(ppod) == {"0"} and card.accel_id() is None
             and (card.get("link_type") or "").lower() == "invalid")
    if stuck:
        return fail(f"card{card.index} stuck unconfigured ({beyond}): ppod_id all-zero, accel_id "
                    f"{UINT32_MAX}, link_type invalid - waiting will not fix it; reload amdgpu with ifoe loaded",
                    gpu=card.index, evidence=evidence, remediation=STUCK)
    return fail(f"card{card.index} accel_state 'unconfigured' ({beyond})", gpu=card.index,
                evidence=evidence, remediation=NOT_ACTIVE)


def _card_verdicts(card: Card, ctx, load) -> list:
    """State, accel_id and link_type of one card; identity is only judged on accepted states."""
    state = (card.get("accel_state") or "").lower()
    accepted = [s.lower() for s in ctx.param("accepted_states")]
    tolerated = [s.lower() for s in ctx.param("tolerated_states")]
    ev = card.evidence()
    if not state:
        return [fail(f"card{card.index} has a ualink directory but no accel_state", gpu=card.index,
                     evidence=ev, remediation=NOT_ACTIVE)]
    if state == "unconfigured":
        return [_unconfigured(card, ctx, load)]
    if state in JOB_FALLBACK_STATES and state not in accepted + tolerated:
        return [fail(f"card{card.index} accel_state is '{state}' (configured, not ready): the whole job falls back "
                     "off MNNVL to TCP, every rank, not this GPU alone (§29, rocm-systems #6112)", gpu=card.index,
                     evidence=ev, remediation=JOB_FALLBACK)]
    if state not in accepted + tolerated:
        return [fail(f"card{card.index} accel_state is '{state}' (need {' or '.join(accepted)})",
                     gpu=card.index, evidence=ev, remediation=NOT_ACTIVE)]
    out = []
    if state in tolerated:
        out.append(warn(f"card{card.index} accel_state is '{state}' (tolerated; this firmware normally "
                        f"reports {accepted[0]})", gpu=card.index, evidence=ev, remediation=NOT_ACTIVE))
    if card.accel_id() is None:
        out.append(fail(f"card{card.index} accel_id is {card.get('accel_id') or 'missing'} (unset) "
                        f"although accel_state is {state}", gpu=card.index, evidence=ev,
                        remediation=CARD_INVALID))
    link = card.get("link_type") or "missing"
    if link.lower() not in [t.lower() for t in ctx.param("link_types")]:
        out.append(fail(f"card{card.index} link_type is '{link}' (need {' or '.join(ctx.param('link_types'))})",
                        gpu=card.index, evidence=ev, remediation=CARD_INVALID))
    return out


def _bitmap_verdicts(cards: dict, ctx) -> list:
    """§6/§28: non-zero, no half-enabled station, identical across the node's cards."""
    texts = {n: c.get(BITMAP) for n, c in cards.items()}
    missing = [n for n, t in texts.items() if t is None]
    out = [fail(f"card{n} has no lane bitmap (neither ualink/{BITMAP} nor ualink/stations/lane_en_bitmap)",
                gpu=n, evidence=cards[n].evidence(), remediation=LANES) for n in missing]
    values = {n: nibbles(t, f"card{n} {BITMAP}") for n, t in texts.items() if t is not None}
    for n, value in values.items():
        ev = {f"card{n}/ualink/{BITMAP}": texts[n]}
        if set(value) == {"0"}:
            out.append(fail(f"card{n} {BITMAP} is {texts[n]}: no lane enabled", gpu=n, evidence=ev,
                            remediation=LANES))
        half = [f"{station} reads '{nib}' ({HALF_NIBBLES[nib]})" for station, nib in half_stations(value)]
        if half:
            out.append(verdict(ctx.param("half_station"), f"card{n} {BITMAP} {texts[n]}: half-enabled station(s) "
                               f"{', '.join(half)}", gpu=n, evidence=ev, remediation=LANES))
    top, odd = majority(values)
    shown = {n: texts[n] for n in values}
    for n in odd:
        ev = {f"card{k}/ualink/{BITMAP}": shown[k] for k in shown}
        if top is None:
            message = f"card{n} {BITMAP} {texts[n]}: the node's cards split with no majority ({groups(shown, _c)})"
        else:
            peers = [k for k in values if values[k] == top]
            diff = _differing_stations(values[n], top)
            message = (f"card{n} {BITMAP} {texts[n]} differs from {', '.join(map(_c, peers))} "
                       f"({shown[peers[0]]}){diff}")
        out.append(fail(message, gpu=n, evidence=ev, remediation=LANES))
    return out


def _differing_stations(mine: str, peer: str) -> str:
    """Stations (0 = leftmost nibble) where a card's bitmap differs from its peers'."""
    stations = [f"{i} ({p}->{m})" for i, (m, p) in enumerate(zip_longest(mine, peer, fillvalue="0")) if m != p]
    return f"; station(s) {', '.join(stations)}" if stations else ""


def _c(n) -> str:
    return f"card{n}"


def _local_accels_verdicts(cards: dict) -> list:
    """§6: every card lists the same local accels, and that list holds each card's own id."""
    lists = {n: c.local_accels() for n, c in cards.items()}
    out = [fail(f"card{n} has no local_accels (neither ualink/local_accels nor ualink/setup/local_accels)",
                gpu=n, evidence=cards[n].evidence(), remediation=LOCAL_ACCELS)
           for n, v in lists.items() if v is None]
    sets = {n: " ".join(map(str, sorted(v, reverse=True))) for n, v in lists.items() if v is not None}
    top, odd = majority(sets)
    for n in odd:
        where = f"the node's cards split with no majority ({groups(sets, _c)})" if top is None else \
            f"the other cards list {top}"
        out.append(fail(f"card{n} local_accels {cards[n].get('local_accels')}: {where}", gpu=n,
                        evidence={f"card{k}/ualink/local_accels": cards[k].get("local_accels") for k in sets},
                        remediation=LOCAL_ACCELS))
    for n, card in cards.items():
        own = card.accel_id()
        if own is not None and lists[n] is not None and own not in lists[n]:
            out.append(fail(f"card{n} accel_id {own} is not in its own local_accels ({card.get('local_accels')})",
                            gpu=n, evidence=card.evidence(), remediation=LOCAL_ACCELS))
    return out


def _missing_verdicts(r, cards: dict, up: dict, expected: int) -> list:
    """§6 needs `active` on ALL GPUs, so a GPU without ualink/ FAILs too: AMD cards (PCI vendor)
    lacking it by number, any shortfall beyond them as one node line (gpu-inventory owns the count)."""
    try:
        named = [n for n in amd_cards(r["vendors"]) if n not in cards]
    except (ReadingUnavailable, ParseError):
        named = []
    seen = {"ualink cards": [_c(n) for n in cards]}
    out = [fail(f"card{n} is an AMD GPU without a ualink/ directory: its accelerator can never become active",
                gpu=n, evidence=seen, remediation=MISSING) for n in named]
    short = expected - len(cards) - len(named)
    if short > 0:
        others = f" (and {len(named)} AMD card(s) without it)" if named else ""
        out.append(fail(f"{short} GPU(s) missing: {len(cards)} card(s) expose ualink/{others}, the inventory "
                        f"expects {expected} GPUs per node{_unheld_accels(cards, up)}", remediation=MISSING,
                        evidence=seen))
    return out


def _unheld_accels(cards: dict, up: dict) -> str:
    """The accel ids the node's cards list in local_accels but no card holds: the missing GPUs' (§6).

    Only when every card is up: an unconfigured card's unset accel_id would look missing too.
    """
    try:
        lists = {n: tuple(sorted(c.local_accels(), reverse=True)) for n, c in up.items()
                 if c.local_accels() is not None}
        listed, _ = majority(lists)
        ids = [i for i in listed or () if i not in {c.accel_id() for c in cards.values()}]
    except (ReadingUnavailable, ParseError):
        return ""
    return f"; accel_id(s) {' '.join(map(str, ids))} in local_accels belong to no card" \
        if ids and len(up) == len(cards) else ""


def card_record(card: Card) -> dict:
    """The per-card readings kept in a baseline (§6: diff against the node's own healthy record)."""
    return {"accel_id": card.accel_id(), "local_accels": card.local_accels(), BITMAP: card.get(BITMAP),
            "link_type": card.get("link_type")}


def record(r, ctx) -> dict:
    """Baseline entry: boot id and each card's identity, local accels, lane bitmap, link type."""
    boot = r.get("boot_id")
    return {"boot_id": boot.text() if boot is not None and boot.exists else None,
            "cards": {n: card_record(c) for n, c in ualink_cards(r).items()}}


def _same(field: str, old, new) -> bool:
    if field == BITMAP and old is not None and new is not None:
        return nibbles(str(old), "baseline bitmap") == nibbles(str(new), f"current {BITMAP}")
    if field == "local_accels" and old is not None and new is not None:
        return sorted(old) == sorted(new)
    return old == new


def _show(value) -> str:
    if value is None:
        return "unset"
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def drift_verdicts(cards: dict, baseline, boot_id) -> list:
    """FAIL per card whose recorded reading changed (old -> new); a reboot alone is only noted."""
    if not isinstance(baseline, dict) or not isinstance(baseline.get("cards"), dict):
        why = baseline.get("unrecorded") if isinstance(baseline, dict) else None
        return [warn(f"baseline for this node holds no UALink record ({why or 'unexpected format'}); "
                     "re-record it on the healthy rack", evidence={"baseline": baseline}, remediation=DRIFT)]
    old_boot = baseline.get("boot_id")
    rebooted = f" (node rebooted since the baseline: boot_id {old_boot} -> {boot_id})" \
        if old_boot and boot_id and old_boot != boot_id else ""
    recorded = {int(k): v for k, v in baseline["cards"].items()}
    out = []
    for n in sorted(set(recorded) | set(cards)):
        if n not in cards:
            out.append(fail(f"card{n} is in the baseline but has no ualink directory now{rebooted}", gpu=n,
                            evidence={"baseline": recorded[n]}, remediation=DRIFT))
            continue
        if n not in recorded:
            out.append(fail(f"card{n} has a ualink directory but is not in the baseline{rebooted}", gpu=n,
                            evidence=cards[n].evidence(), remediation=DRIFT))
            continue
        now = card_record(cards[n])
        changes = [f"card{n} {f}: {_show(recorded[n].get(f))} -> {_show(now[f])}"
                   for f in RECORDED_FIELDS if not _same(f, recorded[n].get(f), now[f])]
        if changes:
            out.append(fail("; ".join(changes) + rebooted, gpu=n, remediation=DRIFT,
                            evidence={"baseline": recorded[n], "now": now, "boot_id": boot_id}))
    if not out:
        out.append(passed(f"UALink readings of {len(cards)} card(s) match the baseline{rebooted}",
                          evidence={"boot_id": boot_id, "baseline_boot_id": old_boot}))
    return out


def _reads(settings) -> dict:
    return {**UALINK_READS, "uptime": UPTIME, "dmesg": DMESG, "boot_id": BOOT_ID, "vendors": Glob(VENDOR_GLOB)}


@check("ualink-state", title="every GPU's UALink state, identity, lanes and local accels are sane", scope="gpu",
       remediation=(NOT_ACTIVE, JOB_FALLBACK, STUCK, CARD_INVALID, LANES, LOCAL_ACCELS, MISSING, DRIFT), reads=_reads,
       record=record, needs=("amdgpu-driver",),
       params={"accepted_states": ["active"], "tolerated_states": ["ready"], "unconfigured_grace_s": 60,
               "link_types": ["UALoE", "UALink"], "half_station": Param("fail", choices=("fail", "warn"))})
def ualink_state(r, ctx):
    """§6/§28: a card that is not active, unset, half-trained or odd-one-out keeps the fabric from forming
    (or hangs it); with --baseline, any card whose readings changed since the healthy record FAILs."""
    cards = ualink_cards(r)
    if not cards:
        return fail(f"no GPU exposes {UALINK_DIR}/ (amdgpu not loaded, or no UALink driver)",
                    evidence={"glob": UALINK_READS["ualink"].pattern}, remediation=NOT_ACTIVE)
    load = seconds_since_amdgpu_load(r.get("uptime"), r.get("dmesg"))
    verdicts = []
    for card in cards.values():
        try:
            verdicts += _card_verdicts(card, ctx, load)
        except (ReadingUnavailable, ParseError) as exc:
            verdicts.append(error(f"card{card.index}: could not read its ualink state: {exc}", gpu=card.index))
    usable = {s.lower() for s in ctx.param("accepted_states") + ctx.param("tolerated_states")}
    # A card that is not up yet already FAILs on its state; its lanes and lists are not comparable.
    up = {n: c for n, c in cards.items() if c.state_or_none() in usable}
    try:
        verdicts += _bitmap_verdicts(up, ctx) + _local_accels_verdicts(up)
        if ctx.baseline is not None:
            boot = r.get("boot_id")
            verdicts += drift_verdicts(cards, ctx.baseline, boot.text() if boot is not None and boot.exists else None)
    except (ReadingUnavailable, ParseError) as exc:
        verdicts.append(error(f"could not compare the node's cards: {exc}"))
    verdicts += _missing_verdicts(r, cards, up, ctx.settings.gpus_per_node)
    flagged = {v.gpu for v in verdicts}
    verdicts += [passed(f"card{n} " + ", ".join(f"{k.split('/')[-1]} {v}" for k, v in c.evidence().items()
                                                  if k.split("/")[-1] in SUMMARY),
                        gpu=n, evidence=c.evidence()) for n, c in cards.items() if n not in flagged]
    return _with_cards(verdicts, r)


def _with_cards(verdicts: list, r) -> list:
    """Each card's verdicts carry the card and its AccId, for the rack map (an unreadable id: none shown)."""
    try:
        ids = {card: acc for acc, card in accel_ids(r["ualink"]).items()}
    except (ReadingUnavailable, ParseError, AttributeError, TypeError):
        ids = {}
    for v in verdicts:
        if v.gpu is not None:
            v.figures.append(CardId(v.gpu, ids.get(v.gpu)))
    return verdicts
