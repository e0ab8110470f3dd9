"""kernel-health's rules as rows (reference §6, §8, §10, §28, §29, §31.3): one row per kernel-log rule, saying
what fires it (``pattern``, searched in each line's text, or the ``[Hardware Error]`` record kind the log scanner
groups), what it means, how bad it is (``fail``/``warn``; ``info``: a line known to be no fault, so never an
unknown error), the reference section, the remediation code and ``sample``: the log line that proves the row
(tests/unit/test_kernel_log_rules.py fires every row from its own sample). Also the §10 noise that is never a
finding, and the site's own rules and silences from the inventory, validated when the inventory is read.

The log scanner (``k3doctor.parsers.dmesg``, layer 1) cannot import this table (layer 5): every reader of the
kernel log hands it ``SIGNATURES``, the rows' patterns compiled once (``signatures_of`` for a table with the
site's rules). The rows are in match order: the first row whose pattern matches a line names it, so a row
that is a narrower wording of another (a soft-recovered ring timeout, the SMU's all-ones answer) comes first.
Adding a rule that is one line: a row here (and a remediation text, unless an existing one fits).

A site adds a rule or overrides one with ``rules: {ID: {...}}`` and silences one with
``silence: [ID | regex]`` in ``checks: {kernel-health: ...}``; ``k3doctor explain ID`` explains
every built-in rule (each row registers its text here).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from k3doctor.deadline import MAX_SECONDS
from k3doctor.parsers.dmesg import RECORD_KINDS, Signature
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
UNKNOWN_SIGNATURE = "unknown_error_line"  # no line shape: an err+ line from a GPU source that no row matched
# Lines of §10 (and §29) known to be harmless: never an unknown error, whatever their level.
BENIGN_LINES = tuple(re.compile(p) for p in (
    r"^mce: \[Hardware Error\]: CPU \d{1,5}/\d{1,5}: Machine Check: 0 Bank 62: ",  # §10 warm-reboot residue
    r"^mana .{0,80}Failed to query link config: -71",  # §10 noise (SSH uses that NIC)
))
RULE_ID = re.compile(r"^[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)+$")  # a silence entry of this shape names a rule


@dataclass(frozen=True)
class Rule:
    """One kernel-log rule: what fires it, what that means, how bad, what to do, and the line that proves it."""

    id: str
    signature: str  # the name its hits carry (a site rule may fire on a built-in row's signature instead)
    severity: str  # fail | warn | info (a known line: no finding, never an unknown error)
    section: str
    remediation: str | None  # None for an info row
    what: str
    pattern: str | None = None  # regex on a line's text; None: a [Hardware Error] record kind, or the unknown line
    sample: str = ""  # the log line(s), without the timestamp, that fire the row
    since: str = "amdgpu-load"  # amdgpu-load (a reload clears it) | boot (a fact of the boot)
    details: bool = False  # the lines after it from the same source complete it (process, pid, fault status)

    @property
    def name(self) -> str:
        """The row's name in `k3doctor list -v` and `explain` (its id)."""
        return self.id


