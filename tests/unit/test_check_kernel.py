"""kernel-health judged on real-format kernel logs (the shared corpus, in all four flavours) and sysfs data.

The corpus holds real captures of the page-fault and ring-timeout/reset/MES signatures and a
fixture of the RAS/APEI/ACA vocabulary.  The §6/§8/§10 lines no capture holds (fabric, MES ring
full, SDMA fence, VRAM lost, RAS count, BERT, UALink init) are the reference's own wording, put
into a real capture's log so they are judged in the same surroundings.
"""
import datetime
import json
import re

import pytest
from k3doctor.checks import kernel

from k3doctor import testing
from k3doctor.inventory.load import parse_inventory
from k3doctor.inventory.types import InventoryError, Node, Settings
from k3doctor.parsers.dmesg import parse_line
from k3doctor.readings import CommandReading, FileReading, Readings, Unavailable
from k3doctor.registry import REGISTRY
from k3doctor.results import Status
from tests.corpus import load

CHECK = REGISTRY.checks["kernel-health"]
FLAVOURS = ("default", "ctime", "iso", "journal")
BASE = datetime.datetime(2026, 10, 9, 10, 0, 0)
BOOT = "0b7c1f5e-8f0a-4d5e-9a51-2f6c3b9d1e77"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
NODES = {"ct13": 13, "ct14": 14, "ct16": 16, "ct17": 17}

# §8 importer-side fabric lines, §10 wedged/residue/reset lines, §28 RAS count, §6 UALink failures:
# the reference's wording, prefixed `amdgpu <BDF>:` as §8 says.
FABRIC = """\
amdgpu 0001:01:00.0: amdgpu: IMPORT: NPA-RSP timeout from remote AccId:62
amdgpu 0001:01:00.0: amdgpu: HELLO: Send failed to remote AccId:62
amdgpu 0001:01:00.0: amdgpu: IMPORT: connection setup failed with remote AccId:62
amdgpu 0001:01:00.0: amdgpu: IMPORT: XA import failed for handle:1f00:0a3c
amdgpu 0001:01:00.0: amdgpu: LSDMA PIO error status bits 0x8000
amdgpu 0001:01:00.0: amdgpu: LSDMA PIO failed to copy memory!
"""
RESIDUE = """\
amdgpu 0002:01:00.0: amdgpu: MES ring buffer is full.
[drm] Fence fallback timer expired on ring sdma0
amdgpu 0002:01:00.0: amdgpu: VRAM is lost due to GPU reset!
amdgpu 0002:01:00.0: amdgpu: 2 uncorrectable hardware errors detected in umc block
"""
UALINK = """\
amdgpu 0003:01:00.0: amdgpu: Failed to set NPA config
amdgpu 0003:01:00.0: amdgpu: Failed to start UALink manager
amdgpu 0003:01:00.0: amdgpu: Failed to init UALink sw r=-110
amdgpu 0003:01:00.0: amdgpu: UALINK: deactivating accelerator accel_id=52
"""
# §10: a real host crash (fatal BERT, fru_text Perr: CPU0, bank 19 = MSR 0xc0002131) ...
BERT_FATAL = """\
BERT: Error records from previous boot:
[Hardware Error]: event severity: fatal
[Hardware Error]:  Error 0, type: fatal
[Hardware Error]:  fru_text: Perr: CPU0
[Hardware Error]:   section_type: IA32/X64 processor error
[Hardware Error]:    MSR Address: 0xc0002131
[Hardware Error]:    00000000: baa000000005080b
"""
# ... and the §10 noise: warm-reboot mce residue with its BERT record for MSR 0xc00023e1 (bank 62), mana -71.
NOISE = """\
mce: [Hardware Error]: CPU 0/48: Machine Check: 0 Bank 62: a0002000003d0800
BERT: Error records from previous boot:
[Hardware Error]: event severity: fatal
[Hardware Error]:  Error 0, type: fatal
[Hardware Error]:   section_type: IA32/X64 processor error
[Hardware Error]:    MSR Address: 0xc00023e1
mana 7870:00:00.0 enP30832s1: Failed to query link config: -71
"""
LOAD = "[drm] amdgpu kernel modesetting enabled."


