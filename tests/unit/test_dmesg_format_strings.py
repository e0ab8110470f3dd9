"""The kernel-log rules on lines generated from the amdgpu driver's own format strings (issue 21, item 3).

Each row of ``FORMATS`` is one printk format string as it stands in the driver source, with the
kernels that print it and the printk wrapper it goes through.  The wrapper decides the prefix:
``dev_info``/``dev_err`` add ``amdgpu <BDF>: amdgpu: `` (amdgpu.h's ``dev_fmt``; newer kernels drop
the second ``amdgpu: ``), ``RAS_EVENT_LOG`` (6.10+) goes through ``dev_printk`` and puts the RAS
event id ``{N}`` first, ``DRM_ERROR`` prints ``[drm:<func> [amdgpu]] *ERROR* `` and ``drm_info``
``amdgpu <BDF>: [drm] ``.  Every row is instantiated (``%d``, ``%s``, ``%016llx`` ... filled in) under
every prefix its wrapper can give, in every log flavour, and must give its signature.

Sources read: freebsd/drm-kmod (the Linux DRM tree per kernel version: the 5.4, 5.10, 5.15, 6.1 and 6.6
LTS branches and the drm_v6.7 ... drm_v6.11 tags and master) for amdgpu_job.c, amdgpu_device.c,
amdgpu_ras.c, amdgpu_mca.c, amdgpu_aca.c, amdgpu_umc.c, umc_v12_0.c, amdgpu_mes.c, mes_v11_0.c,
mes_v12_0.c, gmc_v9_0.c, gmc_v10_0.c, gmc_v11_0.c, gmc_v12_0.c, amdgpu_dev_coredump.c and
pm/swsmu/smu_cmn.c; torvalds/linux's amdgpu_job.c after the per-ring reset landed (marked 6.15+);
the patches adding amdgpu_dev_coredump.c's two drm_info lines and the RAS manager's amdgpu_ras_sys.c
(marked 6.18 ras_mgr).  Rows marked §29/§10 are the field wordings of reference §29/§10.
"""
import re

import pytest

from k3doctor.parsers import dmesg
from k3doctor.parsers.dmesg import parse_line
from k3doctor.rules.kernel_log import SIGNATURES
from tests.unit.test_check_kernel import FLAVOURS, reflavour


def find_signatures(text):
    return dmesg.find_signatures(text, SIGNATURES)

BDF = "0000:c1:00.0"
DEV = (f"amdgpu {BDF}: amdgpu: ", f"amdgpu {BDF}: ")  # dev_info/dev_err with and without amdgpu.h's dev_fmt
RAS_EVENT = (f"amdgpu {BDF}: {{7}}", f"amdgpu {BDF}: ")  # RAS_EVENT_LOG: dev_printk, event id when valid
DRM_ERROR = ("[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ",)
DRM_INFO = (f"amdgpu {BDF}: amdgpu: [drm] ", f"amdgpu {BDF}: [drm] ")
RAS_DEV_INFO = (f"amdgpu {BDF}: amdgpu: ", f"amdgpu {BDF}: ")
PLAIN_DRM_INFO = ("[drm] ",)  # DRM_INFO: no device named

