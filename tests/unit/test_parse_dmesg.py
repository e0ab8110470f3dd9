import pytest

from k3doctor.views.gpu import accid_to_location
from k3doctor.parsers import ParseError
from k3doctor.parsers import dmesg
from k3doctor.parsers.dmesg import parse_line, parse_log
from k3doctor.rules.kernel_log import RULES, SIGNATURES
from tests.corpus import load

SEVERITY = {rule.signature: rule.severity for rule in RULES}  # what the table says a hit is


def find_signatures(text):
    """The scanner with the rule table's signatures, as every reader of the kernel log calls it."""
    return dmesg.find_signatures(text, SIGNATURES)

# Constructed from reference §8 (importer-side fabric signatures, `amdgpu <BDF>:` prefix), §6
# (UALink activation/failure wording) and §10 (wedged-GPU lines and host-noise lines), in the
# four log flavours the doctor may read.  No real capture of these exists in the corpus.
FABRIC_LINES = """\
[ 8812.004211] amdgpu 0001:01:00.0: amdgpu: IMPORT: NPA-RSP timeout from remote AccId:51
[ 8812.004300] amdgpu 0001:01:00.0: amdgpu: LSDMA PIO error status bits 0x8000
[ 8812.004301] amdgpu 0001:01:00.0: amdgpu: LSDMA PIO failed to copy memory!
[ 8812.104400] amdgpu 0001:01:00.0: amdgpu: HELLO: Send failed to remote AccId:17
[ 8812.204500] amdgpu 0001:01:00.0: amdgpu: IMPORT: connection setup failed with remote AccId:17
[ 8812.304600] amdgpu 0001:01:00.0: amdgpu: IMPORT: XA import failed for handle:1f00:0a3c
"""
UALINK_LINES = """\
Oct 09 10:00:01 ct13 kernel: amdgpu 0002:01:00.0: amdgpu: UALINK: activating accelerator accel_id=49 (accel_state=3)
Oct 09 10:00:09 ct13 kernel: amdgpu 0002:01:00.0: amdgpu: UALINK: accelerator accel_id=49 is now ACTIVE
Oct 09 10:00:09 ct13 kernel: amdgpu 0003:01:00.0: amdgpu: Failed to init UALink sw r=-110
"""
WEDGED_AND_NOISE = """\
[Fri Oct  9 10:12:00 2026] mce: [Hardware Error]: CPU 0/48: Machine Check: 0 Bank 62: a0002000003d0800
[Fri Oct  9 10:12:00 2026] mana 7870:00:00.0 enP30832s1: Failed to query link config: -71
[Fri Oct  9 10:14:31 2026] amdgpu 0001:01:00.0: amdgpu: MES(0, 0) failed to respond to msg=REMOVE_QUEUE
[Fri Oct  9 10:14:32 2026] amdgpu 0001:01:00.0: amdgpu: MES ring buffer is full.
[Fri Oct  9 10:14:40 2026] [drm] Fence fallback timer expired on ring sdma0
[Fri Oct  9 10:15:00 2026] {1}[Hardware Error]: event severity: fatal
"""


def _names(findings):
    return [f.signature for f in findings]


def test_pagefault_noretry_corpus():
    findings = find_signatures(load("dmesg-amdgpu-pagefault-noretry.txt"))
    assert _names(findings) == ["no_retry_page_fault", "no_retry_page_fault"]
    first, second = findings
    assert first.bdf == "0000:c6:00.0" and SEVERITY[first.signature] == "fail"
    assert first.timestamp == "4778.915423"
    assert first.line.startswith("[ 4778.915423] amdgpu 0000:c6:00.0:")
    assert first.details == {
        "hub": "gfxhub0", "vmid": "3", "pasid": "32769", "process": "pt_main_thread", "pid": "12924",
        "address": "0x0000ae8570611000", "ih_client": "UTCL2", "fault_status": "0x00301031",
        "faulty_client": "TCP", "permission_faults": "0x3",
    }
    assert second.details["address"] == "0x0000ae8570612000"
    assert second.details["fault_status"] == "0x00000000"
    assert second.details["faulty_client"] == "CB"


def test_ring_timeout_gpu_reset_corpus():
    findings = find_signatures(load("dmesg-amdgpu-ring-timeout-gpu-reset.txt"))
    # the devcoredump lines (amdgpu_dev_coredump.c) lead the timeout: the dump a triage copies first
    assert _names(findings) == ["devcoredump", "ring_timeout", "gpu_reset", "mes_remove_queue_failed"]
    assert findings[0].details == {"coredump": "/sys/class/drm/card1/device/devcoredump/data"}
    timeout = findings[1]
    assert timeout.bdf == "0000:c5:00.0"
    assert timeout.details == {"ring": "gfx_0.0.0", "process": "code", "pid": "1048641", "ring_reset_started":
                               "gfx_0.0.0", "ring_reset_ring": "gfx_0.0.0", "ring_reset": "failed"}
    assert all(f.bdf == "0000:c5:00.0" for f in findings)