def reflavour(text: str, flavour: str, start: float = 0.0) -> str:
    """The same log in another prefix flavour (monotonic stamps kept as offsets from BASE)."""
    out = []
    for i, raw in enumerate(text.splitlines()):
        line = parse_line(raw)
        secs = line.seconds if line.seconds is not None else start + i
        t = BASE + datetime.timedelta(seconds=secs)
        prefix = {"default": f"[{secs:12.6f}] ",
                  "ctime": f"[{t.strftime('%a %b %e %H:%M:%S %Y')}] ",
                  "iso": f"kern  :err   : {t.strftime('%Y-%m-%dT%H:%M:%S')},{t.microsecond:06d}+00:00 ",
                  "journal": f"{t.strftime('%b %d %H:%M:%S')} ct13 kernel: "}[flavour]
        out.append(prefix + line.text)
    return "\n".join(out) + "\n"


def stamped(text: str, start: float) -> str:
    """Constructed lines with monotonic stamps from ``start`` (one per second)."""
    return "".join(f"[{start + i:12.6f}] {line}\n" for i, line in enumerate(text.splitlines()))


def node_readings(log: str, tray: int = 13, uptime: float = 200000.0, rc: int = 0, bdfs=None, errors: str = "",
                  errors_rc: int = 0):
    """What the gather returns for one node: dmesg, uptime, boot id, cards' uevent and accel_id.

    Card c sits at PCI ``000c:01:00.0`` (the rig's and §8's layout) unless ``bdfs`` lists the four addresses.
    """
    uevents, ualink = {}, {}
    for c, bdf in enumerate(bdfs or [f"{c:04x}:01:00.0" for c in range(4)]):
        d = f"/sys/class/drm/card{c}/device"
        uevents[f"{d}/uevent"] = FileReading(f"{d}/uevent", f"DRIVER=amdgpu\nPCI_SLOT_NAME={bdf}\n")
        ualink[f"{d}/ualink/accel_id"] = FileReading(f"{d}/ualink/accel_id", f"{4 * (tray - 1) + 3 - c}\n")
        ualink[f"{d}/ualink/accel_state"] = FileReading(f"{d}/ualink/accel_state", "active\n")
    return Readings({"dmesg": CommandReading("dmesg", rc, log, "" if rc == 0 else "dmesg: read kernel buffer "
                                             "failed: Operation not permitted"),
                     "errors": CommandReading("dmesg --level=err,crit,alert,emerg", errors_rc, errors,
                                              "" if errors_rc == 0 else "dmesg: unknown level 'err'"),
                     "uptime": FileReading("/proc/uptime", f"{uptime:.2f} 1.00\n"),
                     "boot_id": FileReading(BOOT_ID, f"{BOOT}\n"),
                     "uevents": uevents, "ualink": ualink})


def judge(logs: dict, node_params=None, **params):
    """Judge {node: log text or Readings}; ``node_params`` overrides parameters on single nodes."""
    per_node = {n: v if isinstance(v, Readings) else node_readings(v, NODES[n]) for n, v in logs.items()}
    nodes = {n: Node(n, n, Settings(gpus_per_node=4, checks={"kernel-health": {
        **params, **(node_params or {}).get(n, {})}})) for n in per_node}
    return testing.judge(CHECK, per_node, settings=Settings(gpus_per_node=4), nodes=nodes, **params)


def found(verdicts):
    """Non-PASS verdicts as (status, node, gpu, rule ids) in a stable order (one verdict per fault)."""
    return sorted(((v.status.value, v.node, v.gpu, *sorted(v.evidence.get("rules", ()))) for v in verdicts
                   if v.status != Status.PASS), key=lambda f: (f[0], f[1], str(f[2]), f[3:]))


