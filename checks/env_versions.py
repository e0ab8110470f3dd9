"""Environment rules that depend on the installed software versions (reference §29, §0.2; issue 21 item 1).

The versions come from the container the engine runs in (RCCL's soname, ROCm's ``.info/version``,
aiter's and ATOM's package metadata, ``amd-smi version``) and the host's kernel release, read once per
node; the rows (``k3doctor.views.env_rules.RULES``) say which version range each rule holds for.
A version that cannot be read, or an edge whose first release is not known, applies the strict rule
and the finding says so.  The environment judged is the running ATOM ranks' (what is in effect), else
the container's; only the values of the variables a row names leave the node.
"""
from __future__ import annotations

from collections import defaultdict

from k3doctor import platforms
from k3doctor.api import (
    ContainerInspect,
    Param,
    ParseError,
    ReadingUnavailable,
    check,
    error,
    fail,
    passed,
    remediation,
    verdict,
    warn,
)
from k3doctor.views.container import ContainerView, parse_rank_envs, rank_envs
from k3doctor.views.env_rules import RULES, edges_from, edges_problem, judge, names_read
from k3doctor.views.versions import (
    KERNEL_RELEASE,
    amdsmi_libs,
    parse_amdsmi_libs,
    parse_probe,
    probe,
    version_text,
)

CHECK = "env-versions"

FABRIC = remediation("ENV-RCCL-FABRIC", "an RCCL variable keeps the collectives off the UALink fabric", """
RCCL's MNNVL path over UALoE needs cuMem (VMM) and MNNVL on every rank (§8, §29). Since rocm-systems
PR #8444 RCCL turns both on by itself on gfx1250 (NCCL_MNNVL_ENABLE default 2 = auto, NCCL_CUMEM_ENABLE
default -2 = auto): leave them unset or set 1; an explicit 0 always forces the TCP fallback (~4.5 GB/s).
On an RCCL without #8444, set NCCL_MNNVL_ENABLE=1 and NCCL_CUMEM_ENABLE=1. Remove RCCL_USE_AMD_SMI_LIB=1:
before PR #9464 it disables UALoE silently, even though RCCL's own WARN advises setting it. The proof is
the transport `P2P/CUMEMMNNVL` under NCCL_DEBUG=INFO (§20). Tell k3doctor the first RCCL release with a
PR in the inventory: `checks: {env-versions: {version_edges: {rccl-8444: "7.2"}}}`.
""")
INERT = remediation("ENV-INERT-VERSIONED", "a variable the installed version no longer reads", """
Remove it: MSCCL/MSCCL++ (PR #4340) and NPKit (PR #7046) are gone from RCCL in ROCm 7.13 and later
(RCCL_MSCCL_*, RCCL_MSCCLPP_*, MSCCLPP_ENABLE_CLIP, NPKIT_DUMP_DIR); NCCL_CHECK_POINTERS is now
NCCL_CHECK_MODE; ATOM reads its DSpark settings from `--dspark-config` / `--dspark-debug` since
ecb8e6dae (ATOM_DSPARK_DISABLE_COMPILE is still read) (§29, §30).
""")
LOG_VALUE = remediation("ENV-AITER-LOG-VALUE", "AITER_LOG_LEVEL holds a value aiter does not accept", """
aiter upper-cases AITER_LOG_LEVEL and accepts DEBUG, INFO, WARNING or ERROR only; anything else (WARN is
the usual slip) prints `Invalid AITER_LOG_LEVEL ..., using 'INFO'` and floods the log at INFO (§29, §25).
Set AITER_LOG_LEVEL=WARNING.
""")
TMPDIR = remediation("ENV-TMPDIR", "TMPDIR points into /dev/shm", """
Point TMPDIR at a disk directory (e.g. /tmp): under /dev/shm it broke HIP child processes on MI355X
(hipErrorInvalidValue, SIGSEGV in libamdhip64.so; rocm-systems #11563) and spends the shared-memory
budget the engine needs (§29, §15).
""")
MORI = remediation("ENV-MORI", "a MORI variable takes the job off the fabric or overrides its grouping", """
MORI_CCO_FABRIC_DISABLE=1 makes cco host-only: the whole job runs over host LSA + RDMA instead of UALink
(§29). MORI_VPOD_ID groups ranks by hand and must be on all ranks or none (`MORI_VPOD_ID set on N/M
ranks`); MORI_CCO_FABRIC_CROSSNODE_LSA=1 and MORI_CCO_FABRIC_LENIENT=1 (skips cross-node hipMemSetAccess
failures) have no place in a wide-EP environment. Remove them unless a bring-up step says otherwise.
""")

