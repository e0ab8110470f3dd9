"""Driver state (reference §5): amdgpu bring-up parameters and the KFD device node."""
from __future__ import annotations

from k3doctor.readings import Exists, File
from k3doctor.registry import check, remediation
from k3doctor.results import fail, passed

PARAMS = "/sys/module/amdgpu/parameters"
REQUIRED = {"gpu_recovery": "0", "halt_if_hws_hang": "1"}

AMDGPU_PARAMS = remediation("AMDGPU-PARAMS", "amdgpu loaded without the bring-up parameters", """
gpu_recovery=0 and halt_if_hws_hang=1 make a hardware-scheduler hang halt the GPU so it
stays diagnosable, instead of a silent recovery reset that kills the run with nothing in
the log (reference §5). They are load-time parameters: only an unload/reload changes them,
and reloading amdgpu retrains the UALink links (§6) - plan it, do not do it under a job.
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


@check("amdgpu-params", title="amdgpu loaded with gpu_recovery=0 halt_if_hws_hang=1, /dev/kfd present",
       scope="node", remediation=(AMDGPU_PARAMS, NO_KFD),
       reads={"kfd": Exists("/dev/kfd"), **{p: File(f"{PARAMS}/{p}") for p in REQUIRED}})
def amdgpu_params(r, ctx):
    """§5: without these a HWS hang resets the GPU and the run dies with an empty log."""
    if not r["kfd"]:
        return fail("/dev/kfd does not exist: amdgpu is not loaded", remediation=NO_KFD,
                    evidence={"/dev/kfd": "missing"})
    found = {p: r[p].text() if r[p].exists else None for p in REQUIRED}
    evidence = {f"{PARAMS}/{p}": v if v is not None else "missing" for p, v in found.items()}
    wrong = [f"{p}={v if v is not None else 'missing'} (need {want})"
             for p, want in REQUIRED.items() if found[p] != want]
    if wrong:
        return fail("amdgpu loaded with " + ", ".join(wrong), remediation=AMDGPU_PARAMS, evidence=evidence)
    return passed("gpu_recovery=0 halt_if_hws_hang=1, /dev/kfd present", evidence=evidence)
