"""Kernel health (reference §10, checklist item 3 of §0.3; signatures of §6, §8 and §28).

Passive, fast tier: the kernel log every node's gather already takes (one ``dmesg`` per node,
shared with amdgpu-driver and ualink-state), ``/proc/uptime`` and the boot id.  Only the current
boot is judged, and by default only what was logged since amdgpu last loaded (a reload clears a
wedged GPU; the ``window`` parameter widens or narrows that).  A fatal BERT record is a host fact
of the boot, so its rule looks at the whole boot.

Rules are data (``RULES`` in ``k3doctor/rules/kernel_log.py``): one row per rule, its line pattern,
severity, reference section, remediation code and sample line (the log scanner gets the patterns from here); a site adds, overrides and silences rules in the
inventory's ``checks: {kernel-health: ...}``, and ``k3doctor explain ID`` explains each.  The §10
noise (``mce`` warm-reboot residue and its BERT record for MSR 0xc00023e1, ``mana ... -71``) is
never a finding.

Attribution (cluster-scope judge, so every node's sysfs is at hand): a line's PCI address names
the card (sysfs ``uevent``, matched by bus: §28); ``AccId:<n>`` names the node and card whose
``ualink/accel_id`` holds n (§6), and the result sits on that node, saying whose log showed it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from k3doctor.api import (
    Glob,
    Param,
    ParseError,
    ReadingUnavailable,
    check,
    error,
    passed,
    verdict,
)
from k3doctor.views.gpu import UALINK_GLOB, UEVENT_GLOB, accel_ids, card_bdfs, card_for_bdf, locate_accid
from k3doctor.views.kernel_log import (
    BOOT_ID,
    DMESG,
    DMESG_ERRORS,
    GPU_SOURCE,
    UPTIME,
    KernelLog,
    error_lines,
    message_shape,
    read_boot_id,
)
from k3doctor.parsers.dmesg import SignatureHit, scan
from k3doctor.rules.kernel_log import (
    BENIGN_LINES,
    BENIGN_MSR_SIGNATURES,
    REMEDIATIONS,
    RULES,
    SINCE,
    UNKNOWN,
    UNKNOWN_SIGNATURE,
    RuleError,
    check_window,
    rules_for,
    rules_problem,
    signatures_of,
    silenced_lines,
    window_problem,
    with_site_rules,
)

SAMPLE_LINES = 5  # raw lines kept per finding in the evidence


def window_start(log: KernelLog, since: str, window: str) -> tuple:
    """(index of the first line a rule judges, None or the max age in seconds, what that window is)."""
    if window == "boot" or since == "boot":
        return 0, None, "the whole boot"
    if window != "amdgpu-load":
        return 0, float(window), f"the last {float(window):g}s"
    loads = log.amdgpu_loads()
    if not loads:
        return 0, None, "the whole boot (amdgpu's load line is not in the log: ring buffer wrapped?)"
    load = log.lines[loads[-1]]
    age = log.age_s(load.seconds)
    return loads[-1], None, f"since amdgpu last loaded ({f'{age:.0f}s ago' if age is not None else load.raw[:60]})"


@dataclass
class NodeLog:
    """What one node's log contributes: its findings per rule, and its cards' PCI addresses."""

    node: str
    log: KernelLog
    bdfs: dict
    hits: list  # (rule, finding, window description)
    window: str  # the window of the amdgpu-load rules, said in the PASS


def _read_node(node: str, r, params, boot_id: str) -> NodeLog:
    rules = rules_for(params)
    window = str(params.param("window"))
    check_window(window)
    dmesg = r["dmesg"]
    if dmesg.truncated:
        raise ParseError(f"`{dmesg.command}` output was cut at the gather's size cap: the log was not fully read")
    log = KernelLog.read(dmesg, r.get("uptime"), boot_id)
    benign = {m.lower() for m in params.param("benign_bert_msrs")}
    by_signature = {}
    for rule in rules:
        if rule.severity != "info":  # a known line, no finding
            by_signature.setdefault(rule.signature, []).append(rule)
    windows = {since: window_start(log, since, window) for since in SINCE}
    # every row's pattern, silenced ones too: a silenced rule's line is still a known line, not an unknown one
    findings = scan(log.lines, signatures_of(with_site_rules(params.param("rules")).values()))
    if UNKNOWN_SIGNATURE in by_signature:
        findings += unknown_error_lines(log, r.get("errors"), findings, silenced_lines(params))
    hits = []
    for finding in findings:
        if finding.signature in BENIGN_MSR_SIGNATURES and finding.details.get("msr") \
                and set(finding.details["msr"]) <= benign:
            continue  # §10: warm-reboot residue
        age = log.age_s(finding.seconds)
        for rule in by_signature.get(finding.signature, ()):
            start, max_age, what = windows[rule.since]
            if finding.index >= start and (max_age is None or age is None or age <= max_age):
                hits.append((rule, finding, what))
    return NodeLog(node, log, card_bdfs(r["uevents"]), hits, windows["amdgpu-load"][2])


def unknown_error_lines(log: KernelLog, errors_reading, findings: list, silenced: tuple) -> list:
    """One finding per message shape for the err+ lines of amdgpu/KFD/ifoe/UALink that no signature took.

    A line is known when a signature (any severity, INFO included) or a site rule matched it or it
    belongs to a finding's record (detail lines, [Hardware Error] dumps); §10's noise and the site's
    ``silence`` patterns never count.
    """
    known = {line for finding in findings for line in finding.lines}
    shapes: dict = {}
    for index in error_lines(log, errors_reading):
        line = log.lines[index]
        if line.raw in known or not GPU_SOURCE.match(line.text) \
                or any(p.search(line.text) for p in (*BENIGN_LINES, *silenced)):
            continue
        shape = message_shape(line.text)
        if shape in shapes:
            shapes[shape].details["count"] += 1
            continue
        shapes[shape] = SignatureHit(UNKNOWN_SIGNATURE, line.raw, line.timestamp, _bdf_of(line.text), None,
                                     {"shape": shape, "count": 1}, index, line.seconds, [line.raw])
    return list(shapes.values())


def _bdf_of(text: str):
    match = re.match(r"^amdgpu (?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]):", text)
    return match.group("bdf").lower() if match else None


def _age(seconds) -> str:
    return "age unknown (no monotonic stamp)" if seconds is None else f"{seconds:.0f}s ago"


def _attribute(seen: NodeLog, finding, owners: dict, gpus_per_node: int) -> tuple:
    """(node at fault, card or None, how) for one finding seen in ``seen``'s log (``owners``: node -> accel ids)."""
    if finding.accid is not None:
        node, card, how = locate_accid(finding.accid, owners, gpus_per_node)
        if node is None:
            return seen.node, None, f"remote AccId:{finding.accid} is owned by no node: {how}"
        return node, card, f"remote AccId:{finding.accid} = {node} card{card} ({how})"
    if finding.bdf is not None:
        card = card_for_bdf(finding.bdf, seen.bdfs)
        if card is None:
            return seen.node, None, f"PCI {finding.bdf} is no card in {seen.node}'s sysfs"
        return seen.node, card, f"PCI {finding.bdf} = card{card}"
    return seen.node, None, "the line names no PCI address"