def clean(node="ct14", tray=14):
    return reflavour(load("dmesg-amdgpu-pagefault-noretry.txt").splitlines()[0].replace(
        "[gfxhub0] no-retry page fault", "ring gfx_0.0.0 uses VM inv eng 0 on hub 0") + "\n", "default")


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_page_fault_corpus_is_one_finding_on_its_card(flavour):
    log = reflavour(load("dmesg-amdgpu-pagefault-noretry.txt"), flavour)
    verdicts = judge({"ct13": node_readings(log, 13, bdfs=[f"0000:c{b}:00.0" for b in "6789"])})
    assert found(verdicts) == [("FAIL", "ct13", 0, "KERNEL-PAGE-FAULT")]
    [v] = [v for v in verdicts if v.status == Status.FAIL]
    assert v.remediation == "GPU-PAGE-FAULT" and v.evidence["rules"] == {"KERNEL-PAGE-FAULT": 2}
    assert "PCI 0000:c6:00.0 = card0" in v.message and "[KERNEL-PAGE-FAULT x2; §10]" in v.message
    assert v.evidence["details"]["faulty_client"] == "CB"  # the newest event's own detail lines
    if flavour == "default":
        assert v.evidence["ages_s"] == [round(200000.0 - 4778.915423), round(200000.0 - 4778.920325)]
        assert "newest 195221s ago" in v.message
    else:
        assert "age unknown" in v.message


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_ring_timeout_reset_and_mes_corpus(flavour):
    log = reflavour(load("dmesg-amdgpu-ring-timeout-gpu-reset.txt"), flavour)
    verdicts = judge({"ct13": node_readings(log, 13, bdfs=[f"0000:c{b}:00.0" for b in "5678"])})
    assert found(verdicts) == [("FAIL", "ct13", 0, "KERNEL-DEVCOREDUMP", "KERNEL-GPU-RESET", "KERNEL-RING-TIMEOUT"),
                               ("FAIL", "ct13", 0, "KERNEL-MES-REMOVE-QUEUE")]
    timeout = next(v for v in verdicts if v.evidence.get("rule") == "KERNEL-RING-TIMEOUT")
    assert timeout.evidence["details"] == {"ring": "gfx_0.0.0", "process": "code", "pid": "1048641",
                                           "ring_reset_started": "gfx_0.0.0", "ring_reset_ring": "gfx_0.0.0",
                                           "ring_reset": "failed"}
    assert timeout.evidence["rules"]["KERNEL-DEVCOREDUMP"] == 1


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_ras_fixture_poison_bad_pages_aca_and_apei(flavour):
    log = reflavour(load("dmesg-iso-amdgpu-ras-nodescraper-fixture.txt"), flavour)
    verdicts = judge({"ct13": node_readings(log, bdfs=[f"0000:0{c + 1}:00.0" for c in range(4)])})
    assert found(verdicts) == [
        ("FAIL", "ct13", 0, "KERNEL-RAS-POISON"), ("FAIL", "ct13", 1, "KERNEL-RAS-BAD-PAGES"),
        ("FAIL", "ct13", 2, "KERNEL-ACA-UNCORRECTABLE"), ("WARN", "ct13", None, "KERNEL-HW-ERROR-RECOVERABLE")]
    aca = next(v for v in verdicts if v.evidence.get("rule") == "KERNEL-ACA-UNCORRECTABLE")
    assert aca.evidence["details"]["banks"]["01/01"] == {
        "status": "0x98000800003e0000", "ipid": "0x0001100138430401", "class": ["poison"]}
    assert len(aca.evidence["lines"]) == SAMPLE if (SAMPLE := kernel.SAMPLE_LINES) else False
    apei = next(v for v in verdicts if v.evidence.get("rule") == "KERNEL-HW-ERROR-RECOVERABLE")
    assert "PCI 0000:11:01.0 is no card in ct13's sysfs" in apei.message


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_fabric_accid_is_put_on_the_node_that_owns_it(flavour):
    """§8: ct13's log names AccId 62; ct16 card1 holds accel_id 62, so the fault is ct16 card1's."""
    real = next(line for line in load("dmesg-amdgpu-ring-timeout-gpu-reset.txt").splitlines()
                if "DMUB hardware initialized" in line)  # a real line that is no fault (its first is a devcoredump now)
    log = reflavour(real + "\n" + stamped(FABRIC, 9000), flavour)
    verdicts = judge({"ct13": log, "ct14": clean(), "ct16": clean(), "ct17": clean()})
    assert found(verdicts) == [
        ("FAIL", "ct13", 1, "KERNEL-LSDMA-PIO-COPY", "KERNEL-LSDMA-PIO-ERROR", "KERNEL-XA-IMPORT-FAILED"),
        ("FAIL", "ct16", 1, "KERNEL-HELLO-SEND-FAILED", "KERNEL-IMPORT-SETUP-FAILED", "KERNEL-NPA-RSP-TIMEOUT")]
    npa = next(v for v in verdicts if v.evidence.get("rule") == "KERNEL-NPA-RSP-TIMEOUT")
    assert npa.message.startswith("fabric: NPA-RSP timeout from the remote GPU [KERNEL-NPA-RSP-TIMEOUT, "
                                  "KERNEL-HELLO-SEND-FAILED, KERNEL-IMPORT-SETUP-FAILED; §8]: remote AccId:62 = "
                                  "ct16 card1 (sysfs accel_id), seen in ct13's kernel log; newest ")
    assert npa.evidence["seen_in"] == "ct13" and npa.remediation == "FABRIC-IMPORT-FAILED"
    assert {v.node for v in verdicts if v.status == Status.PASS} == {"ct14", "ct17"}


