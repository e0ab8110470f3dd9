"""Driver state (reference §5) and GPU inventory (§12): amdgpu parameters, /dev/kfd, ifoe,
GPU count and HBM size per GPU (sysfs, cross-checked with amd-smi), and HBM agreement across the rack."""
from __future__ import annotations

from collections import Counter

from k3doctor import platforms
from k3doctor.api import (
    CardId,
    Exists,
    File,
    Glob,
    ParseError,
    ReadingUnavailable,
    check,
    error,
    fail,
    passed,
    remediation,
    skip,
    warn,
)
from k3doctor.views.gpu import (
    KFD_NODES_GLOB,
    STATIC_LABEL,
    VENDOR_GLOB,
    VRAM_GLOB,
    amd_cards,
    amdsmi_static,
    hbm_gib,
    kfd_gpus,
)
from k3doctor.views.kernel_log import DMESG, KernelLog, is_amdgpu_load
from k3doctor.parsers.amdsmi import parse_static_vram

PARAMS = "/sys/module/amdgpu/parameters"
IFOE = "/sys/module/ifoe"
VERSION = "/sys/module/amdgpu/version"  # only the DKMS (out-of-tree) driver has it (§29, ollama/ollama #3425)
_RELOAD_NOTE = """They are load-time parameters: only an unload/reload changes them, and reloading
amdgpu retrains the UALink links (§5, §6) - weigh that: plan it for an idle tray, never
under a job, and wait for every accel_state to read `active` again afterwards."""

AMDGPU_PARAMS = remediation("AMDGPU-PARAMS", "amdgpu loaded without the bring-up parameters", f"""
gpu_recovery=0 and halt_if_hws_hang=1 make a hardware-scheduler hang halt the GPU so it
stays diagnosable, instead of a silent recovery reset that kills the run with nothing in
the log (reference §5).
{_RELOAD_NOTE}
Preferred (V6): reboot, then load through `perf_setup_BPC21.sh -enable-csc` (menu D),
which runs `modprobe amdgpu gpu_recovery=0 halt_if_hws_hang=1 mtype_local=0 noretry=1`.
Bare bring-up: `modprobe ifoe` first, then
`modprobe amdgpu gpu_recovery=0 halt_if_hws_hang=1`.
""")

NO_KFD = remediation("AMDGPU-NOT-LOADED", "/dev/kfd missing: amdgpu is not loaded", """
amdgpu is blacklisted on these hosts' kernel command line, so after every reboot the
driver is not loaded and /dev/kfd does not exist - configuration, not breakage (§5).
Load it the tuned way: reboot-fresh tray, then `perf_setup_BPC21.sh -enable-csc` menu D
(or, bare: `modprobe ifoe`, then `modprobe amdgpu gpu_recovery=0 halt_if_hws_hang=1`).
Then wait for every card's ualink/accel_state to read `active` (§6).
""")

IFOE_MISSING = remediation("IFOE-NOT-LOADED", "ifoe (UALink-over-Ethernet) not loaded before amdgpu", f"""
UALink on these racks runs over Ethernet through the Pensando AINIC `ifoe` stack; `lsmod`
must show `ifoe` (§5; AMD's CVS admission gate requires /sys/module/ifoe, §28). The working
hypothesis is that ifoe must be loaded before amdgpu initialises (§5, not proven).
Fix: `modprobe ifoe` (Helios-R runbook also loads ifoe_cfg, ifoe_cmd). If amdgpu came up
first, reload it after ifoe. {_RELOAD_NOTE}
""")

UNTUNED = remediation("AMDGPU-UNTUNED", "tray not tuned by perf_setup for this boot", """
A tuned tray reads mtype_local=0 noretry=1 (MTYPE=RW, XNACK off), loaded by
`perf_setup_BPC21.sh -enable-csc` menu D, worth ~13% tok/s/GPU (§5). -1 means perf_setup
ran after amdgpu was already loaded: its modprobe was a no-op although its report claims
`D - MTYPE=RW, XNACK=disabled`. Only fix: reboot, then run perf_setup before anything else
loads amdgpu (helicop `prep_machine upto 13`). Rerun the accuracy gate after switching (§5, §27 item 14).
""")