_BDF = "amdgpu 0000:c6:00.0: "
_ACCID = r"(?P<accid>[0-9]{1,10})"  # the remote card's accel id: k3doctor names its node and card (§6)
RULES = tuple(Rule(*fields[:6], **fields[6]) for fields in (
    # §10 wedged GPU / post-fault residue (Helios-R runbook: any `MES.*remove.?queue` is a stop).  MES wordings
    # (mes_v11_0.c / mes_v12_0.c / amdgpu_mes.c, kernels 6.1-6.15): "MES failed to response msg=%d" (6.1-6.8, the
    # opcode as a number: REMOVE_QUEUE is 3), "MES failed to respond to msg=%s[ (%s)]", "MES(%d) failed to respond
    # to msg=%s" (mes_v12), "failed to remove hardware queue[, queue id = %d]".
    ("KERNEL-MES-REMOVE-QUEUE", "mes_remove_queue_failed", "fail", "§10", WEDGED,
     "MES failed to respond to REMOVE_QUEUE: the GPU is wedged",
     dict(pattern=r"(?i)MES.{0,120}?remove.?queue|MES(?:\([\d, ]{1,12}\))? failed to respon(?:se|d to) msg=3\b"
                  r"|failed to remove hardware queue",
          sample=f"{_BDF}MES failed to respond to msg=REMOVE_QUEUE")),
    ("KERNEL-MES-NO-RESPONSE", "mes_no_response", "fail", "§10", WEDGED,
     "MES failed to respond to a scheduler message: the GPU is wedged",
     dict(pattern=r"MES(?:\([\d, ]{1,12}\))? failed to respon(?:se|d to) msg=(?P<msg>\w{1,40})"
                  r"|MES might be in unrecoverable state",  # the latter: §29 (legacy-rocm-build #4909)
          sample=f"{_BDF}MES failed to respond to msg=SET_HW_RSRC")),
    ("KERNEL-MES-RING-FULL", "mes_ring_full", "fail", "§10", WEDGED, "MES ring buffer is full: post-fault residue",
     dict(pattern=r"MES ring buffer is full", sample=f"{_BDF}MES ring buffer is full.")),
    ("KERNEL-GPU-RECOVERY-DISABLED", "gpu_recovery_disabled", "fail", "§5, §10", WEDGED,
     "a GPU hung and was left halted (GPU recovery disabled): wedged until the tray is reset",
     dict(pattern=r"GPU recovery disabled\.", sample="[drm] GPU recovery disabled.")),  # amdgpu_device.c, gpu_recovery=0
    ("KERNEL-SMU-HUNG", "smu_hung", "fail", "§10", WEDGED, "the SMU no longer answers: the GPU is wedged",
     # smu_cmn.c: the SMU did not answer (its mailbox still holds the previous command) or is hung.
     dict(pattern=r"SMU: I'm not done with your previous command|SMU is in hanged state",
          sample=f"{_BDF}SMU: I'm not done with your previous command: SMN_C2PMSG_66:0x00000006")),
    ("KERNEL-SDMA-FENCE-TIMEOUT", "fence_fallback_timer_expired", "fail", "§10", WEDGED,
     "SDMA fence fallback timer expired: post-fault residue",
     dict(pattern=r"(?i)fence fallback timer expired on ring (?P<ring>[^\s,]{1,64})",
          sample=f"{_BDF}Fence fallback timer expired on ring sdma0")),
    ("KERNEL-PAGE-FAULT", "no_retry_page_fault", "fail", "§10", PAGE_FAULT, "no-retry GPU page fault",
     # gmc_v9_0.c "[%s] %s page fault (src_id:%u ring:%u vmid:%u pasid:%u[, for process ...])" with %s = "retry" |
     # "no-retry"; gmc_v10/v11/v12 "[%s] page fault (src_id:...)" (no retry word).
     dict(pattern=r"\[(?P<hub>\w{1,32})\] (?:no-retry )?page fault"
                  r"(?: \(src_id:\d{1,10} ring:\d{1,10} vmid:(?P<vmid>\d{1,10}) pasid:(?P<pasid>\d{1,10})[,)])?",
          sample=f"{_BDF}[gfxhub0] no-retry page fault (src_id:0 ring:24 vmid:3 pasid:32769)", details=True)),
    # amdgpu_job.c: "ring %s timeout, but soft recovered" (the job was killed, the GPU kept running) and "ring %s
    # timeout, signaled seq=%u, emitted seq=%u" - DRM_ERROR (`[drm:amdgpu_job_timedout [amdgpu]] *ERROR* `) up to
    # 6.10, dev_err (`amdgpu <BDF>: [amdgpu: ]`) since; rings named `gfx` or `gfx_0.0.0`.  Soft first: narrower.
    ("KERNEL-RING-TIMEOUT-SOFT", "ring_timeout_soft_recovered", "warn", "§10", RESET,
     "GPU ring timeout, soft recovered (the hung job was killed, the GPU kept running)",
     dict(pattern=r"\bring (?P<ring>[^\s,]{1,64}) timeout, but soft recovered",
          sample=f"{_BDF}ring gfx_0.0.0 timeout, but soft recovered")),
    ("KERNEL-RING-TIMEOUT", "ring_timeout", "fail", "§10", RESET, "GPU ring timeout (a job hung the GPU)",
     dict(pattern=r"\bring (?P<ring>[^\s,]{1,64}) timeout",
          sample=f"{_BDF}ring gfx_0.0.0 timeout, signaled seq=2662395, emitted seq=2662397", details=True)),
    ("KERNEL-GPU-RESET", "gpu_reset", "fail", "§5, §10", RESET, "GPU reset (gpu_recovery=0 should halt instead)",
     dict(pattern=r"GPU reset begin|GPU reset\(\d{1,10}\) (?:failed|succeeded)|GPU Recovery Failed"
                  r"|device wedged, but recovered through reset",  # the last: drm_dev_wedged_event (§29)
          sample=f"{_BDF}GPU reset begin!")),
    ("KERNEL-VRAM-LOST", "vram_lost", "fail", "§10", RESET, "VRAM lost in a GPU reset",
     dict(pattern=r"VRAM is lost due to GPU reset", sample=f"{_BDF}VRAM is lost due to GPU reset!")),
    # amdgpu_dev_coredump.c (6.14+): drm_info "AMDGPU device coredump file has been created" then "Check your
    # /sys/class/drm/card%d/device/devcoredump/data": the dump a triage copies first.
    ("KERNEL-DEVCOREDUMP", "devcoredump", "fail", "§10, §11", RESET,
     "the driver dumped a hung GPU's state (devcoredump): copy it before any reset",
     dict(pattern=r"AMDGPU device coredump file has been created",
          sample=f"{_BDF}[drm] AMDGPU device coredump file has been created", details=True)),
    # The fatal (ATHUB) interrupt: amdgpu_ras.c "uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!"
    # (dev_info up to 6.9, RAS_EVENT_LOG with its "{%llu}" event id since 6.10) and the RAS manager's "{%llu}
    # Uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!" (amdgpu_ras_sys.c).
    ("KERNEL-RAS-FATAL", "ras_fatal_event", "fail", "§28", RAS,
     "RAS: uncorrectable hardware error (fatal interrupt) detected",
     dict(pattern=r"(?:\{(?P<event>\d{1,20})\} ?)?[Uu]ncorrectable hardware error\((?P<source>\w{1,40})\) detected",
          sample=f"{_BDF}{{1}}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!")),
    ("KERNEL-RAS-POISON", "ras_poison_consumed", "fail", "§28", RAS, "RAS: poison consumed",
     dict(pattern=r"(?i)poison is consumed|RAS poison consumption is issued",
          sample=f"{_BDF}amdgpu: GPU reset for poison consumption is issued; poison is consumed by client 12")),
    # amdgpu_ras.c: "%ld uncorrectable hardware errors detected in %s block" (5.x-), "%lld new uncorrectable
    # hardware errors detected in %s block", "... detected in total in %s block" (6.8+, "socket: %d, die: %d" before
    # them since 6.10), and the per-instance "%ld %s hardware errors detected in %s, instance: ..."
    ("KERNEL-RAS-UNCORRECTABLE", "ras_uncorrectable", "fail", "§28", RAS, "RAS: uncorrectable hardware errors",
     dict(pattern=r"(?P<count>\d{1,10}) (?:new )?uncorrectable hardware errors detected in "
                  r"(?:total in )?(?P<block>\w{1,32})(?: block|, instance)",
          sample=f"{_BDF}2 uncorrectable hardware errors detected in umc block")),
    # Deferred (not yet consumed) uncorrected errors: amdgpu_ras.c "... deferred hardware errors detected in [total
    # in ]%s block" (6.10+), amdgpu_umc.c "%ld new deferred hardware errors detected" (6.11+).
    ("KERNEL-RAS-DEFERRED", "ras_deferred", "fail", "§28", RAS, "RAS: deferred (poisoned, not yet consumed) errors",
     dict(pattern=r"(?P<count>\d{1,10}) (?:new )?deferred hardware errors detected",
          sample=f"{_BDF}1 new deferred hardware errors detected")),
    ("KERNEL-QUEUE-EVICT-FAILED", "queue_evict_failed", "fail", "§10", WEDGED,
     "KFD failed to evict a queue: the GPU's scheduler is wedged",
     dict(pattern=r"Failed to evict queue (?P<queue>\d{1,10})", sample="amdgpu: Failed to evict queue 4")),  # §29
    ("KERNEL-RAS-BAD-PAGES", "ras_bad_page_threshold", "fail", "§28", RAS, "RAS: bad pages reached the threshold",
     dict(pattern=r"Saved bad pages (?P<bad_pages>\d{1,10}) reaches threshold value (?P<threshold>\d{1,10})",
          sample=f"{_BDF}amdgpu: Saved bad pages 150 reaches threshold value 128")),
    ("KERNEL-ACA-UNCORRECTABLE", "aca_uncorrectable", "fail", "§28", RAS, "ACA bank with an uncorrectable error",
     dict(sample=f"{_BDF}{{3}}[Hardware Error]: Accelerator Check Architecture events logged\n"
                 f"{_BDF}{{3}}[Hardware Error]: ACA[01/01].STATUS=0xbaa0000000000813")),  # a record: valid + UC + PCC
    # §31.3 bad-page retirement past the threshold at load: the GPU is not initialised (missing from the node)
    ("KERNEL-RAS-RECORDS-THRESHOLD", "ras_records_exceed_threshold", "fail", "§31.3", RAS,
     "RAS: retired pages exceed the bad-page threshold: the GPU was not initialised",
     dict(pattern=r"RAS records:\s?(?P<bad_pages>\d{1,10}) exceed threshold:\s?(?P<threshold>\d{1,10})"
                  r"|GPU will not be initialized\. Replace this GPU or increase the threshold",
          sample=f"{_BDF}amdgpu: RAS records:130 exceed threshold:128")),
    # §31.3 the MI325X hard hang (aiter #3139): the SMU mailbox reads all ones (the device is off the bus), the KIQ
    # stops answering, KFD cannot quiesce, the device drops off the bus or RAS disables it.
    ("KERNEL-KIQ-FENCE-TIMEOUT", "kiq_fence_timeout", "fail", "§31.3", HARD_HANG,
     "KIQ fence timeout: the GPU stopped answering (MI325X hard hang)",
     dict(pattern=r"timeout waiting for kiq fence", sample=f"{_BDF}timeout waiting for kiq fence")),
    # Before KERNEL-SMU-MESSAGE-FAILED: the same "SMU: response:" line with 0xFFFFFFFF is this hang, not a refusal.
    ("KERNEL-SMU-RESPONSE-LOST", "smu_response_lost", "fail", "§31.3", HARD_HANG,
     "SMU answered 0xFFFFFFFF: the GPU is off the bus (MI325X hard hang)",
     dict(pattern=r"SMU: response:0x[Ff]{8}\b",
          sample=f"{_BDF}SMU: response:0xFFFFFFFF for index:6 param:0x00000000 message:GetSmuVersion?")),
    ("KERNEL-SMU-MESSAGE-FAILED", "smu_message_failed", "warn", "§10", WEDGED, "the SMU refused or failed a message",
     dict(pattern=r"SMU: (?:unknown command|valid command, bad prerequisites|I'm very busy for your command"
                  r"|I'm debugging!|response:0x[0-9A-Fa-f]{1,8} for index)",
          sample=f"{_BDF}SMU: I'm very busy for your command: index:7 param:0x00000000 message:GetDriverIfVersion")),
    ("KERNEL-KFD-QUIESCE-FAILED", "kfd_quiesce_failed", "fail", "§31.3", HARD_HANG,
     "KFD could not quiesce the GPU (MI325X hard hang)",
     dict(pattern=r"Failed to quiesce KFD", sample=f"{_BDF}Failed to quiesce KFD")),
    ("KERNEL-DEVICE-LOST", "device_lost_from_bus", "fail", "§31.3", HARD_HANG, "the GPU was lost from the PCIe bus",
     dict(pattern=r"device lost from bus!", sample=f"{_BDF}device lost from bus!")),
    ("KERNEL-RAS-DEVICE-DISABLED", "ras_device_disabled", "fail", "§31.3", HARD_HANG,
     "a RAS interrupt disabled the GPU (MI325X hard hang)",
     dict(pattern=r"RAS Intr triggered, device disabled!", sample=f"{_BDF}RAS Intr triggered, device disabled!!")),
    ("KERNEL-HW-ERROR-RECOVERABLE", "recoverable_hw_error", "warn", "§28", RAS,
     "APEI hardware error record, severity recoverable",
     dict(sample="{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 0\n"
                 "{1}[Hardware Error]: event severity: recoverable")),  # a record
    ("KERNEL-BERT-FATAL", "fatal_hw_error", "fail", "§10", HOST_CRASH,
     "fatal hardware error record (BERT/APEI): the host crashed",
     dict(since="boot", sample="{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1\n"
                               "{1}[Hardware Error]: event severity: fatal")),  # a record
    # §8 fabric data path (importer side)
    ("KERNEL-NPA-RSP-TIMEOUT", "npa_rsp_timeout", "fail", "§8", FABRIC, "fabric: NPA-RSP timeout from the remote GPU",
     dict(pattern=rf"IMPORT: NPA-RSP timeout from remote AccId:\s?{_ACCID}",
          sample=f"{_BDF}IMPORT: NPA-RSP timeout from remote AccId:49")),
    ("KERNEL-HELLO-SEND-FAILED", "hello_send_failed", "fail", "§8", FABRIC, "fabric: HELLO send to the remote GPU failed",
     dict(pattern=rf"HELLO: Send failed to remote AccId:\s?{_ACCID}",
          sample=f"{_BDF}HELLO: Send failed to remote AccId:49")),
    ("KERNEL-IMPORT-SETUP-FAILED", "import_setup_failed", "fail", "§8", FABRIC,
     "fabric: connection setup with the remote GPU failed",
     dict(pattern=rf"IMPORT: connection setup failed with remote AccId:\s?{_ACCID}",
          sample=f"{_BDF}IMPORT: connection setup failed with remote AccId:49")),
    ("KERNEL-XA-IMPORT-FAILED", "xa_import_failed", "fail", "§8", FABRIC, "fabric: XA import of a remote handle failed",
     dict(pattern=r"IMPORT: XA import failed for handle:\s?(?P<handle>[0-9a-fA-Fx:]{1,40})",
          sample=f"{_BDF}IMPORT: XA import failed for handle: 0x31:0x2")),
    ("KERNEL-LSDMA-PIO-ERROR", "lsdma_pio_error", "fail", "§8", FABRIC, "fabric: LSDMA PIO error",
     dict(pattern=r"LSDMA PIO error status bits (?P<status>0x[0-9a-fA-F]{1,16})",
          sample=f"{_BDF}LSDMA PIO error status bits 0x4")),
    ("KERNEL-LSDMA-PIO-COPY", "lsdma_pio_copy_failed", "fail", "§8", FABRIC, "fabric: LSDMA PIO failed to copy memory",
     dict(pattern=r"LSDMA PIO failed to copy memory", sample=f"{_BDF}LSDMA PIO failed to copy memory")),
    # §6 UALink bring-up
    ("KERNEL-UALINK-NPA-CONFIG", "ualink_npa_config_failed", "fail", "§6", UALINK_INIT,
     "UALink: failed to set NPA config",
     dict(pattern=r"Failed to set NPA config", sample=f"{_BDF}Failed to set NPA config")),
    ("KERNEL-UALINK-MANAGER", "ualink_manager_failed", "fail", "§6", UALINK_INIT,
     "UALink: failed to start the UALink manager",
     dict(pattern=r"Failed to start UALink manager", sample=f"{_BDF}Failed to start UALink manager")),
    ("KERNEL-UALINK-SW-INIT", "ualink_sw_init_failed", "fail", "§6", UALINK_INIT, "UALink: failed to init UALink sw",
     dict(pattern=r"Failed to init UALink sw r=(?P<r>-?\d{1,6})", sample=f"{_BDF}Failed to init UALink sw r=-110")),
    ("KERNEL-UALINK-DEACTIVATED", "ualink_deactivating", "warn", "§6", UALINK_INIT,
     "UALink accelerator deactivated after the driver loaded",
     dict(pattern=r"UALINK: deactivating accelerator", sample=f"{_BDF}UALINK: deactivating accelerator accel_id=49")),
    # An err+ line from a GPU source that no row matched: checks/kernel.py finds it (by level), one per message shape.
    ("KERNEL-UNKNOWN-ERROR", UNKNOWN_SIGNATURE, "warn", "§10", UNKNOWN, "an amdgpu/KFD/fabric error line no rule knows",
     dict(sample=f"{_BDF}XGMI link retrain count 3 on link 2")),
    # Known lines that are no fault (info): a line a row knows is never an unknown error line.
    ("KERNEL-RETRY-PAGE-FAULT", "retry_page_fault", "info", "§10", None, "XNACK replay page fault: not a fault",
     dict(pattern=r"\[(?P<hub>\w{1,32})\] retry page fault",
          sample=f"{_BDF}[gfxhub0] retry page fault (src_id:0 ring:0 vmid:3 pasid:32790)")),
    ("KERNEL-RAS-POISON-CREATED", "ras_poison_created", "info", "§28", None,
     "RAS: poison created (the deferred error's own note)",
     dict(pattern=r"Poison is created", sample=f"{_BDF}amdgpu: Poison is created")),  # amdgpu_ras.c
    ("KERNEL-UMC-ERROR-ADDRESS", "umc_error_address", "info", "§28", None, "RAS: a record's page address",
     dict(pattern=r"Error Address\(PA\):\s?0x[0-9a-fA-F]{1,16}",  # umc_v12_0.c
          sample=f"{_BDF}amdgpu: Error Address(PA):0x1234567000 Row:0x2 Col:0x0 Bank:0x5 Channel:0x3")),
    ("KERNEL-UALINK-ACTIVATING", "ualink_activating", "info", "§6", None, "UALink: a card is activating",
     dict(pattern=rf"UALINK: activating accelerator accel_id={_ACCID} \(accel_state=(?P<accel_state>\d{{1,3}})\)",
          sample=f"{_BDF}UALINK: activating accelerator accel_id=49 (accel_state=1)")),
    ("KERNEL-UALINK-ACTIVE", "ualink_active", "info", "§6", None, "UALink: a card is active",
     dict(pattern=rf"UALINK: accelerator accel_id={_ACCID} is now ACTIVE",
          sample=f"{_BDF}UALINK: accelerator accel_id=49 is now ACTIVE")),
    ("KERNEL-HW-ERROR-RECORD", "hw_error_record", "info", "§28", None,
     "a [Hardware Error] record of another severity (corrected, info)",
     dict(sample="{2}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 2\n"
                 "{2}[Hardware Error]: event severity: corrected")),  # a record
    ("KERNEL-ACA-CORRECTABLE", "aca_correctable", "info", "§28", None, "ACA bank with a corrected error",
     dict(sample=f"{_BDF}{{4}}[Hardware Error]: Accelerator Check Architecture events logged\n"
                 f"{_BDF}{{4}}[Hardware Error]: ACA[01/01].STATUS=0x8000000000000000")),  # a record: valid only
))
RULE_SEVERITIES = (*SEVERITIES, "info")  # a built-in row may also be a known line that is no fault