def test_unknown_accid_is_said_so_on_the_node_that_saw_it():
    log = stamped("amdgpu 0001:01:00.0: amdgpu: IMPORT: NPA-RSP timeout from remote AccId:70\n", 500)
    [v] = [v for v in judge({"ct13": log, "ct14": clean()}) if v.status != Status.PASS]
    assert (v.node, v.gpu, v.status) == ("ct13", None, Status.FAIL)
    assert "remote AccId:70 is owned by no node: §6 formula: tray CT18, accelerator 2" in v.message


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_residue_reset_ras_and_ualink_rules(flavour):
    log = reflavour(load("dmesg-amdgpu-pagefault-noretry.txt").splitlines()[0].replace(
        "[gfxhub0] no-retry page fault", "ring gfx_0.0.0 uses VM inv eng 0 on hub 0") + "\n"
        + stamped(RESIDUE + UALINK, 7000), flavour)
    assert found(judge({"ct13": log})) == [
        ("FAIL", "ct13", 2, "KERNEL-MES-RING-FULL"), ("FAIL", "ct13", 2, "KERNEL-RAS-UNCORRECTABLE"),
        ("FAIL", "ct13", 2, "KERNEL-VRAM-LOST"),
        ("FAIL", "ct13", 3, "KERNEL-UALINK-DEACTIVATED", "KERNEL-UALINK-MANAGER", "KERNEL-UALINK-NPA-CONFIG",
         "KERNEL-UALINK-SW-INIT"),
        ("FAIL", "ct13", None, "KERNEL-SDMA-FENCE-TIMEOUT")]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_fatal_bert_counts_over_the_whole_boot_and_the_warm_reboot_record_is_noise(flavour):
    before_load = stamped(BERT_FATAL, 2.0) + stamped(NOISE, 3.0) + f"[   15.220114] {LOAD}\n"
    verdicts = judge({"ct13": reflavour(before_load, flavour)})
    assert found(verdicts) == [("FAIL", "ct13", None, "KERNEL-BERT-FATAL")]
    [v] = [v for v in verdicts if v.status == Status.FAIL]
    assert v.evidence["details"]["fru_text"] == "Perr: CPU0" and v.evidence["details"]["msr"] == ["0xc0002131"]
    assert v.remediation == "HOST-CRASHED"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_noise_alone_gives_a_pass(flavour):
    verdicts = judge({"ct13": reflavour(stamped(NOISE, 3.0) + f"[   15.220114] {LOAD}\n", flavour)})
    assert [v.status for v in verdicts] == [Status.PASS]