# (family, signature, wrapper prefixes, kernels, format string as in the source, values for its %s)
FORMATS = (
    # amdgpu_job.c amdgpu_job_timedout()
    ("ring timeout", "ring_timeout", DRM_ERROR, "5.4-6.10", "ring %s timeout, signaled seq=%u, emitted seq=%u\n",
     ("gfx",)),
    ("ring timeout", "ring_timeout", DEV, "6.11+", "ring %s timeout, signaled seq=%u, emitted seq=%u\n",
     ("gfx_0.0.0",)),
    ("ring timeout", "ring_timeout_soft_recovered", DRM_ERROR, "5.4-6.10", "ring %s timeout, but soft recovered\n",
     ("sdma0",)),
    ("ring timeout", "ring_timeout_soft_recovered", DEV, "6.11+", "ring %s timeout, but soft recovered\n",
     ("comp_1.0.0",)),
    # amdgpu_device.c amdgpu_device_gpu_recover() / amdgpu_device_should_recover_gpu()
    ("recovery", "gpu_recovery_disabled", PLAIN_DRM_INFO, "5.4", "GPU recovery disabled.\n", ()),
    ("recovery", "gpu_recovery_disabled", DEV, "5.10+", "GPU recovery disabled.\n", ()),
    ("recovery", "gpu_reset", DEV, "5.4+", "GPU reset begin!\n", ()),
    ("recovery", "gpu_reset", DEV, "5.4+", "GPU reset(%d) failed\n", ()),
    ("recovery", "gpu_reset", DEV, "5.4+", "GPU reset(%d) succeeded!\n", ()),
    ("recovery", "gpu_reset", DEV, "6.15+", "GPU Recovery Failed: %d\n", ()),
    ("recovery", "vram_lost", PLAIN_DRM_INFO, "5.4-6.11", "VRAM is lost due to GPU reset!\n", ()),
    ("recovery", "vram_lost", DEV, "§29 (newer)", "VRAM is lost due to GPU reset!\n", ()),
    # amdgpu_dev_coredump.c amdgpu_coredump() (drm_info)
    ("devcoredump", "devcoredump", DRM_INFO, "6.15+", "AMDGPU device coredump file has been created\n", ()),
    # amdgpu_ras.c: the fatal interrupt, then the RAS manager's wording (amdgpu_ras_sys.c, RAS_DEV_INFO)
    ("ERREVENT", "ras_fatal_event", DEV, "5.10-6.9",
     "uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!\n", ()),
    ("ERREVENT", "ras_fatal_event", RAS_EVENT, "6.10+",
     "uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!\n", ()),
    ("ERREVENT", "ras_fatal_event", RAS_DEV_INFO, "6.18 ras_mgr",
     "{%llu} Uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!\n", ()),
    # amdgpu_ras.c amdgpu_ras_error_print_error_data() / amdgpu_ras_error_generate_report()
    ("RAS count", "ras_uncorrectable", DEV, "5.15-6.9", "%ld uncorrectable hardware errors detected in %s block\n",
     ("umc",)),
    ("RAS count", "ras_uncorrectable", DEV, "6.8-6.9", "%lld new uncorrectable hardware errors detected in %s block\n",
     ("gfx",)),
    ("RAS count", "ras_uncorrectable", DEV, "6.8-6.9",
     "%lld uncorrectable hardware errors detected in total in %s block\n", ("sdma",)),
    ("RAS count", "ras_uncorrectable", RAS_EVENT, "6.10+",
     "socket: %d, die: %d, %lld new uncorrectable hardware errors detected in %s block\n", ("umc",)),
    ("RAS count", "ras_uncorrectable", RAS_EVENT, "6.10+",
     "socket: %d, die: %d, %lld uncorrectable hardware errors detected in total in %s block\n", ("xgmi_wafl",)),
    ("RAS count", "ras_uncorrectable", RAS_EVENT, "6.10+",
     "socket: %d, die: %d %ld uncorrectable hardware errors detected in %s block\n", ("mmhub",)),
    ("RAS count", "ras_uncorrectable", RAS_EVENT, "6.10+",
     "%ld uncorrectable hardware errors detected in %s block\n", ("hdp",)),
    ("RAS count", "ras_uncorrectable", DEV, "6.6+",
     "%ld %s hardware errors detected in %s, instance: %d, memory_id: %d\n", ("uncorrectable", "umc")),
    ("RAS count", "ras_poison_consumed", RAS_EVENT, "6.11+", "GPU reset for %s RAS poison consumption is issued!\n",
     ("umc",)),
    # mes_v11_0.c / mes_v12_0.c / amdgpu_mes.c
    ("MES", "mes_remove_queue_failed", DEV, "6.1-6.8", "MES failed to response msg=%d\n", ()),  # %d = 3: REMOVE_QUEUE
    ("MES", "mes_remove_queue_failed", DEV, "6.9+", "MES failed to respond to msg=%s\n", ("REMOVE_QUEUE",)),
    ("MES", "mes_remove_queue_failed", DEV, "6.12+", "MES(%d) failed to respond to msg=%s\n", ("REMOVE_QUEUE",)),
    ("MES", "mes_remove_queue_failed", DEV, "6.1+", "failed to remove hardware queue, queue id = %d\n", ()),
    ("MES", "mes_no_response", DEV, "6.9+", "MES failed to respond to msg=%s (%s)\n", ("MISC", "WRITE_REG")),
    ("MES", "mes_no_response", DEV, "6.12+", "MES(%d) failed to respond to msg=%s (%s)\n",
     ("MISC", "WAIT_REG_MEM")),
    ("MES", "mes_ring_full", DEV, "6.11+", "MES ring buffer is full.\n", ()),
    # §29's field wordings of the same families (legacy-rocm-build #4909, #5844, #6127; reference §10)
    ("MES", "mes_remove_queue_failed", DEV, "§10", "MES(%d, %d) failed to respond to msg=%s\n", ("REMOVE_QUEUE",)),
    ("MES", "mes_remove_queue_failed", DEV, "§29", "failed to remove hardware queue from MES, doorbell=0x%x\n", ()),
    ("MES", "mes_no_response", DEV, "§29", "MES might be in unrecoverable state, issue a GPU reset\n", ()),
    ("MES", "queue_evict_failed", ("amdgpu: ",), "§29", "Failed to evict queue %d\n", ()),
    ("recovery", "gpu_reset", DRM_INFO, "§29", "device wedged, but recovered through reset\n", ()),
    ("RAS count", "ras_deferred", RAS_EVENT, "6.10+",
     "socket: %d, die: %d, %lld new deferred hardware errors detected in %s block\n", ("umc",)),
    ("RAS count", "ras_deferred", DEV, "6.11+", "%ld new deferred hardware errors detected\n", ()),
    ("RAS count", "ras_poison_created", RAS_EVENT, "6.10+", "Poison is created\n", ()),
    ("RAS count", "umc_error_address", DEV, "6.10+",
     "Error Address(PA):0x%-10llx Row:0x%-4x Col:0x%-2x Bank:0x%x Channel:0x%x\n", ()),
    # gmc_v9_0.c (MI300-class) and gmc_v10/11/12 page faults
    ("page fault", "no_retry_page_fault", DEV, "5.15-6.6",
     "[%s] %s page fault (src_id:%u ring:%u vmid:%u pasid:%u, for process %s pid %d thread %s pid %d)\n",
     ("gfxhub0", "no-retry", "python3", "python3")),
    ("page fault", "no_retry_page_fault", DEV, "6.7+", "[%s] %s page fault (src_id:%u ring:%u vmid:%u pasid:%u)\n",
     ("mmhub0", "no-retry")),
    ("page fault", "retry_page_fault", DEV, "6.7+", "[%s] %s page fault (src_id:%u ring:%u vmid:%u pasid:%u)\n",
     ("gfxhub0", "retry")),
    ("page fault", "no_retry_page_fault", DEV, "5.15-6.6",
     "[%s] page fault (src_id:%u ring:%u vmid:%u pasid:%u, for process %s pid %d thread %s pid %d)\n",
     ("gfxhub0", "pt_main_thread", "pt_main_thread")),
    ("page fault", "no_retry_page_fault", DEV, "6.7+", "[%s] page fault (src_id:%u ring:%u vmid:%u pasid:%u)\n",
     ("gfxhub0",)),
    # pm/swsmu/smu_cmn.c __smu_cmn_reg_print_error() and the hung-SMU guard
    ("SMU", "smu_hung", DEV, "5.15+",
     "SMU: I'm not done with your previous command: SMN_C2PMSG_66:0x%08X SMN_C2PMSG_82:0x%08X", ()),
    ("SMU", "smu_hung", DEV, "6.7+", "SMU is in hanged state, failed to send smu message!\n", ()),
    ("SMU", "smu_message_failed", DEV, "5.15+", "SMU: unknown command: index:%d param:0x%08X message:%s",
     ("GetMetricsTable",)),
    ("SMU", "smu_message_failed", DEV, "5.15+",
     "SMU: valid command, bad prerequisites: index:%d param:0x%08X message:%s", ("SetSoftMinGfxclk",)),
    ("SMU", "smu_message_failed", DEV, "5.15+", "SMU: I'm very busy for your command: index:%d param:0x%08X "
     "message:%s", ("TransferTableSmu2Dram",)),
    ("SMU", "smu_message_failed", DEV, "5.15+", "SMU: I'm debugging!", ()),
    ("SMU", "smu_message_failed", DEV, "5.15+", "SMU: response:0x%08X for index:%d param:0x%08X message:%s?",
     ("GetMetricsTable",)),
    # §31.3's MI325X hard hang (aiter #3139) and the bad-page threshold at load: the field wordings
    ("hard hang", "smu_response_lost", DEV, "§31.3", "SMU: response:0xFFFFFFFF for index:%d param:0x%08X message:%s?",
     ("GetMetricsTable",)),
    ("hard hang", "kiq_fence_timeout", DEV, "§31.3", "timeout waiting for kiq fence\n", ()),
    ("hard hang", "kfd_quiesce_failed", DEV, "§31.3", "Failed to quiesce KFD\n", ()),
    ("hard hang", "device_lost_from_bus", DEV, "§31.3", "device lost from bus!\n", ()),
    ("hard hang", "ras_device_disabled", DEV, "§31.3", "RAS Intr triggered, device disabled!!\n", ()),
    ("RAS count", "ras_records_exceed_threshold", DEV, "§31.3", "RAS records:%d exceed threshold:%d\n", ()),
    ("RAS count", "ras_records_exceed_threshold", DEV, "§31.3",
     "GPU will not be initialized. Replace this GPU or increase the threshold\n", ()),
)