GPU_COUNT = remediation("GPU-COUNT", "wrong number of GPUs visible on a node", """
Wide EP assumes exactly `gpus_per_node` (4) GPUs per node in SPX/NPS1
(`--data-parallel-size-local 4`, reference §12). Fewer: a card failed to initialise (check
`dmesg | grep amdgpu`, §10) or amdgpu is only partly up; more: the GPUs are partitioned
(CPX/NPS4) - check `rocm-smi --showcomputepartition` / `--showmemorypartition`.
A change since the recorded baseline means hardware or partitioning changed under you.
""")

HBM_SIZE = remediation("HBM-SIZE", "HBM per GPU differs from the inventory", """
Two board variants exist, 288 GiB and 432 GiB per GPU, and every KV and batching number
depends on which one you have (§0.2, §12). Read it with `amd-smi static --vram`
(432 GiB = 442368 MB) or /sys/class/drm/card*/device/mem_info_vram_total. Fix the
inventory's `hbm_gib_per_gpu` (and the launch config derived from it), or use another node.
Stepping and board size are independent (§27 item 8).
""")

HBM_MIXED = remediation("HBM-MIXED", "GPUs of the rack disagree on HBM size", """
All 16 GPUs must have the same HBM size (§0.3 item 4, §12): the KV budget is computed once
for every rank, so a mix of 288 GiB and 432 GiB boards either wastes the larger boards or
OOMs the smaller ones. Replace the odd node with one of the majority's board type.
""")


def _params_of(platform) -> tuple:
    """The amdgpu parameters the platform's file names (load-time ones, then those of a tuned tray)."""
    return tuple(dict(platform.amdgpu_load_params)) + tuple(dict(platform.amdgpu_tuned_params))


def _driver_reads(settings) -> dict:
    """The parameter files of the declared platform only (k3doctor/platforms/*.yaml): a platform with a
    parameter of its own is read and judged on it, one without reads none."""
    return {"kfd": Exists("/dev/kfd"), "ifoe": Exists(IFOE), "dmesg": DMESG, "version": File(VERSION),
            **{p: File(f"{PARAMS}/{p}") for p in _params_of(platforms.get(settings.platform))}}


@check("amdgpu-driver", title="/dev/kfd present, amdgpu loaded with the platform's load parameters (after ifoe "
       "where the platform runs UALink over Ethernet)",
       scope="node", remediation=(AMDGPU_PARAMS, NO_KFD, IFOE_MISSING, UNTUNED),
       params={"require_tuned": False}, blocking=NO_KFD,  # without the driver no GPU can be read (§5)
       reads=_driver_reads)
def amdgpu_driver(r, ctx):
    """§5: without the bring-up parameters a HWS hang resets the GPU and the run dies with an
    empty log; without ifoe there is no UALink; untuned trays are ~13% slower."""
    if not r["kfd"]:
        return fail("/dev/kfd does not exist: amdgpu is not loaded", remediation=NO_KFD,
                    evidence={"/dev/kfd": "missing"})
    platform = platforms.get(ctx.settings.platform)
    found = {p: r[p].text() if r[p].exists else None for p in _params_of(platform)}
    evidence = {f"{PARAMS}/{p}": v if v is not None else "missing" for p, v in found.items()}
    verdicts = []
    wrong = [f"{p}={evidence[f'{PARAMS}/{p}']} (need {want})" for p, want in platform.amdgpu_load_params
             if found[p] != want]
    if wrong:
        verdicts.append(fail("amdgpu loaded with " + ", ".join(wrong) + "; these are load-time parameters and "
                             "a reload retrains the UALink links (§5, §6)",
                             remediation=AMDGPU_PARAMS, evidence=evidence))
    loaded = " ".join(f"{p}={v}" for p, v in platform.amdgpu_load_params) or "no load parameters required"
    said = f"/dev/kfd present, {loaded}"
    if platform.ifoe:
        ifoe_verdicts, ifoe_note = _ifoe_state(r, evidence)
        verdicts += ifoe_verdicts
        said += f", {ifoe_note}"
    if platform.amdgpu_tuned_params:
        tuned, tuned_note = _tuned_state(found, dict(platform.amdgpu_tuned_params))
        if not tuned and ctx.param("require_tuned"):
            verdicts.append(warn(tuned_note, remediation=UNTUNED, evidence=evidence))
        said += f"; {tuned_note}"
    if not verdicts:
        verdicts.append(passed(f"{said}; {driver_build(r.get('version'))}; platform {platform.name}",
                               evidence=evidence))
    return verdicts