def test_window_since_amdgpu_load_drops_what_a_reload_cleared():
    wedged = stamped("amdgpu 0001:01:00.0: amdgpu: MES(0, 0) failed to respond to msg=REMOVE_QUEUE\n", 100.0)
    log = wedged + f"[  400.000000] {LOAD}\n"
    [v] = judge({"ct13": log})
    assert v.status == Status.PASS and "since amdgpu last loaded (199600s ago)" in v.message
    assert found(judge({"ct13": log}, window="boot")) == [("FAIL", "ct13", 1, "KERNEL-MES-REMOVE-QUEUE")]
    recent = f"[  400.000000] {LOAD}\n" + stamped("[drm] Fence fallback timer expired on ring sdma1\n", 199000.0)
    assert found(judge({"ct13": recent}, window="3600")) == [("FAIL", "ct13", None, "KERNEL-SDMA-FENCE-TIMEOUT")]
    assert found(judge({"ct13": recent}, window="600")) == []
    [bad] = judge({"ct13": recent}, window="yesterday")
    assert bad.status == Status.ERROR and "window 'yesterday'" in bad.message


def test_site_rules_add_override_and_silence():
    # the site's line is one no built-in rule knows (the SMU's own "not done" wording is KERNEL-SMU-HUNG now)
    log = stamped("amdgpu 0001:01:00.0: amdgpu: MES ring buffer is full.\n"
                  "amdgpu 0000:01:00.0: amdgpu: SMU busy: site watchdog fired\n", 500)
    site = {"SITE-SMU-BUSY": {"pattern": r"SMU busy: site", "severity": "warn", "remediation": "GPU-HUNG-RESET",
                              "what": "SMU busy", "section": "site runbook"},
            "KERNEL-MES-RING-FULL": {"severity": "warn"}}
    assert found(judge({"ct13": log}, rules=site)) == [
        ("WARN", "ct13", 0, "SITE-SMU-BUSY"), ("WARN", "ct13", 1, "KERNEL-MES-RING-FULL")]
    assert found(judge({"ct13": log, "ct14": log}, rules=site, node_params={"ct14": {"silence": ["SITE-SMU-BUSY"]}})
                 ) == [("WARN", "ct13", 0, "SITE-SMU-BUSY"), ("WARN", "ct13", 1, "KERNEL-MES-RING-FULL"),
                       ("WARN", "ct14", 1, "KERNEL-MES-RING-FULL")]
    [bad] = judge({"ct13": log}, rules={"SITE-X": {"pattern": "(", "remediation": "GPU-HUNG-RESET"}})
    assert bad.status == Status.ERROR and "rules.SITE-X: pattern '(' is not a regex" in bad.message
    [bad] = judge({"ct13": log}, rules={"SITE-Y": {"signature": "no_such", "remediation": "GPU-WEDGED"}})
    assert bad.status == Status.ERROR and "signature 'no_such' is not a parser signature" in bad.message
    [bad] = judge({"ct13": log}, rules={"SITE-Z": {"pattern": "x"}})
    assert bad.status == Status.ERROR and "needs a remediation code" in bad.message
    corrected = {"SITE-ACA-CE": {"signature": "aca_correctable", "severity": "warn", "remediation": "GPU-RAS-ERROR"}}
    aca = stamped("amdgpu 0000:01:00.0: {1}[Hardware Error]: ACA[01/01].STATUS=0x9000000000000000", 500)
    assert found(judge({"ct13": aca}, rules=corrected)) == [("WARN", "ct13", 0, "SITE-ACA-CE")]
    [bad] = judge({"ct13": log}, silence=["KERNEL-NOPE"])
    assert bad.status == Status.ERROR and "silence: no rule KERNEL-NOPE" in bad.message