# ACA bank dumps (amdgpu_mca.c amdgpu_mca_smu_mca_bank_dump(), amdgpu_aca.c aca_smu_bank_dump()):
# (header prefix, kernels, the bank-register format); registers as the source lists them.
MCA_REGS = ("STATUS", "ADDR", "MISC0", "IPID", "SYND")
ACA_REGS = ("CONTROL", "STATUS", "ADDR", "MISC", "CONFIG", "IPID", "SYND", "DESTAT", "DEADDR", "CONTROL_MASK")
ACA_DUMPS = (
    (f"amdgpu {BDF}: amdgpu: [Hardware error] ", "6.7-6.8", "aca entry[%02d].{reg}=0x%016llx", MCA_REGS),
    (f"amdgpu {BDF}: amdgpu: [Hardware Error]: ", "6.9", "aca entry[%02d].{reg}=0x%016llx", MCA_REGS),
    (f"amdgpu {BDF}: {{1}}[Hardware Error]: ", "6.10+", "aca entry[%02d].{reg}=0x%016llx", MCA_REGS),
    (f"amdgpu {BDF}: amdgpu: [Hardware Error]: ", "6.9", "ACA[%02d/%02d].{reg}=0x%016llx", ACA_REGS),
    (f"amdgpu {BDF}: {{3}}[Hardware Error]: ", "6.10+", "ACA[%02d/%02d].{reg}=0x%016llx", ACA_REGS),
    (f"amdgpu {BDF}: [Hardware Error]: ", "6.10+ (no event id)", "ACA[%02d/%02d].{reg}=0x%016llx", ACA_REGS),
)
UC_STATUS = "baa000000000080b"  # valid, UC, PCC (seen on an MI300X, ROCm issue thread of 2024-11)
CE_STATUS = "d820000000060150"  # valid, no UC/PCC/poison/deferred: corrected