def driver_build(reading) -> str:
    """INFO for the PASS line (§29): the DKMS driver's version, or that the driver is the kernel's own. An in-tree
    amdgpu has no /sys/module/amdgpu/version, so its absence never means "no driver" (that is /dev/kfd's call)."""
    if reading is not None and (reading.content or "").strip():
        return f"amdgpu {reading.content.strip()[:40]} (DKMS)"
    return f"INFO: in-tree amdgpu (no {VERSION}, which only the DKMS driver has; not a missing driver, §29)"


def _tuned_state(found: dict, tuned: dict) -> tuple:
    """(tuned?, one line saying so) from the platform's tuned parameters (§5: a tuned gfx1250 tray reads
    mtype_local=0 noretry=1)."""
    want = " ".join(f"{p}={v}" for p, v in tuned.items())
    if all(found[p] == v for p, v in tuned.items()):
        return True, f"tuned ({want})"
    values = ", ".join(f"{p}={found[p] if found[p] is not None else 'missing'}" for p in tuned)
    if any(found[p] == "-1" for p in tuned):
        return False, (f"not tuned: {values} - perf_setup ran after amdgpu was already loaded, its modprobe "
                       "was a no-op (§5)")
    return False, f"not tuned: {values} (a perf_setup-loaded tray reads {want}, §5)"


def _ifoe_state(r, evidence: dict) -> tuple:
    """(verdicts, note for the PASS line): ifoe must be loaded; its order vs amdgpu comes only
    from dmesg timestamps, never guessed, and a PASS says when it could not be determined."""
    if not r["ifoe"]:
        return [fail(f"ifoe is not loaded ({IFOE} missing): no UALink-over-Ethernet, the fabric cannot form",
                     remediation=IFOE_MISSING, evidence={IFOE: "missing"})], ""
    order, why = ifoe_load_order(r.get("dmesg"))
    if order == "after":
        return [warn(f"ifoe was loaded after amdgpu initialised ({why}); the bring-up loads ifoe first (§5)",
                     remediation=IFOE_MISSING, evidence={"dmesg": why})], ""
    evidence["ifoe/amdgpu load order"] = why
    if order == "before":
        return [], "ifoe loaded before amdgpu"
    return [], "ifoe loaded (the ifoe/amdgpu load order could not be determined from dmesg)"


def ifoe_load_order(dmesg) -> tuple:
    """("before" | "after" | None, why) from the first ifoe line and amdgpu's init line in dmesg."""
    if dmesg is None or not dmesg.ok:
        return None, "load order not determinable: dmesg not readable"
    try:
        log = KernelLog.read(dmesg)
    except (ReadingUnavailable, ParseError) as exc:
        return None, f"load order not determinable: {exc}"
    first = {"ifoe": log.first(lambda line: line.text.startswith("ifoe")),
             "amdgpu": log.first(is_amdgpu_load)}
    missing = " and ".join(k for k, v in first.items() if v is None)
    if missing:
        return None, f"load order not determinable: no {missing} line with a boot timestamp in dmesg (rotated?)"
    (t_ifoe, _), (t_amdgpu, _) = first["ifoe"], first["amdgpu"]
    why = f"dmesg: ifoe at {t_ifoe:.3f}s, amdgpu init at {t_amdgpu:.3f}s"
    return ("before" if t_ifoe < t_amdgpu else "after"), why


def record_inventory(r, ctx) -> dict:
    """Baseline entry: GPU count and HBM per card, for drift reports (old -> new)."""
    return {"gpus": gpu_count(r)[0], "hbm_gib": hbm_gib(r["vendors"], r["vram"])}


INVENTORY_READS = {"vendors": Glob(VENDOR_GLOB), "vram": Glob(VRAM_GLOB), "kfd_nodes": Glob(KFD_NODES_GLOB)}