@pytest.mark.parametrize("text, rc", [
    ("", 1), ("dmesg: read kernel buffer failed: Operation not permitted\n", 0),
    ("Usage:\n dmesg [options]\n\nDisplay or control the kernel ring buffer.\n[ 1.0] x\n", 0), ("", 0)])
def test_unreadable_or_non_log_is_an_error_for_that_node_only(text, rc):
    verdicts = judge({"ct13": node_readings(text, 13, rc=rc), "ct14": clean()})
    assert [(v.status, v.node) for v in verdicts] == [(Status.ERROR, "ct13"), (Status.PASS, "ct14")]


def test_truncated_log_is_an_error():
    r = node_readings(clean(), 13)
    r.raw()["dmesg"].truncated = True
    [v] = judge({"ct13": r})
    assert v.status == Status.ERROR and "size cap" in v.message


@pytest.mark.parametrize("boot_id, why", [
    (FileReading(BOOT_ID, None, error="Cannot allocate memory"), "Cannot allocate memory"),  # §31.1: a 4 MiB read
    (FileReading(BOOT_ID, None), "no such file"),
    (FileReading(BOOT_ID, BOOT[:20], truncated=True), "cut off"),
    (FileReading(BOOT_ID, "\n"), "not a boot id"),
    (FileReading(BOOT_ID, "@@ not a boot id\n"), "not a boot id"),
    (Unavailable("node deadline of 60s reached"), "node deadline"),
], ids=["error", "missing", "cut", "empty", "garbled", "unavailable"])
def test_a_boot_id_that_did_not_read_is_an_error_never_a_pass(boot_id, why):
    """§31.1: without the boot id a capture of another boot would be judged as this one's."""
    r = node_readings(clean(), 13)
    [v] = judge({"ct13": Readings({**r.raw(), "boot_id": boot_id})})
    assert v.status == Status.ERROR and v.node == "ct13" and "the boot id was not read" in v.message, v
    assert why in v.message


def test_journal_capture_of_another_boot_is_refused_and_old_boots_are_cut():
    old = "-- Boot 11112222333344445555666677778888 --\nOct 08 09:00:00 ct13 kernel: amdgpu 0001:01:00.0: " \
          "amdgpu: MES ring buffer is full.\n"
    now = f"-- Boot {BOOT.replace('-', '')} --\nOct 09 10:00:00 ct13 kernel: {LOAD}\n"
    assert [v.status for v in judge({"ct13": old + now})] == [Status.PASS]
    [v] = judge({"ct13": now + old})
    assert v.status == Status.ERROR and "is not the current boot" in v.message


def test_every_rule_is_explainable_and_in_the_table():
    for rule in kernel.RULES:
        text = REGISTRY.remediations[rule.id].text
        assert rule.section in text
        assert rule.remediation is None or REGISTRY.remediations[rule.remediation].text in text  # None: a known line
    assert len({r.id for r in kernel.RULES}) == len(kernel.RULES)


def test_the_owner_of_an_accid_is_found_even_when_its_own_log_is_unreadable():
    log = stamped("amdgpu 0001:01:00.0: amdgpu: IMPORT: NPA-RSP timeout from remote AccId:62\n", 500)
    verdicts = judge({"ct13": log, "ct16": node_readings("", 16, rc=1)})
    assert [(v.status, v.node, v.gpu) for v in verdicts] == [
        (Status.ERROR, "ct16", None), (Status.FAIL, "ct16", 1), (Status.PASS, "ct13", None)]
    assert "restricted dmesg needs root" in verdicts[0].message
    assert "it shows faults of ct16, reported there" in verdicts[2].message
    assert "the whole boot (amdgpu's load line is not in the log" in verdicts[2].message