def instantiate(fmt: str, strings=()) -> str:
    """The line printk makes of ``fmt``: each ``%s`` from ``strings`` in order, numbers made up."""
    values = iter(strings)
    numbers = {"d": "3", "u": "41", "ld": "2", "lld": "2", "llu": "7", "02d": "01", "08X": "0000A1B2",
               "016llx": "0000000000000000", "x": "1f", "llx": "1f"}

    def fill(match):
        spec = match.group(1)
        return next(values) if spec == "s" else numbers[spec]
    return re.sub(r"%-?\d{0,2}(s|llu|lld|ld|llx|016llx|08X|02d|d|u|x)", fill, fmt).rstrip("\n")


def stamped(lines) -> str:
    return "".join(f"[{100.0 + i:12.6f}] {line}\n" for i, line in enumerate(lines))


CASES = [(family, signature, prefix, kernels, fmt, strings)
         for family, signature, prefixes, kernels, fmt, strings in FORMATS for prefix in prefixes]


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("family,signature,prefix,kernels,fmt,strings", CASES,
                         ids=[f"{c[0]}|{c[3]}|{c[4][:40]}|{c[2][:24]}" for c in CASES])
def test_every_format_string_gives_its_signature(family, signature, prefix, kernels, fmt, strings, flavour):
    line = prefix + instantiate(fmt, strings)
    findings = find_signatures(reflavour(stamped([line]), flavour))
    assert [f.signature for f in findings] == [signature], line
    if prefix.startswith("amdgpu "):
        assert findings[0].bdf == BDF