def signatures_of(rules) -> tuple:
    """The scanner's ``Signature`` for each row with a pattern, in row order (first match wins; one per name)."""
    found = {}
    for rule in rules:
        if rule.pattern is not None and rule.signature not in found:
            found[rule.signature] = Signature(rule.signature, re.compile(rule.pattern), rule.details)
    return tuple(found.values())


SIGNATURES = signatures_of(RULES)  # what every reader of the kernel log hands the scanner
# Every signature name a hit can carry: the rows' and the [Hardware Error] records' the scanner groups.
SIGNATURE_NAMES = tuple(dict.fromkeys((*(r.signature for r in RULES if r.signature != UNKNOWN_SIGNATURE),
                                       *RECORD_KINDS)))
BENIGN_MSR_SIGNATURES = {"fatal_hw_error", "recoverable_hw_error"}  # BERT records judged by their MSRs (§10)

for _rule in RULES:  # `k3doctor explain RULE` for every built-in rule
    _fires = f"the line shape `{_rule.pattern}`" if _rule.pattern else f"the log's `{_rule.signature}`"
    remediation(_rule.id, f"{_rule.what} ({_rule.section})",
                f"kernel-health rule {_rule.id}: {_rule.what} (reference {_rule.section}); fires on {_fires}, "
                f"{_rule.severity.upper()}, judged since "
                f"{'boot' if _rule.since == 'boot' else 'amdgpu last loaded (window parameter)'}; e.g.\n  "
                + _rule.sample.replace("\n", "\n  ") + "\n"
                + (f"What to do ({_rule.remediation}):\n{REGISTRY.remediations[_rule.remediation].text}"
                   if _rule.remediation else "A known line that is no fault: never a finding, never an unknown line."),
                unique=True)
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
    if rule.severity not in RULE_SEVERITIES:
        raise RuleError(f"rules.{rule.id}: severity {rule.severity!r} is not fail, warn or info")
    if rule.since not in SINCE:
        raise RuleError(f"rules.{rule.id}: since {rule.since!r} is not {' or '.join(SINCE)}")
    if rule.remediation not in REMEDIATIONS and not (rule.severity == "info" and rule.remediation is None):
        raise RuleError(f"rules.{rule.id}: a {rule.severity} rule needs a remediation code, one of "
                        f"{', '.join(REMEDIATIONS)} (got {rule.remediation!r})")
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