@pytest.mark.parametrize("params, message", [
    ({"window": "yesterday"}, "kernel-health.window: expected amdgpu-load, boot or a number of seconds"),
    ({"window": "inf"}, "kernel-health.window: expected amdgpu-load, boot or a number of seconds"),
    ({"rules": {"SITE-X": {"pattern": "(", "remediation": "GPU-HUNG-RESET"}}},
     "rules.SITE-X: pattern '(' is not a regex"),
    ({"rules": {"KERNEL-PAGE-FAULT": {"severity": "page"}}}, "rules.KERNEL-PAGE-FAULT: severity 'page' is not fail"),
])
def test_bad_window_and_site_rules_are_refused_when_the_inventory_is_read(params, message):
    """Exit 3 before any node is read (the CLI prints InventoryError as one line), not an ERROR per node."""
    text = ("cluster:\n  checks:\n    kernel-health: " + json.dumps(params)
            + "\nnodes:\n  - {name: ct13, host: 10.0.0.13}\n")
    with pytest.raises(InventoryError, match=re.escape(message)):
        parse_inventory(text, registry=REGISTRY)
    good = parse_inventory(text.replace(json.dumps(params), json.dumps({"window": "3600", "rules": {}})),
                           registry=REGISTRY)
    assert good.cluster.checks["kernel-health"]["window"] == "3600"


def test_mi300x_uncorrectable_event_is_a_fail_naming_node_and_gpu():
    """Issue 21: the fatal RAS interrupt + `aca entry[00]` banks (6.10+ wording) read as an INFO record with no
    banks before; now the interrupting GPU and the GPU with the UC/PCC bank each FAIL, the correctable one is quiet."""
    from tests.unit.test_dmesg_format_strings import MI300X_EVENT
    log = MI300X_EVENT.replace("[76914.", "[1914.")
    verdicts = judge({"ct13": node_readings(log, 13, bdfs=["0000:dd:00.0", "0000:1b:00.0", "0000:9d:00.0",
                                                           "0000:3d:00.0"])})
    assert found(verdicts) == [("FAIL", "ct13", 0, "KERNEL-GPU-RESET"), ("FAIL", "ct13", 0, "KERNEL-RAS-FATAL"),
                               ("FAIL", "ct13", 1, "KERNEL-ACA-UNCORRECTABLE")]
    aca = next(v for v in verdicts if v.evidence.get("rule") == "KERNEL-ACA-UNCORRECTABLE")
    assert "PCI 0000:1b:00.0 = card1" in aca.message and "{1}" in aca.message
    assert aca.evidence["details"]["banks"]["00"]["class"] == ["pcc", "uc"]


UNKNOWN_LINE = "amdgpu 0001:01:00.0: amdgpu: XGMI: link {n} training stalled, retrain count {m}"


def errors_of(log: str, *needles) -> str:
    """What `dmesg --level=err,crit,alert,emerg` prints of ``log``: the lines holding one of ``needles``."""
    return "".join(line + "\n" for line in log.splitlines() if any(n in line for n in needles))