def test_the_table_covers_every_family_the_issue_names():
    """Guards the table itself: a family dropped from it would silently stop being tested."""
    families = {row[0] for row in FORMATS}
    assert {"ring timeout", "recovery", "devcoredump", "ERREVENT", "RAS count", "MES", "page fault", "SMU",
            "hard hang"} <= families
    assert len(FORMATS) == 60 and len(ACA_DUMPS) == 6


def aca_dump(prefix: str, fmt: str, regs, banks) -> list:
    """One bank dump per bank, as aca_smu_bank_dump()/amdgpu_mca_smu_mca_bank_dump() print it."""
    lines = []
    for index, status in enumerate(banks):
        lines.append(prefix + "Accelerator Check Architecture events logged")
        for reg in regs:
            value = status if reg == "STATUS" else "0000000000000000"
            bank = f"[{index:02d}/{len(banks):02d}]" if fmt.startswith("ACA") else f"[{index:02d}]"
            lines.append(prefix + fmt.split("[")[0] + bank + f".{reg}=0x{value}")
    return lines


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("prefix,kernels,fmt,regs", ACA_DUMPS, ids=[f"{d[1]}|{d[2][:12]}" for d in ACA_DUMPS])
def test_every_aca_bank_wording_is_one_record_per_gpu_judged_by_its_status(prefix, kernels, fmt, regs, flavour):
    uc = find_signatures(reflavour(stamped(aca_dump(prefix, fmt, regs, [CE_STATUS, UC_STATUS, CE_STATUS])), flavour))
    assert [(f.signature, f.bdf) for f in uc] == [("aca_uncorrectable", BDF)]
    assert len(uc[0].details["banks"]) == 3 and sorted(b["class"][0] for b in uc[0].details["banks"].values()) == [
        "corrected", "corrected", "pcc"]
    ce = find_signatures(reflavour(stamped(aca_dump(prefix, fmt, regs, [CE_STATUS, CE_STATUS])), flavour))
    assert [f.signature for f in ce] == ["aca_correctable"]


