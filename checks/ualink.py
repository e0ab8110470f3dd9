"""UALink sysfs state per GPU (reference §6)."""
from __future__ import annotations

import re

from k3doctor.readings import Glob
from k3doctor.registry import check, remediation
from k3doctor.results import fail, passed, warn

CARD_GLOB = "/sys/class/drm/card*/device/ualink/accel_state"
_CARD = re.compile(r"/card(\d+)/")

NOT_ACTIVE = remediation("UALINK-NOT-ACTIVE", "a GPU's UALink accelerator is not active", """
Every GPU's ualink/accel_state must read `active` before anything multi-node (§6);
`ready` is tolerated (ROCr and RCCL accept it). Right after `modprobe amdgpu` a card reads
`unconfigured` for tens of seconds while inb-node-agent configures it: wait ~60 s and
re-check. Still `unconfigured` after that (especially with ppod_id all-zero and accel_id
4294967295): waiting will not fix it - confirm `lsmod | grep ^ifoe`, then
`rmmod amdgpu && modprobe amdgpu ...` (§5 parameters). `error`/`invalid`: reload the driver;
if it persists, reset the tray (§11). Note `active` is necessary, not sufficient: run the
deep-tier fabric probe before a multi-node launch (§8).
""")


def card_index(path: str) -> int:
    return int(_CARD.search(path).group(1))


@check("ualink-state", title="every GPU's UALink accel_state is active", scope="gpu",
       remediation=NOT_ACTIVE, reads={"states": Glob(CARD_GLOB)})
def ualink_state(r, ctx):
    """§6: accept `active`, tolerate `ready`, anything else keeps the fabric from forming."""
    states = r["states"]
    if not states:
        return fail(f"no GPU exposes {CARD_GLOB} (amdgpu not loaded, or no UALink driver)",
                    evidence={"glob": CARD_GLOB})
    verdicts = []
    for path, reading in sorted(states.items(), key=lambda kv: card_index(kv[0])):
        gpu, state = card_index(path), reading.text().lower()
        evidence = {path: state}
        if state == "active":
            verdicts.append(passed("accel_state active", gpu=gpu, evidence=evidence))
        elif state == "ready":
            verdicts.append(warn("accel_state is 'ready' (tolerated; this firmware normally reports active)",
                                 gpu=gpu, evidence=evidence))
        else:
            verdicts.append(fail(f"accel_state is '{state}' (need active)", gpu=gpu, evidence=evidence))
    return verdicts