def test_iso_decoded_ras_fixture():
    text = load("dmesg-iso-amdgpu-ras-nodescraper-fixture.txt")
    # the RAS notes (`Poison is created`, the UMC `Error Address(PA)`) are known INFO lines (amdgpu_ras.c,
    # umc_v12_0.c), not findings of a rule; left out here as the rules see them
    findings = [f for f in find_signatures(text) if SEVERITY[f.signature] != "info"]
    assert [f.signature for f in find_signatures(text) if SEVERITY[f.signature] == "info"] == ["ras_poison_created",
                                                                                     "umc_error_address"]
    # the APEI record and the ACA dump are one finding each (their [Hardware Error] lines grouped)
    assert _names(findings) == ["ras_poison_consumed", "ras_bad_page_threshold", "recoverable_hw_error",
                                "aca_uncorrectable"]
    assert findings[0].bdf == "0000:01:00.0"
    assert findings[1].bdf == "0000:02:00.0"
    assert findings[1].details == {"bad_pages": "150", "threshold": "128"}
    assert findings[1].timestamp == "2026-01-07T10:02:01,345678-06:00"
    apei, aca = findings[2:]
    assert (apei.bdf, apei.details["severity"], apei.details["section_type"], len(apei.lines)) == (
        "0000:11:01.0", "recoverable", "PCIe error", 13)
    assert apei.details["vendor_id"] == "0x1002" and apei.details["device_id"] == "0x74a1"
    assert (aca.bdf, len(aca.lines), aca.details["banks"]["01/01"]["class"]) == ("0000:03:00.0", 11, ["poison"])
    lines = parse_log(text)
    assert len(lines) == 71
    assert all(line.level in ("info", "warn", "err") for line in lines)
    assert sum(1 for line in lines if line.level == "err" and "amdgpu" in line.text) == 16


def test_fabric_signatures_with_accid():
    findings = find_signatures(FABRIC_LINES)
    assert _names(findings) == [
        "npa_rsp_timeout", "lsdma_pio_error", "lsdma_pio_copy_failed",
        "hello_send_failed", "import_setup_failed", "xa_import_failed",
    ]
    assert all(f.bdf == "0001:01:00.0" and SEVERITY[f.signature] == "fail" for f in findings)
    assert [f.accid for f in findings] == [51, None, None, 17, 17, None]
    assert findings[1].details == {"status": "0x8000"}
    assert findings[5].details == {"handle": "1f00:0a3c"}
    assert accid_to_location(findings[0].accid, 4) == (13, 3)  # §8: AccId 51 = CT13, 4th accelerator


def test_ualink_lines_journalctl():
    activating, active, failed = find_signatures(UALINK_LINES)
    assert (activating.signature, activating.accid, activating.details) == (
        "ualink_activating", 49, {"accel_state": "3"})
    assert (active.signature, active.accid, SEVERITY[active.signature]) == ("ualink_active", 49, "info")
    assert (failed.signature, failed.bdf, failed.details) == ("ualink_sw_init_failed", "0003:01:00.0", {"r": "-110"})
    assert activating.timestamp == "Oct 09 10:00:01"


def test_wedged_signatures_and_host_noise():
    findings = find_signatures(WEDGED_AND_NOISE)
    assert _names(findings) == [
        "mes_remove_queue_failed", "mes_ring_full", "fence_fallback_timer_expired", "fatal_hw_error",
    ]
    assert findings[2].details == {"ring": "sdma0"} and findings[2].bdf is None
    assert findings[0].timestamp == "Fri Oct  9 10:14:31 2026"


def test_host_noise_alone_has_no_findings():
    mce_and_mana = "".join(WEDGED_AND_NOISE.splitlines(keepends=True)[:2])
    assert find_signatures(mce_and_mana) == []


@pytest.mark.parametrize("line, expected", [
    ("[ 4778.915423] amdgpu: x", ("4778.915423", None, "amdgpu: x")),
    ("[Sat Jan  7 14:25:56 2023] text", ("Sat Jan  7 14:25:56 2023", None, "text")),
    ("kern  :err   : 2026-01-07T10:02:00,123456-06:00 msg", ("2026-01-07T10:02:00,123456-06:00", "err", "msg")),
    ("kern  :warn  : [   12.000001] msg", ("12.000001", "warn", "msg")),
    ("Jan  7 14:25:56 host kernel: msg", ("Jan  7 14:25:56", None, "msg")),
    ("2026-10-09T10:00:00+0000 ct1 kernel: msg", ("2026-10-09T10:00:00+0000", None, "msg")),
    ("continuation without prefix", (None, None, "continuation without prefix")),
])
def test_parse_line_flavours(line, expected):
    parsed = parse_line(line)
    assert (parsed.timestamp, parsed.level, parsed.text) == expected
    assert parsed.raw == line