HIP_ALLOC = remediation("ENV-HIP-ALLOC", "a PyTorch allocator setting known to hang on this ROCm", """
Drop `expandable_segments:True` from PYTORCH_HIP_ALLOC_CONF on ROCm 7.14: it hangs `Tensor.to('cuda')` in
hsaKmtMemoryVaMap (pytorch/pytorch #192259, §29). A site with a fixed ROCm tells k3doctor in `version_edges`.
""")
TUNING = remediation("ENV-RCCL-TUNING", "RCCL tuning variables differ from gfx1250's defaults", """
Information: on gfx1250 RCCL picks CE AllReduce (RCCL_CE_ALLREDUCE=-1), DDA LL128 and saturated P2P channels
from its architecture table; RCCL_DDA_*, RCCL_CE_*, NCCL_MIN/MAX_CTAS override it and RCCL_IGNORE_ARCH_TABLE=1
reverts it (§29). Keep them only with a measurement that says they help.
""")

VISIBLE = remediation("ENV-VISIBLE-DEVICES", "HIP_VISIBLE_DEVICES names a GPU past ROCR_VISIBLE_DEVICES' list", """
With both set, ROCr hides every GPU not in ROCR_VISIBLE_DEVICES first and HIP_VISIBLE_DEVICES then indexes
what is left (0..count-1), not the node's GPU numbers (§31.3): `ROCR_VISIBLE_DEVICES=4,5,6,7` with
`HIP_VISIBLE_DEVICES=4,5,6,7` leaves the process no GPU. Set one of
the two (the scheduler's allocation usually sets ROCR_VISIBLE_DEVICES), or index HIP_VISIBLE_DEVICES from 0.
""")

SONAME_MIX = remediation("ENV-AMD-SMI-SONAME-MIX", "two amd-smi library generations on one library path", """
amd-smi 27.0 (ROCm 10.0) renamed its library libamd_smi.so.26 -> libamd_smi.so.27 (§29). With both on the
container's library path (the image's ROCm and a host ROCm mounted in through LD_LIBRARY_PATH), RCCL and the
tools can load a library of the other generation. Keep one ROCm: drop the host directory from LD_LIBRARY_PATH
(or mount the host's ROCm matching the image).
""")


_PLACEHOLDERS = defaultdict(lambda: "<value>")  # {env[NAME]} of a row's message, in its explain text
for _rule in RULES:  # `k3doctor explain ENV-...` for every row, with the version range it holds for
    remediation(_rule.id, f"{', '.join(_rule.variables)}: {_rule.test} ({_rule.section})",
                f"env-versions rule {_rule.id} ({_rule.status.upper()}, reference {_rule.section}): "
                f"{_rule.message.format(name=' / '.join(_rule.variables), value='<value>', env=_PLACEHOLDERS)}.\n"
                f"Applies: {_rule.applies}. What to do: `k3doctor explain {_rule.remediation}`.\n")


def _reads(settings) -> dict:
    keep = names_read()
    return {"container": ContainerInspect(settings.container, keep=keep), "ranks": rank_envs(settings.container, keep),
            "versions": probe(settings.container), "kernel": KERNEL_RELEASE,
            "amdsmi_libs": amdsmi_libs(settings.container)}


def _environments(r) -> list:
    """(label, env) of the running ATOM ranks (one per distinct environment), else of the container."""
    record = r["container"].record
    if record is None:
        return []
    container = ContainerView.from_record(record)
    ranks = parse_rank_envs(r["ranks"].output()) if container.running else None
    if not ranks:
        return [(f"container {container.name}", container.env)]
    groups: dict = {}
    for rank in ranks:
        groups.setdefault(tuple(sorted(rank.env.items())), []).append(f"pid {rank.pid}")
    return [(f"rank {', '.join(pids)}", dict(env)) for env, pids in groups.items()]


