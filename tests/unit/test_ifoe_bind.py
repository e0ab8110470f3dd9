"""ifoe-bound: each GPU's `.1` (IFoE) function bound to the ifoe driver (reference §29, rocm-systems PR #6965).
The listing script runs for real in a local shell on a sysfs-shaped tree (the card's device/.. holds its sibling
functions, as on a node)."""
import os
import subprocess

import pytest
from k3doctor.checks import ifoe_bind

from k3doctor import testing
from k3doctor.readings import CommandReading
from k3doctor.registry import REGISTRY
from k3doctor.results import Status

CHECK = REGISTRY.checks["ifoe-bound"]


def tree(root, drivers):
    """Cards 0..n under root/class/drm, each GPU's .1 function bound to ``drivers[card]`` ("-": none, "absent")."""
    for card, driver in enumerate(drivers):
        cdir = root / f"class/drm/card{card}"
        (cdir / "device").mkdir(parents=True)
        (cdir / "device/uevent").write_text(f"DRIVER=amdgpu\nPCI_CLASS=120000\nPCI_SLOT_NAME=000{card}:01:00.0\n")
        function = cdir / f"000{card}:01:00.1"
        if driver != "absent":
            function.mkdir()
        if driver not in ("absent", "-"):
            os.symlink(f"../../../../bus/pci/drivers/{driver}", function / "driver")
    other = root / "class/drm/card9/device"  # a display card on another driver: not a GPU of ours
    other.mkdir(parents=True)
    (other / "uevent").write_text("DRIVER=ast\nPCI_SLOT_NAME=0000:03:00.0\n")


def listing(root):
    script = ifoe_bind.LISTING.replace("/sys/class/drm", f"{root}/class/drm")
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=10).stdout
    return out.replace(f"{root}/class/drm", "/sys/class/drm")


def judge(text, rc=0, ifoe=True):
    return testing.judge(CHECK, {"functions": CommandReading("sh -c ...", rc, text, ""), "ifoe": ifoe})


def test_every_function_bound_to_ifoe_passes(tmp_path):
    tree(tmp_path, ["ifoe"] * 4)
    [v] = judge(listing(tmp_path))
    assert v.status == Status.PASS and "4 GPU(s): each IFoE function bound to ifoe" in v.message


@pytest.mark.parametrize("driver, said", [("-", "is bound to no driver"), ("vfio-pci", "is bound to vfio-pci"),
                                          ("absent", "does not exist")])
def test_a_function_not_held_by_ifoe_fails_that_gpu(tmp_path, driver, said):
    tree(tmp_path, ["ifoe", "ifoe", driver, "ifoe"])
    [v] = judge(listing(tmp_path))
    assert (v.status, v.gpu, v.remediation) == (Status.FAIL, 2, "IFOE-FUNCTION-UNBOUND")
    assert v.message.startswith(f"card2's IFoE function 0002:01:00.1 {said}, not to ifoe")


def test_nothing_read_is_an_error_not_a_pass(tmp_path):
    assert [v.status for v in judge("")] == [Status.ERROR]
    assert [v.status for v in judge("garbage\n")] == [Status.ERROR]
    assert [v.status for v in judge("", rc=1)] == [Status.ERROR]


def test_without_the_ifoe_module_the_check_steps_aside_for_amdgpu_driver(tmp_path):
    tree(tmp_path, ["-"] * 4)
    [v] = judge(listing(tmp_path), ifoe=False)
    assert v.status == Status.SKIP and "follows from amdgpu-driver: ifoe is not loaded" in v.message
