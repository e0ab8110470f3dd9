"""Fabric domain across the rack: one PPOD_ID and one VPOD_ID on every GPU (reference §7, §27 item 1, §28).

A mismatch does not error - the rendezvous hangs - so this compares all GPUs of all nodes and
names the odd ones. amd-smi (``fabric --json``, text form as fallback) is cross-checked
against sysfs ``ppod_id``/``vpod_id``, which is the ground truth for the comparison (§27 item 1).
Bandwidth 0, latency 0 and version 4294967295 are unpopulated by this firmware, never findings.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from k3doctor.api import (
    FIND_TOOL,
    Glob,
    ParseError,
    ReadingUnavailable,
    Status,
    check,
    error,
    fail,
    passed,
    remediation,
    tool_script,
    warn,
)
from k3doctor.views.gpu import STATIC_LABEL, UEVENT_GLOB, amdsmi_static, card_buses, pci_bus
from k3doctor.views.peers import majority
from k3doctor.views.ualink import UALINK_READS, ualink_cards
from k3doctor.parsers.amdsmi import parse_fabric, parse_physical_acc_ids
from k3doctor.parsers.common import UINT32_MAX, ppod_or_none, to_u32

UEVENT = Glob(UEVENT_GLOB)
# `--json` first; an amd-smi without it (or failing with it) falls back to the text form, saying so on stderr.
FABRIC_SCRIPT = FIND_TOOL + ('"$t" fabric --json || { rc=$?; echo "k3doctor: amd-smi fabric --json exited $rc, '
                             'reading the text form" >&2; "$t" fabric; }')

MISMATCH = remediation("FABRIC-DOMAIN-MISMATCH", "GPUs are in different PPOD/VPOD fabric domains", """
Wide EP needs all 16 GPUs in one fabric domain: identical PPOD_ID and VPOD_ID (§7). A mismatch
does not error - ncclCommInitRank / the rendezvous just hangs. The odd node(s) were assigned to
another pod by the fabric manager: check that node's AFM/inb-node-agent configuration (the vPOD
membership must be the same on every node, §28), fix the assignment, then reload amdgpu there
(`rmmod amdgpu && modprobe amdgpu ...`, ifoe first, §5) so the cards pick it up, and re-check.
Pin the expected ids with the check parameters expected_ppod_id / expected_vpod_id.
""")

NOT_CONFIGURED = remediation("FABRIC-NOT-CONFIGURED", "a GPU has no fabric domain (pod ids unset)", """
PPOD_ID all-zero (driver default) or all-9s (amd-smi's "no ppod id" sentinel), or VPOD_ID
4294967295, means the card was never configured into a pod (§6, §7). Usually the card is also
`unconfigured` in ualink-state: confirm `lsmod | grep ^ifoe` and that inb-node-agent runs,
then `rmmod amdgpu && modprobe amdgpu ...` (§5) and wait for accel_state `active`.
""")

DISAGREE = remediation("FABRIC-SOURCES-DISAGREE", "amd-smi and sysfs report different fabric domains", """
amd-smi fabric and the card's sysfs ualink/ppod_id, vpod_id disagree on the same GPU. sysfs is
the driver's own state and is what this check compares across the rack; tools that go through
the amd-smi library (ubench 07_ualoe, ROCm iris) see the other value. Make sure amd-smi matches
the driver (ubench needs amd-smi >= 26.2.1 and ROCm >= 7.15, §7), and that nothing is stale
after a driver reload; re-run after `rmmod amdgpu && modprobe amdgpu ...` if it persists.
""")

AMDSMI = remediation("FABRIC-AMDSMI-UNREADABLE", "amd-smi fabric gave no usable output", """
`amd-smi fabric --json` (and its text form) timed out, failed, or printed output that is not a
complete amd-smi fabric report, so this node's fabric domain could not be cross-checked. Run it
by hand on the node (`sudo /opt/rocm/bin/amd-smi fabric --json`, stderr apart); a hang often
means a wedged GPU (§10). sudo's secure_path can hide /opt/rocm/bin: the tool path is the
inventory's `tools.amd_smi` (§28). The sysfs comparison still ran for this node.
""")


@dataclass
class Gpu:
    """One GPU's domain as each source saw it; ``ppod`` None = not configured, raw kept for messages.

    ``gpu`` is the card number; None for an amd-smi GPU whose PCI bus maps to no card, which is
    then named by its amd-smi index ``smi`` (an index can differ from the card number, §6).
    """

    node: str
    gpu: int | None
    ppod: str | None = None
    ppod_raw: str | None = None
    vpod: int | None = None
    vpod_raw: str | None = None
    source: str = "sysfs"
    evidence: dict = field(default_factory=dict)
    smi: int | None = None

    @property
    def name(self) -> str:
        return str(self.gpu) if self.gpu is not None else f"{self.smi} (amd-smi)"

    @property
    def order(self) -> tuple:
        return self.node, self.gpu is None, self.gpu if self.gpu is not None else self.smi


def sysfs_gpus(node: str, r) -> dict:
    """card number -> Gpu from the ualink globs; cards without ppod_id/vpod_id are left out."""
    out = {}
    for n, card in ualink_cards(r).items():
        ppod, vpod = card.get("ppod_id"), card.get("vpod_id")
        if ppod is None and vpod is None:
            continue
        out[n] = Gpu(node, n, ppod_or_none(ppod), ppod, to_u32(vpod, f"card{n} vpod_id"), vpod,
                     evidence={f"card{n}/ualink/ppod_id": ppod, f"card{n}/ualink/vpod_id": vpod})
    return out


def amdsmi_gpus(node: str, reading, buses: dict) -> list:
    """(FabricInfo, Gpu on the card of its PCI bus) per amd-smi fabric entry (tool output ->
    ParseError / ReadingUnavailable when unusable)."""
    out = []
    for info in parse_fabric(reading.output()):
        ev = {f"amd-smi GPU {info.gpu} PPOD_ID": info.ppod_id_raw, f"amd-smi GPU {info.gpu} VPOD_ID": info.vpod_id}
        card = buses.get(pci_bus(info.bdf or info.fabric_bdf or ""))
        out.append((info, Gpu(node, card, info.ppod_id, info.ppod_id_raw, info.vpod_id,
                              str(info.vpod_id) if info.vpod_id is not None else str(UINT32_MAX),
                              source="amd-smi", evidence=ev, smi=info.gpu)))
    return out


def _why(fabric, exc) -> str:
    """The failure in amd-smi's terms (the wrapper script's text would only hide it)."""
    if fabric is None or isinstance(exc, ParseError):
        return str(exc)
    if fabric.timed_out:
        return "timed out and was killed"
    lines = (fabric.stderr or fabric.stdout).strip().splitlines()
    return f"exited {fabric.rc}: {lines[-1][:200] if lines else 'no output'}"


def node_gpus(node: str, r) -> tuple:
    """(GPUs to compare, verdicts about this node's sources): sysfs first, amd-smi cross-checked."""
    verdicts = []
    try:
        sysfs = sysfs_gpus(node, r)
    except (ReadingUnavailable, ParseError) as exc:
        sysfs = {}
        verdicts.append(error(f"sysfs ppod_id/vpod_id not readable: {exc}", node=node))
    try:
        smi = amdsmi_gpus(node, r["fabric"], card_buses(r.get("uevent") or {}))
    except (ReadingUnavailable, ParseError) as exc:
        fabric = r.get("fabric")
        ev = {"stderr": fabric.stderr[-500:], "stdout": fabric.stdout[:500]} if fabric is not None else {}
        rest = "fabric domain compared from sysfs only" if sysfs else "and no ualink pod ids in sysfs either"
        verdicts.append(error(f"amd-smi fabric unusable ({_why(fabric, exc)}); {rest}", node=node, evidence=ev,
                              remediation=AMDSMI))
        return list(sysfs.values()), verdicts
    gpus = list(sysfs.values())
    for info, seen in smi:
        if not info.available:
            verdicts.append(warn(f"amd-smi reports fabric_info N/A for GPU {info.gpu} (bdf {info.bdf}); "
                                 "not cross-checked", node=node, gpu=seen.gpu, remediation=DISAGREE))
            continue
        truth = sysfs.get(seen.gpu)
        if truth is None:
            # Every GPU joins the rendezvous, so one that only amd-smi sees is still compared (§7).
            gpus.append(seen)
            if sysfs:
                verdicts.append(warn(f"amd-smi GPU {info.gpu} (bdf {info.bdf}) matches no card with ualink "
                                     "pod ids in sysfs; compared from amd-smi alone", node=node, gpu=seen.gpu,
                                     evidence=seen.evidence, remediation=DISAGREE))
            continue
        if (truth.ppod, truth.vpod) != (seen.ppod, seen.vpod):
            verdicts.append(warn(f"amd-smi GPU {info.gpu} reports PPOD_ID {seen.ppod_raw} VPOD_ID {seen.vpod_raw} "
                                 f"but sysfs card{truth.gpu} reads ppod_id {truth.ppod_raw} vpod_id {truth.vpod_raw}",
                                 node=node, gpu=truth.gpu, evidence={**truth.evidence, **seen.evidence},
                                 remediation=DISAGREE))
        truth.evidence.update(seen.evidence)
    return gpus, verdicts


def physical_ids(node: str, r) -> tuple:
    """(WARNs, note for the PASS line): amd-smi 27.1's PHYSICAL_ACC_ID against each card's sysfs accel_id, paired
    by PCI bus (§29, §6). Older amd-smi prints none and a GPU without a UALoE session reads it unset: nothing to
    compare. An unusable reading is said in the PASS line, never silently passed."""
    reading = r.get("asic")
    try:
        ids = parse_physical_acc_ids(reading.output(STATIC_LABEL)) if reading else {}
        cards, buses = ualink_cards(r), card_buses(r.get("uevent") or {})
        pairs = [(gpu, bdf, acc, buses.get(pci_bus(bdf or ""))) for gpu, (bdf, acc) in sorted(ids.items())]
        pairs = [(gpu, bdf, acc, card, cards[card].accel_id()) for gpu, bdf, acc, card in pairs
                 if acc is not None and card in cards]
    except (ReadingUnavailable, ParseError) as exc:
        return [], f"; PHYSICAL_ACC_ID not cross-checked ({exc})"
    verdicts, compared = [], 0
    for gpu, bdf, acc, card, own in pairs:
        if own is None:
            continue
        compared += 1
        if own != acc:
            verdicts.append(warn(f"amd-smi GPU {gpu} (bdf {bdf}) reports PHYSICAL_ACC_ID {acc} but sysfs card{card} "
                                 f"reads accel_id {own} (§6, §29: the tools and the driver disagree on which "
                                 "accelerator this is)", node=node, gpu=card, remediation=DISAGREE,
                                 evidence={"PHYSICAL_ACC_ID": acc, f"card{card}/ualink/accel_id": own, "bdf": bdf}))
    return verdicts, f"; PHYSICAL_ACC_ID agrees with sysfs accel_id on {compared} GPU(s)" if compared else ""


def _who(gpus) -> str:
    """``ct13 GPUs 0,1,2,3; ct16 GPU 2`` for a set of GPUs."""
    by_node: dict = {}
    for g in sorted(gpus, key=lambda g: g.order):
        by_node.setdefault(g.node, []).append(g.name)
    return "; ".join(f"{n} GPU{'s' if len(ids) > 1 else ''} {','.join(ids)}" for n, ids in by_node.items())


def _judge_id(gpus: list, name: str, value_of, raw_of, expected) -> dict:
    """Position in ``gpus`` -> [(problem, remediation)] for one id (PPOD or VPOD) across the rack."""
    problems: dict = {}
    configured = {i: value_of(g) for i, g in enumerate(gpus) if value_of(g) is not None}
    for i, g in enumerate(gpus):
        if value_of(g) is None:
            problems.setdefault(i, []).append((f"{name} {raw_of(g)}: not configured ({g.source})", NOT_CONFIGURED))
    if expected is not None:
        reference, odd, why = expected, [k for k, v in configured.items() if v != expected], "expected"
    else:
        reference, odd = majority(configured)
        why = f"held by {sum(v == reference for v in configured.values())} of {len(gpus)} GPUs"
    for key in odd:
        if reference is None:
            split = "; ".join(f"{v}: {_who(gpus[k] for k in configured if configured[k] == v)}"
                              for v in sorted(set(configured.values()), key=str))
            text = f"{name} {configured[key]}: the rack splits with no majority ({split})"
        else:
            text = f"{name} {configured[key]} differs from the rack's {reference} ({why})"
        problems.setdefault(key, []).append((text, MISMATCH))
    return problems


def _reads(settings) -> dict:
    return {**UALINK_READS, "uevent": UEVENT,
            "fabric": tool_script(settings.tools["amd_smi"], FABRIC_SCRIPT, container=settings.container),
            "asic": amdsmi_static(settings)}


def node_part(r, ctx) -> tuple:
    """One node's GPUs with their pod ids, the verdicts about its own sources, and its PHYSICAL_ACC_ID
    cross-check (WARNs, the PASS line's note): parsed once, as soon as the node is read."""
    gpus, notes = node_gpus(ctx.node, r)
    disagree, said = physical_ids(ctx.node, r)
    return gpus, notes + disagree, said


@check("fabric-domain", title="all GPUs of all nodes share one PPOD_ID and one VPOD_ID", scope="cluster",
       reads=_reads, remediation=(MISMATCH, NOT_CONFIGURED, DISAGREE, AMDSMI), needs=("amdgpu-driver",),
       params={"expected_ppod_id": None, "expected_vpod_id": None}, each_node=node_part)
def fabric_domain(per_node, ctx):
    """§7: a domain mismatch hangs the rendezvous instead of erroring, so name the odd GPUs up front
    (``per_node``: node -> :func:`node_part`)."""
    gpus, verdicts, ids_said = [], [], {}
    for node, (mine, notes, said) in per_node.items():
        gpus += mine
        verdicts += notes
        ids_said[node] = said
    expected_ppod = ctx.param("expected_ppod_id")
    expected_vpod = ctx.param("expected_vpod_id")
    problems: dict = {}
    for name, value_of, raw_of, expected in (
            ("PPOD_ID", lambda g: g.ppod, lambda g: g.ppod_raw, ppod_or_none(expected_ppod)),
            ("VPOD_ID", lambda g: g.vpod, lambda g: g.vpod_raw,
             to_u32(expected_vpod, "expected_vpod_id"))):
        for key, found in _judge_id(gpus, name, value_of, raw_of, expected).items():
            problems.setdefault(key, []).extend(found)
    for key, found in sorted(problems.items(), key=lambda item: gpus[item[0]].order):
        g, codes = gpus[key], [code for _, code in found]
        who = "" if g.gpu is not None else f"amd-smi GPU {g.smi} (no card on its PCI bus): "
        verdicts.append(fail(who + "; ".join(text for text, _ in found), node=g.node, gpu=g.gpu, evidence=g.evidence,
                             remediation=NOT_CONFIGURED if NOT_CONFIGURED in codes else MISMATCH))
    flagged = {v.node for v in verdicts}
    errored = {v.node for v in verdicts if v.status == Status.ERROR}
    for node in per_node:
        mine = [g for g in gpus if g.node == node]
        if not mine and node not in errored:
            verdicts.append(error("no GPU reports a fabric domain (no ualink pod ids in sysfs, nothing usable "
                                  "from amd-smi)", node=node, remediation=AMDSMI))
        elif mine and node not in flagged:
            verdicts.append(passed(f"{len(mine)} GPU(s) in PPOD_ID {mine[0].ppod} VPOD_ID {mine[0].vpod}, "
                                   f"same as the rest of the rack ({len(gpus)} GPUs compared){ids_said[node]}",
                                   node=node,
                                   evidence={k: v for g in mine for k, v in g.evidence.items()}))
    return verdicts