def _verdicts(logs: dict, owners: dict, gpus_per_node: int) -> list:
    """One verdict per fault: (remediation, node at fault, card, node whose log showed it).

    The signatures of one fault (ring timeout -> GPU reset -> VRAM lost; NPA-RSP timeout, HELLO and
    setup failures towards one remote GPU) are named together, led by the first FAIL rule of the table (the table's
    order is also its match order, where a narrower warning comes first),
    with every rule id and its count in the message and evidence.
    """
    order = {rule.id: i for i, rule in enumerate(RULES)}  # site rules after the built-in ones
    groups: dict = {}
    for seen in logs.values():
        for rule, finding, what in seen.hits:
            node, card, how = _attribute(seen, finding, owners, gpus_per_node)
            group = groups.setdefault((rule.remediation, node, card, seen.node),
                                      {"seen": seen, "window": what, "how": {}, "hits": {}})
            group["hits"].setdefault(rule.id, (rule, []))[1].append(finding)
            group["how"].setdefault(rule.id, how)
    faults = {(node, card) for remedy, node, card, _ in groups if remedy != UNKNOWN}
    for key in [k for k in groups if k[0] == UNKNOWN]:  # unknown lines of a GPU (node) with a known fault follow it
        if (key[1], key[2]) in faults or (key[2] is None and any(node == key[1] for node, _ in faults)):
            del groups[key]
    out = []
    for (remedy, node, card, seen_on), group in groups.items():
        hits = sorted(group["hits"].values(), key=lambda h: (h[0].severity != "fail", order.get(h[0].id, len(order))))
        (lead, lead_found), seen = hits[0], group["seen"]
        found = [f for _, fs in hits for f in fs]
        ages = [seen.log.age_s(f.seconds) for f in found]
        known = [a for a in ages if a is not None]
        where = "" if seen_on == node else f", seen in {seen_on}'s kernel log"
        ids = ", ".join(f"{r.id}" + (f" x{len(fs)}" if len(fs) > 1 else "") for r, fs in hits)
        sections = ", ".join(dict.fromkeys(r.section for r, _ in hits))
        text = lead_found[-1].line.strip()[:160]
        worst = "fail" if any(r.severity == "fail" for r, _ in hits) else "warn"
        out.append(verdict(worst,
            f"{lead.what} [{ids}; {sections}]: {group['how'][lead.id]}{where}; newest "
            f"{_age(min(known)) if known else _age(None)}: {text}",
            node=node, gpu=card, remediation=remedy,
            evidence={"rule": lead.id, "rules": {r.id: len(fs) for r, fs in hits}, "sections": sections,
                      "seen_in": seen_on, "attribution": group["how"][lead.id], "window": group["window"],
                      "ages_s": [None if a is None else round(a) for a in ages], "boot_id": seen.log.boot_id,
                      "details": lead_found[-1].details,
                      "lines": [line for f in found[-SAMPLE_LINES:] for line in f.lines[:SAMPLE_LINES]]}))
    return out


