"""kernel-health's rules as rows (reference §6, §8, §10, §28, §29, §31.3): parser signature -> rule id,
severity, reference section, remediation code; the §10 noise that is never a finding; and the
site's own rules and silences from the inventory, validated when the inventory is read.

A site adds a rule or overrides one with ``rules: {ID: {...}}`` and silences one with
``silence: [ID | regex]`` in ``checks: {kernel-health: ...}``; ``k3doctor explain ID`` explains
every built-in rule (each row registers its text here).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from k3doctor.deadline import MAX_SECONDS
from k3doctor.parsers.dmesg import SIGNATURE_NAMES
from k3doctor.registry import REGISTRY, remediation

SEVERITIES = ("fail", "warn")
SINCE = ("amdgpu-load", "boot")  # where a rule's window starts (window parameter "amdgpu-load")

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

HARD_HANG = remediation("GPU-HARD-HANG", "a GPU hung hard: off the bus, SMU/KIQ silent, disabled by RAS", """
`timeout waiting for kiq fence`, `SMU: response:0xFFFFFFFF` (the SMU mailbox reads all ones), `Failed to quiesce
KFD`, `device lost from bus!` and `RAS Intr triggered, device disabled!!` are the MI325X hard hang (aiter #3139:
the `MI300/` fmha_v3 kernels at long prefill; §31.3). The GPU no longer answers on PCIe: no reset or driver
reload brings it back. Cold-reboot the node (BMC power cycle, not a warm reboot), then check it again; until the
aiter fix is in the image, keep long-prefill runs off the fmha_v3 path on MI325X.
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

    @property
    def name(self) -> str:
        """The row's name in `k3doctor list -v` and `explain` (its id)."""
        return self.id


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
    ("KERNEL-RAS-RECORDS-THRESHOLD", "ras_records_exceed_threshold", "fail", "§31.3", RAS,
     "RAS: retired pages exceed the bad-page threshold: the GPU was not initialised"),
    ("KERNEL-KIQ-FENCE-TIMEOUT", "kiq_fence_timeout", "fail", "§31.3", HARD_HANG,
     "KIQ fence timeout: the GPU stopped answering (MI325X hard hang)"),
    ("KERNEL-SMU-RESPONSE-LOST", "smu_response_lost", "fail", "§31.3", HARD_HANG,
     "SMU answered 0xFFFFFFFF: the GPU is off the bus (MI325X hard hang)"),
    ("KERNEL-KFD-QUIESCE-FAILED", "kfd_quiesce_failed", "fail", "§31.3", HARD_HANG,
     "KFD could not quiesce the GPU (MI325X hard hang)"),
    ("KERNEL-DEVICE-LOST", "device_lost_from_bus", "fail", "§31.3", HARD_HANG, "the GPU was lost from the PCIe bus"),
    ("KERNEL-RAS-DEVICE-DISABLED", "ras_device_disabled", "fail", "§31.3", HARD_HANG,
     "a RAS interrupt disabled the GPU (MI325X hard hang)"),
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
                f"What to do ({_rule.remediation}):\n{REGISTRY.remediations[_rule.remediation].text}", unique=True)
REMEDIATIONS = (WEDGED, PAGE_FAULT, RESET, RAS, HOST_CRASH, FABRIC, UALINK_INIT, HARD_HANG, UNKNOWN)


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


def rules_problem(value, nodes) -> str | None:
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



def window_problem(value, nodes) -> str | None:
    try:
        check_window(str(value))
    except RuleError:
        return "amdgpu-load, boot or a number of seconds (above 0, at most a day) as a string"
    return None


def check_window(window: str) -> None:
    if window in ("amdgpu-load", "boot"):
        return
    try:
        if 0 < float(window) <= MAX_SECONDS:
            return
    except ValueError:
        pass
    raise RuleError(f"window {window!r}: use amdgpu-load, boot or a number of seconds (at most a day)")