def test_an_unknown_amdgpu_error_line_is_one_warn_on_its_node_and_gpu_counted_per_shape():
    log = f"[   15.220114] {LOAD}\n" + stamped("\n".join(UNKNOWN_LINE.format(n=n, m=7 * n) for n in (1, 2, 3)) +
                                              "\namdgpu 0001:01:00.0: amdgpu: SMU is resuming...\n", 900.0)
    readings = node_readings(log, 13, errors=errors_of(log, "XGMI"))
    verdicts = judge({"ct13": readings, "ct14": node_readings(clean(), 14)})
    assert found(verdicts) == [("WARN", "ct13", 1, "KERNEL-UNKNOWN-ERROR")]
    [v] = [v for v in verdicts if v.status == Status.WARN]
    assert v.remediation == "KERNEL-UNKNOWN-LINE" and "training stalled" in v.message
    assert v.evidence["details"] == {"shape": "amdgpu <bdf>: amdgpu: XGMI: link <n> training stalled, retrain count "
                                              "<n>", "count": 3}
    # the same lines at info level (not in the err+ reading) are no finding: the level is the driver's own judgement
    assert found(judge({"ct13": node_readings(log, 13)})) == []


def test_unknown_error_lines_from_a_decoded_log_need_no_second_reading():
    line = UNKNOWN_LINE.format(n=1, m=2)
    log = (f"kern  :info  : [   15.220114] {LOAD}\nkern  :err   : [  900.000000] {line}\n"
           f"kern  :info  : [  901.000000] amdgpu 0001:01:00.0: amdgpu: SMU is resuming...\n")
    readings = node_readings(log, 13, errors_rc=1)  # not needed: the decoded log carries each line's level
    assert found(judge({"ct13": readings})) == [("WARN", "ct13", 1, "KERNEL-UNKNOWN-ERROR")]


@pytest.mark.parametrize("line", [
    "mana 7870:00:00.0 enP30832s1: Failed to query link config: -71",  # §10 noise
    "mce: [Hardware Error]: CPU 0/48: Machine Check: 0 Bank 62: a0002000003d0800",  # §10 warm-reboot residue
    "nvme nvme0: I/O 12 QID 3 timeout, aborting",  # not a GPU source
    "amdgpu 0001:01:00.0: amdgpu: [gfxhub0] retry page fault (src_id:0 ring:0 vmid:3 pasid:32790)",  # known, INFO
])
def test_known_benign_and_foreign_error_lines_never_count(line):
    log = f"[   15.220114] {LOAD}\n" + stamped(line + "\n", 900.0)
    assert found(judge({"ct13": node_readings(log, 13, errors=errors_of(log, line))})) == []


def test_unknown_lines_before_the_load_or_silenced_by_pattern_or_beside_a_known_fault_do_not_count():
    line = UNKNOWN_LINE.format(n=1, m=2)
    before = stamped(line + "\n", 5.0) + f"[   15.220114] {LOAD}\n"
    assert found(judge({"ct13": node_readings(before, 13, errors=errors_of(before, "XGMI"))})) == []
    after = f"[   15.220114] {LOAD}\n" + stamped(line + "\n", 900.0)
    errors = errors_of(after, "XGMI")
    assert found(judge({"ct13": node_readings(after, 13, errors=errors)},
                       silence=["training stalled", "KERNEL-MES-RING-FULL"])) == []
    assert found(judge({"ct13": node_readings(after, 13, errors=errors)}, silence=["KERNEL-UNKNOWN-ERROR"])) == []
    [bad] = judge({"ct13": node_readings(after, 13, errors=errors)}, silence=["(unclosed"])
    assert bad.status == Status.ERROR and "neither a rule id nor a regex" in bad.message
    wedged = after + stamped("amdgpu 0001:01:00.0: amdgpu: MES ring buffer is full.\n", 950.0)
    assert found(judge({"ct13": node_readings(wedged, 13, errors=errors_of(wedged, "XGMI", "MES"))})) == [
        ("FAIL", "ct13", 1, "KERNEL-MES-RING-FULL")]  # the unknown line follows the known fault of its GPU


def test_an_unreadable_error_level_reading_is_an_error_not_a_pass():
    log = f"[   15.220114] {LOAD}\n"
    [v] = judge({"ct13": node_readings(log, 13, errors_rc=1)})
    assert v.status == Status.ERROR and "unknown level" in v.message