def _reads(settings) -> dict:
    return {"dmesg": DMESG, "errors": DMESG_ERRORS, "uptime": UPTIME, "boot_id": BOOT_ID, "uevents": Glob(UEVENT_GLOB),
            "ualink": Glob(UALINK_GLOB)}


def node_part(r, ctx) -> tuple:
    """(the accel ids the node owns, its NodeLog or None, the ERRORs that stand for its log): one node's kernel
    log parsed and scanned once, as soon as it is read. A node whose log is unreadable still owns its accel ids."""
    node = ctx.node
    try:
        owners = accel_ids(r["ualink"])
    except ReadingUnavailable:
        owners = {}
    try:  # §31.1: a boot id the kernel did not give leaves which boot the log shows unknown
        boot_id = read_boot_id(r["boot_id"])
    except (ReadingUnavailable, ParseError) as exc:
        return owners, None, [error(f"kernel log not judged: the boot id was not read, so whether the log is this "
                                    f"boot's cannot be told: {exc}", node=node)]
    try:
        return owners, _read_node(node, r, ctx.settings, boot_id), []
    except RuleError as exc:
        return owners, None, [error(f"kernel-health parameters: {exc}", node=node)]
    except ReadingUnavailable as exc:
        return owners, None, [error(f"kernel log not readable, not judged: {exc} (a restricted dmesg needs root: "
                                    "`sudo: true` in the inventory)", node=node)]
    except ParseError as exc:
        return owners, None, [error(f"kernel log not judged: {exc}", node=node)]


@check("kernel-health", title="no wedged-GPU, page-fault, reset, RAS, fabric or host-crash signature in the kernel log",
       scope="cluster", reads=_reads, remediation=REMEDIATIONS, each_node=node_part,
       params={"window": Param("amdgpu-load", validate=window_problem), "rules": Param({}, validate=rules_problem),
               "silence": [], "benign_bert_msrs": ["0xc00023e1"]})
def kernel_health(per_node, ctx):
    """§10 (checklist item 3): a node whose kernel log shows a wedged GPU, page faults, resets, RAS errors,
    §8 fabric failures or a fatal BERT record is excluded, even at 0% VRAM and with no container.

    Cluster scope so that an ``AccId`` seen in one node's log is put on the node and card that own it
    (``per_node``: node -> :func:`node_part`).
    """
    logs, owners, verdicts = {}, {}, []
    for node, (owned, log, errors) in per_node.items():
        owners[node] = owned
        verdicts += errors
        if log is not None:
            logs[node] = log
    verdicts += _verdicts(logs, owners, ctx.settings.gpus_per_node)
    faulty = {v.node for v in verdicts}
    for node, seen in logs.items():
        if node in faulty:
            continue
        elsewhere = sorted({v.node for v in verdicts if v.evidence.get("seen_in") == node})
        others = f"; it shows faults of {', '.join(elsewhere)}, reported there" if elsewhere else ""
        verdicts.append(passed(f"no fault of this node in its kernel log ({len(seen.log.lines)} lines of the "
                               f"current boot, judged {seen.window}; fatal BERT records over the whole boot{others})",
                               node=node, evidence={"boot_id": seen.log.boot_id, "lines": len(seen.log.lines)}))
    return verdicts
