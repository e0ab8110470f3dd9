"""XGMI between the GPUs of a node whose platform file says `fabric: xgmi` (reference §30, §31.4): fully connected,
one hop, every link up.

Read from `amd-smi xgmi` (parser: k3doctor.parsers.xgmi): its XGMI LINK STATUS table gives each GPU pair's
link state from both ends, its LINK METRIC TABLE each GPU's link type and trained bit rate. Judged per GPU
pair, once per pair, naming both GPUs: a pair is down (FAIL) when either end reads a D (``U/D`` too: §30 "a
D in either status table" is a BLOCK) or only X, or no link to the other GPU, and so is a GPU whose links are
not XGMI at all; degraded (WARN) when only one end sees the pair, or when a GPU's links trained slower than
its peers'. A table of nothing but N/A is not a PASS:
amd-smi could not read the link state there (a VF, or every link down - rocm-systems PR #2053).
A D in the GPU LINK PORT STATUS table that the pair table does not account for (a down port whose peer the
pair table cannot place) is a down link of that GPU too (§30: "a D in either status table"). What cannot be a
reading - a port table all D under a pair table all U, links up at 0 Gb/s, a link_type amd-smi never prints -
the parser refuses, so the check is an ERROR there, never a PASS or a FAIL it did not read.
"""
from __future__ import annotations

from itertools import combinations

from k3doctor.api import Command, Param, check, error, fail, passed, remediation, warn
from k3doctor.parsers.xgmi import NO_XGMI_RATES, gbps, parse_xgmi

DOWN = remediation("XGMI-LINK-DOWN", "an XGMI link between two GPUs of the node is down", """
The GPUs of an XGMI node are fully connected by XGMI, one hop, and TP8 spans all of them (§30, §31.4): a pair
that is down (a D at either end of `amd-smi xgmi`'s XGMI LINK STATUS, U/D included, only X, no link to
the other GPU, or a GPU with no XGMI at all) blocks the launch. Keep the node out of the serving pool; look
in dmesg for a line with `xgmi` and `link error` and confirm with `rocm-smi --showtopoaccess` (any `False` is a GPU link
error, §30). Reboot the node and read `amd-smi xgmi` again: healthy is U in every non-SELF cell and
link_type XGMI on every GPU. A pair that stays down after the reboot is a hardware fault for the vendor.
""")

DEGRADED = remediation("XGMI-LINK-DEGRADED", "an XGMI link between two GPUs of the node is degraded", """
A degraded XGMI pair (seen from one end only, or a GPU whose links trained at a lower bit_rate than the
node's other GPUs) still carries traffic, so nothing fails outright (a WARN), but the
TP8 collectives of that node cross it (§30). Compare `amd-smi xgmi` with the node's other GPUs and its
last healthy reading, reboot the node and read it again; a pair that stays degraded is a hardware fault
for the vendor. The minimum bit rate is a site setting (`xgmi-links.min_bit_rate_gbps`): the reference
documents no value for any platform.
""")


def _reads(settings) -> dict:
    return {"xgmi": Command((settings.tools["amd_smi"], "xgmi"))}


def _pair_state(a: str | None, b: str | None) -> str:
    """'down', 'degraded' or 'up' for one GPU pair from the cells both ends printed (None: N/A)."""
    ends = [cell for cell in (a, b) if cell is not None]
    if not ends:
        return "down"
    letters = [set(cell.split("/")) for cell in ends]
    if any("D" in s or s == {"X"} for s in letters):  # §30: a D in either status table is a BLOCK
        return "down"
    if len(ends) == 1 or any(s != {"U"} for s in letters):
        return "degraded"
    return "up"


def _port_findings(report) -> list:
    """Per GPU: ports that read D beyond the D links its pair row shows (those are named per pair)."""
    out = []
    for g, ports in report.ports.items():
        named = sum(cell.split("/").count("D") for (src, _), cell in report.links.items() if src == g)
        down = [i for i, cell in enumerate(ports) if cell == "D"]
        if len(down) > named:
            out.append(fail(f"GPU{g} ({report.gpus[g].bdf}) XGMI link down: GPU LINK PORT STATUS reads D on port(s) "
                            f"{', '.join(map(str, down))}, {len(down) - named} more than its XGMI LINK STATUS row "
                            "names (§30: a D in either status table)", gpu=g, remediation=DOWN))
    return out


