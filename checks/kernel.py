"""Kernel health (reference §10, checklist item 3 of §0.3; signatures of §6, §8 and §28).

Passive, fast tier: the kernel log every node's gather already takes (one ``dmesg`` per node,
shared with amdgpu-driver and ualink-state), ``/proc/uptime`` and the boot id.  Only the current
boot is judged, and by default only what was logged since amdgpu last loaded (a reload clears a
wedged GPU; the ``window`` parameter widens or narrows that).  A fatal BERT record is a host fact
of the boot, so its rule looks at the whole boot.

Rules are data (``RULES``): parser signature -> rule id, severity, reference section, remediation
code.  A site adds a rule or overrides one with ``rules: {ID: {...}}`` and silences one with
``silence: [ID]`` in the inventory's ``checks: {kernel-health: ...}``; ``k3doctor explain ID``
explains every built-in rule.  The §10 noise (``mce`` warm-reboot residue and its BERT record for
MSR 0xc00023e1, ``mana ... -71``) is never a finding.

Attribution (cluster-scope judge, so every node's sysfs is at hand): a line's PCI address names
the card (sysfs ``uevent``, matched by bus: §28); ``AccId:<n>`` names the node and card whose
``ualink/accel_id`` holds n (§6), and the result sits on that node, saying whose log showed it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from k3doctor.api import (
    MAX_SECONDS,
    Glob,
    Param,
    ParseError,
    ReadingUnavailable,
    check,
    error,
    fail,
    passed,
    remediation,
    remediation_text,
    warn,
)
from k3doctor.model.gpu import UALINK_GLOB, UEVENT_GLOB, accel_ids, card_bdfs, card_for_bdf, locate_accid
from k3doctor.model.kernel_log import (
    BOOT_ID,
    DMESG,
    DMESG_ERRORS,
    GPU_SOURCE,
    UPTIME,
    KernelLog,
    error_lines,
    message_shape,
)
from k3doctor.parsers.dmesg import BLOCK, SIGNATURE_NAMES, WARN, SignatureHit, scan

SEVERITIES = {"fail": fail, "warn": warn}
SINCE = ("amdgpu-load", "boot")  # where a rule's window starts (window parameter "amdgpu-load")
SAMPLE_LINES = 5  # raw lines kept per finding in the evidence

WEDGED = remediation("GPU-WEDGED", "a GPU is wedged (MES / SDMA residue in the kernel log)", """
`MES ... failed to respond to msg=REMOVE_QUEUE`, `MES ring buffer is full` and expired SDMA fence
fallback timers, `GPU recovery disabled.` after a hang (gpu_recovery=0) and an SMU that no longer
answers (`SMU: I'm not done with your previous command`) mean the GPU's scheduler is wedged -
expected with gpu_recovery=0 after a hung or killed engine or a multi-node abort (§10). The node is
unhealthy even at 0% VRAM and with no container; check every node that took part in the last run.
A tray with zombie engines but an empty /sys/class/kfd/kfd/proc has freed its GPUs and needs nothing.
Remedy (§11): BMC Redfish `ForceRestart` of the tray, then perf_setup (§5). Never `systemctl
reboot` or Redfish `GracefulRestart` on a wedged GPU: shutdown blocks unloading amdgpu.
""")

PAGE_FAULT = remediation("GPU-PAGE-FAULT", "a GPU logged a no-retry page fault", """
`[gfxhub0] no-retry page fault` (`Faulty UTCL2 client ID: TCP`, `PERMISSION_FAULTS`) is the
gfx1250 platform issue under high-pressure runs (§10): ModelRunner dies (`exitcode=-6`) ~96 s later
and the other ranks hang in Gloo/collectives. After such a fault multi-process runs can hang in
`torch.distributed.new_group` while single-process work still runs, and `rocm-smi --gpureset` can
hang for 20+ minutes: reboot the tray (Redfish ForceRestart, then perf_setup, §11) before using
it again. Capture dmesg before and after every run to tie a fault to its run.
""")

RESET = remediation("GPU-HUNG-RESET", "a GPU timed out a ring, was reset or lost VRAM", """
A ring timeout (`ring <name> timeout, signaled seq=..., emitted seq=...`), `GPU reset begin!` and
`VRAM is lost due to GPU reset!` mean a job hung the GPU and the driver reset it. On these racks
amdgpu must run with gpu_recovery=0 so a hang halts the GPU for diagnosis instead (§5): a reset
here means the parameters were not in effect, or the GPU hung again after a reload. Whatever ran
on it is dead and its memory gone. Reload amdgpu the bring-up way (ifoe first, then
`modprobe amdgpu gpu_recovery=0 halt_if_hws_hang=1`, or perf_setup menu D, §5) or reset the tray
(§11), and find the job named in the finding's `Process` detail. Before anything resets the GPU, copy
the driver's dump the log names (`Check your /sys/class/drm/cardN/device/devcoredump/data`): a reset
or a reload discards it.
""")

RAS = remediation("GPU-RAS-ERROR", "a GPU reported an uncorrectable memory/RAS error", """
The fatal RAS interrupt (`uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!`, with
its `{N}` event id), poison consumed, an uncorrectable RAS count, an ACA bank with UC/PCC/poison/deferred status, or
`Saved bad pages N reaches threshold value M` are hardware errors of that GPU (AMD's node tooling
reads the same lines, §28). The GPU cannot be trusted for a long run: keep the node out, reset the
tray (§11) and have the board checked; a bad-page threshold needs the board's RMA process
(`amd-smi bad-pages` lists the retired pages). A recoverable APEI record is a warning: watch it.
""")

HOST_CRASH = remediation("HOST-CRASHED", "the host crashed in the previous boot (fatal BERT record)", """
A BERT `event severity: fatal` record (e.g. `fru_text: Perr: CPU0`, bank 19 status
`baa000000005080b`) is a real host crash reported at this boot (§10; seen on CT1, CT2, CT3,
CT12, CT15 - CT15 twice in 30 min). Keep the tray out of long multi-node runs and report it to the
platform team. Not this: the `mce ... Bank 62` line with its BERT record for MSR 0xc00023e1 after
a warm reboot is noise (`benign_bert_msrs`), and so is `mana ... Failed to query link config: -71`.
""")

FABRIC = remediation("FABRIC-IMPORT-FAILED", "the UALink/IFoE fabric failed between two GPUs (importer's log)", """
`IMPORT: NPA-RSP timeout from remote AccId:<n>`, `HELLO: Send failed`, `IMPORT: connection setup
failed`, `XA import failed` and `LSDMA PIO error` are fabric data-path faults, logged by the
importer only (§8); they were seen while every card read `active`. The remote AccId names the
card that did not answer: k3doctor maps it through every node's ualink/accel_id to that node and
card (§6; tray = AccId // 4 + 1) and reports it there. Check that tray's UALink switch ports and
cabling and its data-plane NIC (§4, §18), reload amdgpu (`modprobe ifoe` first, §5) or reset the
tray (§11), then prove the path with `k3doctor check --only ualoe-fabric --pairs <a>,<b>`.
""")

UALINK_INIT = remediation("UALINK-INIT-FAILED", "the driver failed to bring up a card's UALink", """
`Failed to set NPA config`, `Failed to start UALink manager` and `Failed to init UALink sw r=<n>`
mean the card's UALink accelerator never came up (§6); `UALINK: deactivating accelerator` after
the load means it went down again. Confirm `lsmod | grep ^ifoe` (ifoe must load before amdgpu,
§5), then reload amdgpu (`rmmod amdgpu && modprobe amdgpu ...`) and wait for every accel_state to
read `active` (ualink-state); if it persists, reset the tray (§11).
""")


UNKNOWN = remediation("KERNEL-UNKNOWN-LINE", "an amdgpu/KFD/fabric error line that no rule knows", """
The driver logged a line at err, crit, alert or emerg level since amdgpu loaded, and none of the
kernel-health rules knows what it means (issue 21: no silent PASS on an unknown kernel error). Read
the line in the finding (each message shape is counted once): a new fault, or a new wording of a
known one, needs a rule (`rules:` in the inventory, or a report to the k3doctor maintainers with the
line). A line your site knows to be harmless is silenced by a regex on its text in the inventory:
`checks: {kernel-health: {silence: ["XGMI link retrain count"]}}` (entries that are rule ids silence
that rule, any other entry is such a pattern).
""")
UNKNOWN_SIGNATURE = "unknown_error_line"  # not a parser signature: an err+ line from a GPU source no signature matched
# Lines of §10 (and §29) known to be harmless: never an unknown error, whatever their level.
BENIGN_LINES = tuple(re.compile(p) for p in (
    r"^mce: \[Hardware Error\]: CPU \d{1,5}/\d{1,5}: Machine Check: 0 Bank 62: ",  # §10 warm-reboot residue
    r"^mana .{0,80}Failed to query link config: -71",  # §10 noise (SSH uses that NIC)
))
RULE_ID = re.compile(r"^[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)+$")  # a silence entry of this shape names a rule


@dataclass(frozen=True)
class Rule:
    """One kernel-log rule: which parser signature (or site regex) it fires on, and what that means."""

    id: str
    signature: str  # a k3doctor.parsers.dmesg signature name; site rules may give a regex instead
    severity: str  # fail | warn
    section: str
    remediation: str
    what: str
    since: str = "amdgpu-load"  # amdgpu-load (a reload clears it) | boot (a fact of the boot)
    pattern: str | None = None  # site rules: regex searched in each line's text


RULES = tuple(Rule(*fields) for fields in (
    ("KERNEL-MES-REMOVE-QUEUE", "mes_remove_queue_failed", "fail", "§10", WEDGED,
     "MES failed to respond to REMOVE_QUEUE: the GPU is wedged"),
    ("KERNEL-MES-NO-RESPONSE", "mes_no_response", "fail", "§10", WEDGED,
     "MES failed to respond to a scheduler message: the GPU is wedged"),
    ("KERNEL-MES-RING-FULL", "mes_ring_full", "fail", "§10", WEDGED, "MES ring buffer is full: post-fault residue"),
    ("KERNEL-GPU-RECOVERY-DISABLED", "gpu_recovery_disabled", "fail", "§5, §10", WEDGED,
     "a GPU hung and was left halted (GPU recovery disabled): wedged until the tray is reset"),
    ("KERNEL-SMU-HUNG", "smu_hung", "fail", "§10", WEDGED, "the SMU no longer answers: the GPU is wedged"),
    ("KERNEL-SMU-MESSAGE-FAILED", "smu_message_failed", "warn", "§10", WEDGED,
     "the SMU refused or failed a message"),
    ("KERNEL-SDMA-FENCE-TIMEOUT", "fence_fallback_timer_expired", "fail", "§10", WEDGED,
     "SDMA fence fallback timer expired: post-fault residue"),
    ("KERNEL-PAGE-FAULT", "no_retry_page_fault", "fail", "§10", PAGE_FAULT, "no-retry GPU page fault"),
    ("KERNEL-RING-TIMEOUT", "ring_timeout", "fail", "§10", RESET, "GPU ring timeout (a job hung the GPU)"),
    ("KERNEL-GPU-RESET", "gpu_reset", "fail", "§5, §10", RESET, "GPU reset (gpu_recovery=0 should halt instead)"),
    ("KERNEL-VRAM-LOST", "vram_lost", "fail", "§10", RESET, "VRAM lost in a GPU reset"),
    ("KERNEL-RING-TIMEOUT-SOFT", "ring_timeout_soft_recovered", "warn", "§10", RESET,
     "GPU ring timeout, soft recovered (the hung job was killed, the GPU kept running)"),
    ("KERNEL-DEVCOREDUMP", "devcoredump", "fail", "§10, §11", RESET,
     "the driver dumped a hung GPU's state (devcoredump): copy it before any reset"),
    ("KERNEL-RAS-FATAL", "ras_fatal_event", "fail", "§28", RAS,
     "RAS: uncorrectable hardware error (fatal interrupt) detected"),
    ("KERNEL-RAS-POISON", "ras_poison_consumed", "fail", "§28", RAS, "RAS: poison consumed"),
    ("KERNEL-RAS-UNCORRECTABLE", "ras_uncorrectable", "fail", "§28", RAS, "RAS: uncorrectable hardware errors"),
    ("KERNEL-RAS-DEFERRED", "ras_deferred", "fail", "§28", RAS, "RAS: deferred (poisoned, not yet consumed) errors"),
    ("KERNEL-QUEUE-EVICT-FAILED", "queue_evict_failed", "fail", "§10", WEDGED,
     "KFD failed to evict a queue: the GPU's scheduler is wedged"),
    ("KERNEL-RAS-BAD-PAGES", "ras_bad_page_threshold", "fail", "§28", RAS, "RAS: bad pages reached the threshold"),
    ("KERNEL-ACA-UNCORRECTABLE", "aca_uncorrectable", "fail", "§28", RAS, "ACA bank with an uncorrectable error"),
    ("KERNEL-HW-ERROR-RECOVERABLE", "recoverable_hw_error", "warn", "§28", RAS,
     "APEI hardware error record, severity recoverable"),
    ("KERNEL-BERT-FATAL", "fatal_hw_error", "fail", "§10", HOST_CRASH,
     "fatal hardware error record (BERT/APEI): the host crashed", "boot"),
    ("KERNEL-NPA-RSP-TIMEOUT", "npa_rsp_timeout", "fail", "§8", FABRIC, "fabric: NPA-RSP timeout from the remote GPU"),
    ("KERNEL-HELLO-SEND-FAILED", "hello_send_failed", "fail", "§8", FABRIC,
     "fabric: HELLO send to the remote GPU failed"),
    ("KERNEL-IMPORT-SETUP-FAILED", "import_setup_failed", "fail", "§8", FABRIC,
     "fabric: connection setup with the remote GPU failed"),
    ("KERNEL-XA-IMPORT-FAILED", "xa_import_failed", "fail", "§8", FABRIC,
     "fabric: XA import of a remote handle failed"),
    ("KERNEL-LSDMA-PIO-ERROR", "lsdma_pio_error", "fail", "§8", FABRIC, "fabric: LSDMA PIO error"),
    ("KERNEL-LSDMA-PIO-COPY", "lsdma_pio_copy_failed", "fail", "§8", FABRIC, "fabric: LSDMA PIO failed to copy memory"),
    ("KERNEL-UALINK-NPA-CONFIG", "ualink_npa_config_failed", "fail", "§6", UALINK_INIT,
     "UALink: failed to set NPA config"),
    ("KERNEL-UALINK-MANAGER", "ualink_manager_failed", "fail", "§6", UALINK_INIT,
     "UALink: failed to start the UALink manager"),
    ("KERNEL-UALINK-SW-INIT", "ualink_sw_init_failed", "fail", "§6", UALINK_INIT, "UALink: failed to init UALink sw"),
    ("KERNEL-UALINK-DEACTIVATED", "ualink_deactivating", "warn", "§6", UALINK_INIT,
     "UALink accelerator deactivated after the driver loaded"),
    ("KERNEL-UNKNOWN-ERROR", UNKNOWN_SIGNATURE, "warn", "§10", UNKNOWN,
     "an amdgpu/KFD/fabric error line no rule knows"),
))
BENIGN_MSR_SIGNATURES = {"fatal_hw_error", "recoverable_hw_error"}  # BERT records judged by their MSRs (§10)

for _rule in RULES:  # `k3doctor explain RULE` for every built-in rule
    remediation(_rule.id, f"{_rule.what} ({_rule.section})",
                f"kernel-health rule {_rule.id}: {_rule.what} (reference {_rule.section}); fires on the "
                f"parser signature `{_rule.signature}`, {_rule.severity.upper()}, judged since "
                f"{'boot' if _rule.since == 'boot' else 'amdgpu last loaded (window parameter)'}.\n"
                f"What to do ({_rule.remediation}):\n{remediation_text(_rule.remediation)}", unique=True)
REMEDIATIONS = (WEDGED, PAGE_FAULT, RESET, RAS, HOST_CRASH, FABRIC, UALINK_INIT, UNKNOWN)


class RuleError(ValueError):
    """A site rule or parameter in the inventory that cannot be used."""


def rules_for(params) -> tuple:
    """The built-in rules with the site's ``rules`` overrides/additions applied and ``silence`` removed."""
    table = with_site_rules(params.param("rules"))
    silenced = [s for s in params.param("silence") if RULE_ID.match(str(s))]
    unknown = [s for s in silenced if s not in table]
    if unknown:
        raise RuleError(f"silence: no rule {', '.join(map(str, unknown))} (rules: {', '.join(table)})")
    return tuple(rule for rule_id, rule in table.items() if rule_id not in silenced)


def silenced_lines(params) -> tuple:
    """The ``silence`` entries that are no rule id: regexes on a line's text that an unknown error line may match."""
    patterns = []
    for entry in params.param("silence"):
        if RULE_ID.match(str(entry)):
            continue
        if len(str(entry)) > 200:
            raise RuleError(f"silence: pattern longer than 200 characters: {str(entry)[:40]!r}...")
        try:
            patterns.append(re.compile(str(entry)))
        except re.error as exc:
            raise RuleError(f"silence: {entry!r} is neither a rule id nor a regex: {exc}") from None
    return tuple(patterns)


def with_site_rules(site) -> dict:
    """rule id -> Rule: the built-in table with the site's ``rules`` (overrides and additions) applied."""
    table = {rule.id: rule for rule in RULES}
    if not isinstance(site, dict):
        raise RuleError(f"rules: expected a mapping of rule id to rule fields, got {site!r}")
    for rule_id, spec in site.items():
        if not isinstance(spec, dict):
            raise RuleError(f"rules.{rule_id}: expected a mapping of rule fields, got {spec!r}")
        unknown = set(spec) - {"signature", "pattern", "severity", "section", "remediation", "what", "since"}
        if unknown:
            raise RuleError(f"rules.{rule_id}: unknown field(s) {', '.join(sorted(unknown))}")
        base = table.get(rule_id)
        if base is None:
            if ("signature" in spec) == ("pattern" in spec) or "remediation" not in spec:
                raise RuleError(f"rules.{rule_id}: a new rule needs a remediation code and either a signature "
                                "(parser name) or a pattern (regex)")
            base = Rule(rule_id, spec.get("signature", rule_id), "fail", "site rule", spec["remediation"], rule_id)
        rule = replace(base, **{k: str(v) for k, v in spec.items()})
        _validate(rule)
        table[rule_id] = rule
    return table


def _rules_problem(value, nodes) -> str | None:
    """kernel-health.rules, checked when the inventory is read (exit 3), not when the log is judged."""
    try:
        with_site_rules(value)
    except RuleError as exc:
        return f"kernel-health site rules that can be used ({exc})"
    return None


def _validate(rule: Rule) -> None:
    if rule.severity not in SEVERITIES:
        raise RuleError(f"rules.{rule.id}: severity {rule.severity!r} is not fail or warn")
    if rule.since not in SINCE:
        raise RuleError(f"rules.{rule.id}: since {rule.since!r} is not {' or '.join(SINCE)}")
    if rule.remediation not in REMEDIATIONS:
        raise RuleError(f"rules.{rule.id}: remediation {rule.remediation!r} is not one of {', '.join(REMEDIATIONS)}")
    if rule.pattern is None and rule.signature not in (*SIGNATURE_NAMES, UNKNOWN_SIGNATURE):
        raise RuleError(f"rules.{rule.id}: signature {rule.signature!r} is not a parser signature "
                        f"({', '.join(SIGNATURE_NAMES)})")
    if rule.pattern is not None:
        if len(rule.pattern) > 200:
            raise RuleError(f"rules.{rule.id}: pattern longer than 200 characters")
        try:
            re.compile(rule.pattern)
        except re.error as exc:
            raise RuleError(f"rules.{rule.id}: pattern {rule.pattern!r} is not a regex: {exc}") from None


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


def _window_problem(value, nodes) -> str | None:
    try:
        _check_window(str(value))
    except RuleError:
        return "amdgpu-load, boot or a number of seconds (above 0, at most a day) as a string"
    return None


def _check_window(window: str) -> None:
    if window in ("amdgpu-load", "boot"):
        return
    try:
        if 0 < float(window) <= MAX_SECONDS:
            return
    except ValueError:
        pass
    raise RuleError(f"window {window!r}: use amdgpu-load, boot or a number of seconds (at most a day)")


@dataclass
class NodeLog:
    """What one node's log contributes: its findings per rule, and its cards' PCI addresses."""

    node: str
    log: KernelLog
    bdfs: dict
    hits: list  # (rule, finding, window description)
    window: str  # the window of the amdgpu-load rules, said in the PASS


def _read_node(node: str, r, params) -> NodeLog:
    rules = rules_for(params)
    window = str(params.param("window"))
    _check_window(window)
    dmesg = r["dmesg"]
    if dmesg.truncated:
        raise ParseError(f"`{dmesg.command}` output was cut at the gather's size cap: the log was not fully read")
    log = KernelLog.read(dmesg, r.get("uptime"), r.get("boot_id"))
    site = tuple((rule.id, BLOCK if rule.severity == "fail" else WARN, re.compile(rule.pattern))
                 for rule in rules if rule.pattern is not None)
    benign = {m.lower() for m in params.param("benign_bert_msrs")}
    by_signature = {}
    for rule in rules:
        by_signature.setdefault(rule.id if rule.pattern is not None else rule.signature, []).append(rule)
    windows = {since: window_start(log, since, window) for since in SINCE}
    findings = scan(log.lines, site)
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
        shapes[shape] = SignatureHit(UNKNOWN_SIGNATURE, WARN, line.raw, line.timestamp, _bdf_of(line.text), None,
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
    setup failures towards one remote GPU) are named together, led by the first rule of the table,
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
        hits = sorted(group["hits"].values(), key=lambda h: order.get(h[0].id, len(order)))
        (lead, lead_found), seen = hits[0], group["seen"]
        found = [f for _, fs in hits for f in fs]
        ages = [seen.log.age_s(f.seconds) for f in found]
        known = [a for a in ages if a is not None]
        where = "" if seen_on == node else f", seen in {seen_on}'s kernel log"
        ids = ", ".join(f"{r.id}" + (f" x{len(fs)}" if len(fs) > 1 else "") for r, fs in hits)
        sections = ", ".join(dict.fromkeys(r.section for r, _ in hits))
        text = lead_found[-1].line.strip()[:160]
        worst = "fail" if any(r.severity == "fail" for r, _ in hits) else "warn"
        out.append(SEVERITIES[worst](
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


@check("kernel-health", title="no wedged-GPU, page-fault, reset, RAS, fabric or host-crash signature in the kernel log",
       scope="cluster", reads=_reads, remediation=REMEDIATIONS,
       params={"window": Param("amdgpu-load", validate=_window_problem), "rules": Param({}, validate=_rules_problem),
               "silence": [], "benign_bert_msrs": ["0xc00023e1"]})
def kernel_health(per_node, ctx):
    """§10 (checklist item 3): a node whose kernel log shows a wedged GPU, page faults, resets, RAS errors,
    §8 fabric failures or a fatal BERT record is excluded, even at 0% VRAM and with no container.

    Cluster scope so that an ``AccId`` seen in one node's log is put on the node and card that own it.
    """
    logs, owners, verdicts = {}, {}, []
    for node, r in per_node.items():
        params = ctx.node_settings(node)
        try:  # a node whose log is unreadable still owns its accel ids
            owners[node] = accel_ids(r["ualink"])
        except ReadingUnavailable:
            owners[node] = {}
        try:
            logs[node] = _read_node(node, r, params)
        except RuleError as exc:
            verdicts.append(error(f"kernel-health parameters: {exc}", node=node))
        except ReadingUnavailable as exc:
            verdicts.append(error(f"kernel log not readable, not judged: {exc} (a restricted dmesg needs root: "
                                  "`sudo: true` in the inventory)", node=node))
        except ParseError as exc:
            verdicts.append(error(f"kernel log not judged: {exc}", node=node))
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