def gpu_count(r) -> tuple:
    """(GPUs on the node, how it was counted): KFD topology nodes with a gfx_target_version (§29, §0.2: not
    DRM/render nodes, which partitioning multiplies); the AMD DRM cards only where KFD has no topology."""
    cards = amd_cards(r["vendors"])
    nodes = r.get("kfd_nodes")
    kfd = kfd_gpus(nodes) if nodes is not None else None
    if kfd is None:
        return len(cards), "AMD DRM cards: no KFD topology readable"
    versions = ", ".join(sorted({str(gpu.gfx_target_version) for gpu in kfd.values()}))
    drm = "" if len(cards) == len(kfd) else f"; INFO: {len(cards)} AMD DRM card(s), which are not GPUs (§29)"
    return len(kfd), f"KFD topology, gfx_target_version {versions or '-'}{drm}"


def _inventory_reads(settings) -> dict:
    return {**INVENTORY_READS, "smi": amdsmi_static(settings)}


def amdsmi_cross_check(r, cards: list, sizes: dict, tolerance_gib: float, evidence: dict) -> tuple:
    """(WARNs, note for the PASS line): amd-smi's VRAM MiB against sysfs, which stays the truth.
    amd-smi numbers GPUs in PCI order, as the driver numbers the AMD cards, so they pair by rank.
    amd-smi may be missing on a node: unreadable is a note, never a finding."""
    try:
        smi = parse_static_vram(r["smi"].output(STATIC_LABEL))
    except (ReadingUnavailable, ParseError) as exc:
        return [], f"; not cross-checked with amd-smi static --vram (amd-smi may be missing here): {exc}"
    evidence["amd-smi VRAM MiB"] = {f"GPU {g}": mib for g, mib in sorted(smi.items())}
    if len(smi) != len(cards):
        return [warn(f"amd-smi static lists {len(smi)} GPU(s) but sysfs shows {len(cards)} AMD card(s): VRAM not "
                     "cross-checked per GPU (sysfs is the source of truth)", remediation=HBM_SIZE,
                     evidence=evidence)], ""
    verdicts, unknown = [], []
    for card, (gpu, mib) in zip(cards, sorted(smi.items()), strict=True):
        if mib is None:
            unknown.append(f"GPU {gpu}")
        elif sizes[card] is not None and abs(mib / 1024 - sizes[card]) > tolerance_gib:
            verdicts.append(warn(f"amd-smi GPU {gpu} reports {mib} MiB VRAM ({mib / 1024:g} GiB) but sysfs "
                                 f"card{card} mem_info_vram_total reads {sizes[card]} GiB (sysfs is used)",
                                 gpu=card, remediation=HBM_SIZE, evidence=evidence))
    note = f"; amd-smi gave no VRAM size for {', '.join(unknown)}, not cross-checked" if unknown else ""
    return verdicts, note


@check("gpu-inventory", title="expected GPU count and HBM per GPU (and no drift from the baseline)",
       scope="node", remediation=(GPU_COUNT, HBM_SIZE), params={"tolerance_gib": 1}, needs=("amdgpu-driver",),
       reads=_inventory_reads, record=record_inventory)
def gpu_inventory(r, ctx):
    """§12: wide EP assumes 4 GPUs per node and a KV budget computed for one HBM size."""
    cards, sizes = amd_cards(r["vendors"]), hbm_gib(r["vendors"], r["vram"])
    want_gpus, want_hbm = ctx.settings.gpus_per_node, ctx.settings.hbm_gib_per_gpu
    count, counted = gpu_count(r)
    evidence = {"AMD cards": [f"card{c}" for c in cards], "HBM GiB": {f"card{c}": g for c, g in sizes.items()},
                "counted": counted}
    verdicts = []
    if count != want_gpus:
        verdicts.append(fail(f"{count} AMD GPU(s) visible ({counted}), inventory expects {want_gpus}",
                             remediation=GPU_COUNT, evidence=evidence))
    for card, gib in sizes.items():
        if gib is None:
            verdicts.append(fail(f"HBM size unknown: {VRAM_GLOB.replace('*', str(card))} missing (§12: block "
                                 "if unknown)", gpu=card, remediation=HBM_SIZE, evidence=evidence))
        elif want_hbm is None:
            verdicts.append(warn(f"{gib} GiB HBM; the inventory does not declare hbm_gib_per_gpu (288 or 432), "
                                 "so the KV budget cannot be checked against it", gpu=card, remediation=HBM_SIZE,
                                 evidence=evidence))
        elif abs(gib - want_hbm) > ctx.param("tolerance_gib"):
            verdicts.append(fail(f"{gib} GiB HBM, inventory says {want_hbm} GiB per GPU", gpu=card,
                                 remediation=HBM_SIZE, evidence=evidence))
    smi_verdicts, smi_note = amdsmi_cross_check(r, cards, sizes, ctx.param("tolerance_gib"), evidence)
    verdicts += smi_verdicts + _drift(ctx.baseline, count, sizes, evidence)
    if not verdicts:
        verdicts.append(passed(f"{count} GPUs ({counted}), {want_hbm} GiB HBM each{smi_note}", evidence=evidence))
    for v in verdicts:  # the cards the node has, for the rack map
        v.figures += [CardId(c) for c in cards]
    return verdicts