@check(CHECK, title="environment rules for the RCCL, aiter, ATOM and ROCm versions installed (§29)", scope="node",
       reads=_reads, remediation=(FABRIC, INERT, LOG_VALUE, TMPDIR, MORI, HIP_ALLOC, TUNING, VISIBLE, SONAME_MIX),
       params={"version_edges": Param({}, validate=edges_problem)})
def env_versions(r, ctx):
    """§29: one finding per variable, naming the version range the rule held for and how the node's version
    was read; the versions themselves are in every verdict's evidence."""
    environments = _environments(r)
    if not environments:
        return passed(f"no container {ctx.settings.container}: nothing to judge (launch-config names it)")
    kernel = r["kernel"].content if r["kernel"] is not None else None
    found = parse_probe(r["versions"].output("the version probe"), kernel)
    edges = edges_from(ctx.param("version_edges"))
    versions = {name: version_text(f.version) for name, f in found.items()}
    off = platforms.get(ctx.settings.platform).env_rules_off
    rules = tuple(rule for rule in RULES if rule.remediation not in off)
    verdicts, notes = [], []
    for label, env in environments:
        for rule, name, value, why in judge(env, found, edges, rules):
            text = rule.message.format(name=name, value=value if value is not None else "(set)", env=env)
            if rule.status == "info":  # said in the PASS line, never a finding
                notes.append(f"INFO: {label}: {text} [{rule.id}]")
                continue
            verdicts.append(verdict(
                rule.status, f"{label}: {text} [{rule.id}; {rule.applies}: {why}; {rule.section}]",
                remediation=rule.remediation,
                evidence={"rule": rule.id, "variable": name, "applies": rule.applies, "version_range": why,
                          "versions": versions, "source": label}))
    verdicts += soname_mix(r.get("amdsmi_libs"))
    holders = [label for label, env in environments if "MORI_VPOD_ID" in env]
    # §29: `MORI_VPOD_ID set on N/M ranks` - all or none
    if MORI not in off and holders and len(holders) < len(environments):
        verdicts.append(fail(f"MORI_VPOD_ID is set on {', '.join(holders)} but not on the other ranks of this node: "
                             "manual vPOD grouping must be all-or-none across the job (§29)", remediation=MORI,
                             evidence={"set on": holders, "environments": [label for label, _ in environments]}))
    if verdicts:
        return verdicts
    known = [f"{name} {v}" for name, v in versions.items() if v != "unknown"]
    unknown = [name for name, v in versions.items() if v == "unknown"]
    said = ([f"read: {', '.join(known)}"] if known else []) + (
        [f"not read: {', '.join(unknown)}, so their rules applied strictly"] if unknown else [])
    return passed(f"{len(rules)} version rules hold for {', '.join(label for label, _ in environments)} "
                  f"({'; '.join(said)})" + "".join(f"; {note}" for note in notes), evidence={"versions": versions})


def soname_mix(reading) -> list:
    """§29: libamd_smi.so.26 and .27 on one library path is a WARN naming where each lies; an unreadable
    listing is an ERROR (a mix that was not looked for is no PASS)."""
    if reading is None:
        return []
    try:
        majors = parse_amdsmi_libs(reading.output("the libamd_smi listing"))
    except (ReadingUnavailable, ParseError) as exc:
        return [error(f"the container's libamd_smi libraries were not listed: {exc}")]
    if len(majors) < 2:
        return []
    where = "; ".join(f"libamd_smi.so.{m} in {', '.join(dirs)}" for m, dirs in sorted(majors.items()))
    return [warn(f"two amd-smi library generations on the container's library path ({where}): the SONAME changed "
                 "with amd-smi 27.0, so RCCL and the tools can load the other ROCm's library (§29)",
                 remediation=SONAME_MIX, evidence={f"libamd_smi.so.{m}": dirs for m, dirs in majors.items()})]