def _gpu_findings(report, minimum: float) -> list:
    """Per GPU: links that are not XGMI, or trained below the node's fastest (or the configured minimum)."""
    rates = {g.gpu: g.bit_rate_gbps for g in report.gpus.values()
             if g.bit_rate_gbps is not None and g.bit_rate_gbps not in NO_XGMI_RATES}
    best = max(rates.values(), default=None)
    out = []
    for g in report.gpus.values():
        if g.link_type != "XGMI" or g.gpu not in rates:
            out.append(fail(f"GPU{g.gpu} ({g.bdf}) links report link_type {g.link_type}, bit_rate "
                            f"{gbps(g.bit_rate_gbps)} Gb/s: not XGMI (a "
                            "PCIe-only path, or no XGMI at all on this GPU)", gpu=g.gpu, remediation=DOWN))
        # 0 Gb/s reaches here only with no link of the GPU up (the parser refuses it otherwise): its pairs are
        # down and named so, once; "degraded" would name that fault twice.
        elif rates[g.gpu] and (rates[g.gpu] < best or rates[g.gpu] < minimum):
            floor = (f"the configured minimum {minimum:g} Gb/s" if rates[g.gpu] < minimum
                     else f"{best:g} Gb/s on the node's fastest GPUs")
            out.append(warn(f"GPU{g.gpu} ({g.bdf}) XGMI links trained at {rates[g.gpu]:g} Gb/s "
                            f"(max_bandwidth {gbps(g.max_bandwidth_gbps)} Gb/s), below {floor}: degraded", gpu=g.gpu,
                            remediation=DEGRADED))
    return out + _port_findings(report)


@check("xgmi-links", title="every XGMI link between the node's GPUs up, none degraded", scope="node",
       remediation=(DOWN, DEGRADED), needs=("gpu-inventory",), reads=_reads,
       params={"min_bit_rate_gbps": Param(0, minimum=0)})
def xgmi_links(r, ctx):
    """§30, §31.4: the node's GPUs (gpus_per_node) are fully connected, one hop; a D in the pair table, or no
    XGMI, is a BLOCK."""
    report = parse_xgmi(r["xgmi"].output())
    want = ctx.settings.gpus_per_node
    if len(report.gpus) != want:
        return [error(f"amd-smi xgmi lists {len(report.gpus)} GPU(s), the node has {want}: the links of the "
                      "others were not read")]
    cells = {pair: (None if cell == "N/A" else cell) for pair, cell in report.links.items()}
    evidence = {"amd-smi xgmi link status": {f"GPU{a}->GPU{b}": cell for (a, b), cell in sorted(report.links.items())},
                "bit_rate": {f"GPU{g.gpu}": g.bit_rate_gbps for g in report.gpus.values()}}
    gpu_findings = _gpu_findings(report, ctx.param("min_bit_rate_gbps"))
    if all(cell is None for cell in cells.values()):
        if gpu_findings:
            return gpu_findings
        return [error("amd-smi xgmi reads N/A for every GPU pair: the XGMI link state is not readable here "
                      "(a VF, or every link down), so no link was judged", evidence=evidence)]
    verdicts = []
    for a, b in combinations(report.gpus, 2):
        ab, ba = cells.get((a, b)), cells.get((b, a))
        state = _pair_state(ab, ba)
        if state == "up":
            continue
        seen = f"GPU{a} ({report.gpus[a].bdf}) reads {ab or 'N/A'}, GPU{b} ({report.gpus[b].bdf}) reads {ba or 'N/A'}"
        found = fail if state == "down" else warn
        verdicts.append(found(f"gpu{a}<->gpu{b} XGMI link {state}: {seen} (amd-smi xgmi, XGMI LINK STATUS)",
                              gpu=a, remediation=DOWN if state == "down" else DEGRADED, evidence=evidence))
    for v in gpu_findings:
        v.evidence = evidence
    verdicts += gpu_findings
    if verdicts:
        return verdicts
    pairs = len(report.gpus) * (len(report.gpus) - 1) // 2
    rate = next(iter(report.gpus.values())).bit_rate_gbps
    return [passed(f"all {pairs} GPU pairs of {len(report.gpus)} GPUs linked by XGMI, every link U, "
                   f"{rate:g} Gb/s on every GPU", evidence=evidence)]
