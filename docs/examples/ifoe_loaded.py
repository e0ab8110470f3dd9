from k3doctor.api import Exists, File, Glob, check, fail, passed, remediation, warn

IFOE = remediation("IFOE-MISSING", "ifoe is not loaded", "modprobe ifoe before amdgpu (reference §5).")
NO_CARDS = remediation("IFOE-NO-CARDS", "no GPU exposes a ualink directory", "Reload amdgpu, ifoe first (§5).")

@check("ifoe-loaded", title="ifoe module loaded before any card is configured", scope="node",
       remediation=(IFOE, NO_CARDS), params={"min_cards": 4},
       reads={"ifoe": File("/sys/module/ifoe/initstate"), "kfd": Exists("/dev/kfd"),
              "states": Glob("/sys/class/drm/card*/device/ualink/accel_state")})
def ifoe_loaded(r, ctx):
    """§5: UALink-over-Ethernet is carried by the ifoe stack."""
    if not r["ifoe"].exists:
        return fail("ifoe not loaded")  # no remediation named: the check's first one (IFOE) is attached
    if r["kfd"] and len(r["states"]) < ctx.param("min_cards"):
        return warn(f"{len(r['states'])} card(s) expose ualink/", remediation=NO_CARDS)
    return passed(f"ifoe {r['ifoe'].text()}")
