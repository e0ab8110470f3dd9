"""What the node really is (reference §29, §30): the gfx target its GPUs report in the KFD topology
(`gfx_target_version` 120500 gfx1250, 90500 gfx950 = MI355X, 90402 gfx942), against the inventory's
`cluster.platform`. Never from the render-node count (a gfx1250 tray shows 32 render nodes for 4 GPUs)."""
from __future__ import annotations

import re

from k3doctor import platforms
from k3doctor.api import Glob, ParseError, check, error, fail, passed, remediation

TOPOLOGY = "/sys/class/kfd/kfd/topology/nodes/*/properties"
_NODE = re.compile(r"/nodes/([0-9]+)/properties$")

PLATFORM_MISMATCH = remediation("PLATFORM-MISMATCH", "the node is not the platform the inventory declares", """
The inventory's `cluster.platform` decides which checks, recipes and numbers apply (gfx1250: 4 GPUs,
UALink; mi355x: 8 GPUs, XGMI, TP8). The node's GPUs report another gfx target in
/sys/class/kfd/kfd/topology/nodes/*/properties (gfx_target_version). Point the inventory at the right
nodes, or set `cluster.platform` to what they are (k3doctor/platforms/*.yaml lists each platform's
gfx_target_version); an environment file of one platform reused on another also sets a wrong
HSA_OVERRIDE_GFX_VERSION (§29: a Memory access fault on address (nil)).
""")


def gfx_targets(topology: dict) -> dict:
    """KFD topology node -> gfx_target_version, GPU nodes only (CPU nodes report 0)."""
    out = {}
    for path, reading in topology.items():
        match = _NODE.search(path)
        if not match or not reading.exists:
            continue
        fields = dict(line.split(None, 1) for line in reading.text().splitlines() if len(line.split(None, 1)) == 2)
        value = fields.get("gfx_target_version")
        if value is None or not value.strip().isdigit():
            raise ParseError(f"{path}: no numeric gfx_target_version line")
        if int(value) != 0:
            out[int(match.group(1))] = int(value)
    return dict(sorted(out.items()))


@check("gpu-platform", title="the GPUs' KFD gfx_target_version is the declared platform's (gfx1250 / MI355X)",
       scope="node", remediation=(PLATFORM_MISMATCH,), needs=("amdgpu-driver",), reads={"topology": Glob(TOPOLOGY)})
def gpu_platform(r, ctx):
    """§29, §30: a declared platform that disagrees with the node is a FAIL that says what the node is."""
    declared = platforms.get(ctx.settings.platform)
    targets = gfx_targets(r["topology"])
    if not targets:
        return [error(f"no GPU in the KFD topology ({TOPOLOGY}): the node's platform could not be read")]
    wrong = {node: v for node, v in targets.items() if v != declared.gfx_target_version}
    evidence = {"gfx_target_version": {f"KFD node {n}": v for n, v in targets.items()},
                "declared": f"{declared.name} ({declared.gfx_target_version})"}
    if wrong:
        seen = sorted(set(wrong.values()))
        named = ", ".join(f"{v} ({p.name})" if (p := platforms.by_gfx_target(v)) else f"{v} (not a platform "
                          "k3doctor knows)" for v in seen)
        return [fail(f"KFD node(s) {', '.join(map(str, wrong))} report gfx_target_version {named}; the inventory "
                     f"declares platform {declared.name} ({declared.gfx} = {declared.gfx_target_version}) (§29, §30)",
                     evidence=evidence)]
    return [passed(f"{len(targets)} GPU(s) report gfx_target_version {declared.gfx_target_version} ({declared.gfx}), "
                   f"platform {declared.name} as declared", evidence=evidence)]