@pytest.mark.parametrize("text", ["", "  \n", "dmesg: read kernel buffer failed: Operation not permitted\n"])
def test_not_a_kernel_log_raises(text):
    with pytest.raises(ParseError):
        find_signatures(text)


@pytest.mark.parametrize("accid, location", [(0, (1, 0)), (3, (1, 3)), (4, (2, 0)), (51, (13, 3)), (63, (16, 3))])
def test_accid_to_location(accid, location):
    assert accid_to_location(accid, 4) == location  # a gfx1250 tray: 4 GPUs (§8)


# --- gaps closed in issue 7 ----------------------------------------------------------------------

OLD_RING_TIMEOUT = """\
[  312.441002] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, signaled seq=37811, emitted seq=37813
[  312.441010] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* Process information: process python3 pid 4471 \
thread python3:cs0 pid 4480
[  312.441020] amdgpu 0000:03:00.0: amdgpu: GPU reset begin!
"""


def test_older_ring_timeout_wording_keeps_its_process():
    timeout, reset = find_signatures(OLD_RING_TIMEOUT)
    assert (timeout.signature, timeout.bdf) == ("ring_timeout", None)
    assert timeout.details == {"ring": "gfx", "process": "python3", "pid": "4471"}
    assert (reset.signature, reset.bdf) == ("gpu_reset", "0000:03:00.0")


def test_detail_lines_never_attach_to_an_event_of_another_source():
    text = ("[ 10.000000] [drm] Fence fallback timer expired on ring sdma0\n"
            "[ 10.100000] ring gfx timeout\n"  # no PCI address, no drm tag: nothing can attach to it
            "[ 10.200000] amdgpu 0000:c6:00.0: amdgpu:  for process bystander pid 7 thread x pid 7)\n"
            "[ 10.300000] amdgpu 0000:c6:00.0: amdgpu: [gfxhub0] no-retry page fault "
            "(src_id:0 ring:24 vmid:3 pasid:9)\n"
            "[ 10.400000] amdgpu 0000:c7:00.0: amdgpu:  for process other pid 8 thread other pid 8)\n"
            "[ 10.500000] amdgpu 0000:c6:00.0: amdgpu:  for process owner pid 9 thread owner pid 9)\n")
    fence, timeout, fault = find_signatures(text)
    assert timeout.details == {"ring": "gfx"}
    assert fault.details["process"] == "owner" and fault.details["pid"] == "9"


def test_bert_records_group_and_mce_is_a_line_of_its_own():
    text = ("[    2.000000] mce: [Hardware Error]: CPU 0/48: Machine Check: 0 Bank 62: a0002000003d0800\n"
            "[    2.100000] BERT: Error records from previous boot:\n"
            "[    2.100001] [Hardware Error]: event severity: fatal\n"
            "[    2.100002] [Hardware Error]:  fru_text: Perr: CPU0\n"
            "[    2.100003] [Hardware Error]:    MSR Address: 0xC00023E1\n"
            "[    2.200000] {2}[Hardware Error]: event severity: corrected\n")
    fatal, corrected = find_signatures(text)
    assert fatal.signature == "fatal_hw_error" and fatal.details == {
        "severity": "fatal", "fru_text": "Perr: CPU0", "msr": ["0xc00023e1"]}
    assert corrected.signature == "hw_error_record" and len(fatal.lines) == 3


@pytest.mark.parametrize("text", [
    "Usage:\n dmesg [options]\n\nDisplay or control the kernel ring buffer.\n[ 1.0] not enough\n",
    "-- No entries --\n",
    "\x1c\x85 x\n",
])
def test_mostly_unprefixed_text_is_not_a_kernel_log(text):
    with pytest.raises(ParseError):
        parse_log(text)


def test_a_huge_accid_is_bounded_not_a_crash():
    findings = find_signatures("[ 1.000000] amdgpu 0001:01:00.0: IMPORT: NPA-RSP timeout from remote AccId:"
                               + "9" * 5000 + "\n")
    assert [f.accid for f in findings] == [9999999999]


@pytest.mark.parametrize("cut", [
    "[ 1.000000] amdgpu 0000:05:00.0: amdgpu: [gfxhub] no-retry page fa",
    "[ 1.000000] amdgpu 0000:05:00.0: amdgpu: MES failed to respond to msg=REMOVE_QU",
])
def test_a_kernel_log_cut_mid_line_is_a_parse_error_not_a_clean_log(cut):
    with pytest.raises(ParseError, match="mid-line"):
        find_signatures("[ 0.500000] Linux version 6.8.0\n" + cut)