def _drift(baseline, gpus: int, sizes: dict, evidence: dict) -> list:
    """WARN per value that changed since `k3doctor baseline record`, as old -> new."""
    if not isinstance(baseline, dict) or "unrecorded" in baseline:
        return []
    out = []
    if "gpus" in baseline and baseline["gpus"] != gpus:
        out.append(warn(f"GPU count changed since the baseline: {baseline['gpus']} -> {gpus}",
                        remediation=GPU_COUNT, evidence=evidence))
    old_sizes = {int(k): v for k, v in (baseline.get("hbm_gib") or {}).items()}
    for card in sorted(set(old_sizes) | set(sizes)):
        old, new = old_sizes.get(card, "absent"), sizes.get(card, "absent")
        if old != new:
            out.append(warn(f"HBM changed since the baseline: {old} -> {new} GiB", gpu=card,
                            remediation=HBM_SIZE, evidence=evidence))
    return out


@check("hbm-uniform", title="all GPUs of the rack have the same HBM size", scope="cluster",
       remediation=HBM_MIXED, reads=INVENTORY_READS, needs=("amdgpu-driver",))
def hbm_uniform(per_node, ctx):
    """§12: one KV budget for all 16 ranks needs one board type; name the odd node(s) out.
    A node that read no size is named and left out, so a rack of mostly empty nodes is not a PASS."""
    sizes, unread = {}, []
    for node, r in per_node.items():
        try:
            sizes[node] = hbm_gib(r["vendors"], r["vram"])
        except (ReadingUnavailable, ParseError) as exc:
            unread.append(error(f"HBM size not readable, left out of the comparison: {exc}", node=node))
    empty = [node for node, s in sizes.items() if all(g is None for g in s.values())]
    if len(empty) < len(sizes):
        unread += [error("no HBM size read (no AMD GPU or no mem_info_vram_total; gpu-inventory says why): "
                         "left out of the comparison", node=node) for node in empty]
    return unread + _uniform(sizes, ctx.settings.hbm_gib_per_gpu, left_out=len(per_node) - len(sizes) + len(empty))


def _uniform(sizes: dict, declared, left_out: int = 0) -> list:
    """The majority size (the declared one breaks a tie) and one FAIL per GPU that differs."""
    counts = Counter(g for s in sizes.values() for g in s.values() if g is not None)
    evidence = {node: {f"card{c}": g for c, g in s.items()} for node, s in sizes.items()}
    if not counts:
        return [skip(f"no GPU reported an HBM size on {', '.join(sizes)}: nothing to compare (gpu-inventory says "
                     "why)", evidence=evidence)]
    if len(counts) == 1:
        scope = f", {left_out} node(s) left out" if left_out else ""
        return [passed(f"all {sum(counts.values())} GPUs report {next(iter(counts))} GiB HBM{scope}",
                       evidence=evidence)]
    top = max(counts.values())
    leaders = [g for g, n in counts.items() if n == top]
    if len(leaders) > 1 and declared not in leaders:
        return [fail("HBM sizes split evenly, no majority: " + ", ".join(
            f"{node} {sorted(set(s.values()), key=str)}" for node, s in sizes.items()), evidence=evidence)]
    majority = declared if declared in leaders else leaders[0]
    return [fail(f"{node} gpu{card} has {gib} GiB HBM while the rest of the rack has {majority} GiB",
                 node=node, gpu=card, evidence=evidence)
            for node, s in sizes.items() for card, gib in s.items() if gib is not None and gib != majority]
