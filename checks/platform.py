"""What the node really is (reference §29, §30, §31.4): the gfx target its GPUs report in the KFD topology
(`gfx_target_version`) and, where the platform file lists `device_ids`, their PCI device id (one gfx target can
be several products: MI300A and MI300X both report 90402, their device ids differ), against the inventory's
`cluster.platform`; and the gfx targets the inventory's recipe runs on (a recipe whose kernels are for another
target fails at launch, §31.3). Every number comes from k3doctor/platforms/*.yaml. Never from the render-node
count (a partitioned GPU shows several render nodes, §29)."""
from __future__ import annotations

from k3doctor import platforms, recipes
from k3doctor.api import Glob, check, error, fail, passed, remediation
from k3doctor.views.gpu import KFD_NODES_GLOB, kfd_gpus

PLATFORM_MISMATCH = remediation("PLATFORM-MISMATCH", "the node is not the platform the inventory declares", """
The inventory's `cluster.platform` decides which checks, recipes and numbers apply (GPUs per node, fabric,
partitions: `k3doctor list --platform NAME`). The node's GPUs report another gfx target or device id in
/sys/class/kfd/kfd/topology/nodes/*/properties (gfx_target_version, device_id). Point the inventory at the
right nodes, or set `cluster.platform` to what they are (k3doctor/platforms/*.yaml lists each platform's
gfx_target_version and device ids); an environment file of one platform reused on another also sets a wrong
HSA_OVERRIDE_GFX_VERSION (§29: a Memory access fault on address (nil)), and a recipe whose kernels are for
the declared target dies at launch on another (§31.3: `mla_gluon requires gfx950 (CDNA4), got gfx942`):
choose a recipe for the nodes' target too.
""")


def _known(what: str, platforms_found: list) -> str:
    return f"{what} ({', '.join(p.name for p in platforms_found)})" if platforms_found else \
        f"{what} (not a platform k3doctor knows)"


@check("gpu-platform", title="the GPUs' KFD gfx_target_version and device id are the declared platform's",
       scope="node", remediation=(PLATFORM_MISMATCH,), needs=("amdgpu-driver",),
       reads={"topology": Glob(KFD_NODES_GLOB)})
def gpu_platform(r, ctx):
    """§29, §30, §31.4: a declared platform that disagrees with the node is one FAIL that says what the node is,
    and names the recipe's gfx targets beside the node's where the recipe cannot run there (§31.3)."""
    declared = platforms.get(ctx.settings.platform)
    gpus = kfd_gpus(r["topology"])
    if not gpus:
        return [error(f"no GPU in the KFD topology ({KFD_NODES_GLOB}): the node's platform could not be read")]
    evidence = {"gfx_target_version": {f"KFD node {n}": v for n, (v, _) in gpus.items()},
                "declared": f"{declared.name} ({declared.gfx_target_version})"}
    wrong = {node: v for node, (v, _) in gpus.items() if v != declared.gfx_target_version}
    if wrong:
        named = ", ".join(_known(str(v), platforms.by_gfx_target(v)) for v in sorted(set(wrong.values())))
        return [fail(f"KFD node(s) {', '.join(map(str, wrong))} report gfx_target_version {named}; the inventory "
                     f"declares platform {declared.name} ({declared.gfx} = {declared.gfx_target_version}) (§29, §30)"
                     + _recipe_note(ctx, set(wrong.values())), evidence=evidence)]
    verdicts = []
    if declared.device_ids:
        evidence["device_id"] = {f"KFD node {n}": f"{d:#06x}" if d is not None else "missing"
                                 for n, (_, d) in gpus.items()}
        odd = {node: d for node, (_, d) in gpus.items() if d not in declared.device_ids}
        if odd:
            named = ", ".join(_known(f"{d:#06x}" if d is not None else "no device_id", platforms.by_device_id(d))
                              for d in sorted(set(odd.values()), key=str))
            verdicts.append(fail(f"KFD node(s) {', '.join(map(str, odd))} report device id {named}; platform "
                                 f"{declared.name} is {', '.join(f'{d:#06x}' for d in sorted(declared.device_ids))} "
                                 "(one gfx target, several products: §31.4)", evidence=evidence))
    device = f" and a {declared.name} device id" if declared.device_ids else ""
    return verdicts or [passed(f"{len(gpus)} GPU(s) report gfx_target_version {declared.gfx_target_version} "
                               f"({declared.gfx}){device}, platform {declared.name} as declared", evidence=evidence)]


def _recipe_note(ctx, versions: set) -> str:
    """"; recipe R runs on gfx950 only, these GPUs are gfx942" where the inventory's recipe (validated when the
    inventory was read) cannot run on the targets the node reports."""
    if not ctx.settings.recipe:
        return ""
    recipe = recipes.load(ctx.settings.recipe)
    found = sorted({p.gfx for v in versions for p in platforms.by_gfx_target(v)})
    if not found or set(found) & set(recipe.gfx):
        return ""
    return (f"; recipe {recipe.name} runs on {' / '.join(recipe.gfx)} only, these GPUs are {' / '.join(found)}: "
            "its kernels fail at launch (§31.3)")