def test_mca_banks_numbered_from_zero_again_are_kept_apart():
    """amdgpu_mca.c numbers the banks of each query from 00: a UE query then a CE query reuse entry[00]."""
    prefix = f"amdgpu {BDF}: {{2}}[Hardware Error]: "
    lines = aca_dump(prefix, "aca entry[%02d]", MCA_REGS, [UC_STATUS]) + aca_dump(prefix, "aca entry[%02d]", MCA_REGS,
                                                                                  [CE_STATUS])
    [finding] = find_signatures(stamped(lines))
    assert finding.signature == "aca_uncorrectable" and set(finding.details["banks"]) == {"00", "00#2"}
    assert finding.details["event"] == "2"


# A real MI300X log (ROCm GitHub issue thread, 2024-11, kernel 6.10+ wording): the fatal interrupt on one
# GPU, a UC/PCC ACA bank on a second, correctable xgmi banks on a third, all under RAS event {1}.
MI300X_EVENT = """\
[76914.152141] amdgpu 0000:dd:00.0: {1}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!
[76914.152174] amdgpu 0000:3d:00.0: amdgpu: The cp might be in an unrecoverable state due to an unsuccessful \
queues preemption
[76914.152926] amdgpu 0000:1b:00.0: {1}[Hardware Error]: Accelerator Check Architecture events logged
[76914.152940] amdgpu 0000:1b:00.0: {1}[Hardware Error]: aca entry[00].STATUS=0xbaa000000000080b
[76914.152948] amdgpu 0000:1b:00.0: {1}[Hardware Error]: aca entry[00].ADDR=0x0000000000000000
[76914.152953] amdgpu 0000:1b:00.0: {1}[Hardware Error]: aca entry[00].MISC0=0xd008000100000000
[76914.152957] amdgpu 0000:1b:00.0: {1}[Hardware Error]: aca entry[00].IPID=0x0001d02e1f007900
[76914.152961] amdgpu 0000:1b:00.0: {1}[Hardware Error]: aca entry[00].SYND=0x000000005d003e1b
[76914.156884] amdgpu: Failed to restore process queues
[76914.184889] amdgpu 0000:9d:00.0: {1}[Hardware Error]: Accelerator Check Architecture events logged
[76914.184894] amdgpu 0000:9d:00.0: {1}[Hardware Error]: aca entry[00].STATUS=0xd820000000060150
[76914.184898] amdgpu 0000:9d:00.0: {1}[Hardware Error]: aca entry[00].ADDR=0x0000000000000000
[76914.185363] amdgpu 0000:9d:00.0: {1}[Hardware Error]: Accelerator Check Architecture events logged
[76914.185366] amdgpu 0000:9d:00.0: {1}[Hardware Error]: aca entry[01].STATUS=0xd820000000060150
[76914.185370] amdgpu 0000:9d:00.0: {1}[Hardware Error]: aca entry[01].ADDR=0x0000000000000000
[76914.190522] amdgpu 0000:9d:00.0: {1}socket: 6, die: 1, 1533 new correctable hardware errors detected in \
xgmi_wafl block
[76914.214195] amdgpu 0000:dd:00.0: amdgpu: GPU reset begin!
"""


def test_mi300x_uncorrectable_event_names_each_gpu_and_groups_banks_by_event():
    findings = find_signatures(MI300X_EVENT)
    assert [(f.signature, f.bdf) for f in findings] == [
        ("ras_fatal_event", "0000:dd:00.0"), ("aca_uncorrectable", "0000:1b:00.0"),
        ("aca_correctable", "0000:9d:00.0"), ("gpu_reset", "0000:dd:00.0")]
    assert findings[0].details == {"event": "1", "source": "ERREVENT_ATHUB_INTERRUPT"}
    assert findings[1].details["event"] == "1" and findings[1].details["banks"]["00"]["class"] == ["pcc", "uc"]
    assert len(findings[2].details["banks"]) == 2  # two dumps of one GPU under one event: one record
    assert parse_line(findings[1].line).text.startswith("amdgpu 0000:1b:00.0: {1}")
