"""The shared typed views: GPU/sysfs view (cards, PCI address -> card, AccId -> node + card) and kernel-log view."""
import pytest

from k3doctor.views import gpu
from k3doctor.views.kernel_log import KernelLog, seconds_since_amdgpu_load
from k3doctor.parsers import ParseError
from k3doctor.readings import CommandReading, FileReading, ReadingUnavailable


def files(values: dict) -> dict:
    return {path: FileReading(path, value) for path, value in values.items()}


def test_card_bdfs_and_the_ifoe_function_maps_to_its_gpu_by_bus():
    uevents = files({"/sys/class/drm/card0/device/uevent": "DRIVER=amdgpu\nPCI_SLOT_NAME=0000:C6:00.0\n",
                     "/sys/class/drm/card1/device/uevent": "DRIVER=amdgpu\nPCI_SLOT_NAME=0001:01:00.0\n",
                     "/sys/class/drm/card2/device/uevent": "MAJOR=226\n"})
    bdfs = gpu.card_bdfs(uevents)
    assert bdfs == {0: "0000:c6:00.0", 1: "0001:01:00.0"}
    assert gpu.card_for_bdf("0001:01:00.1", bdfs) == 1  # §28: the IFoE/AFM device is function .1 on the GPU's bus
    assert gpu.card_for_bdf("0000:c6:00.0", bdfs) == 0 and gpu.card_for_bdf("0000:c7:00.0", bdfs) is None


def test_accel_ids_skip_unset_and_non_numbers_and_duplicates_are_named():
    ualink = files({"/sys/class/drm/card0/device/ualink/accel_id": "63\n",
                    "/sys/class/drm/card1/device/ualink/accel_id": "4294967295\n",
                    "/sys/class/drm/card2/device/ualink/accel_id": "garbage\n",
                    "/sys/class/drm/card3/device/ualink/accel_state": "60\n"})
    assert gpu.accel_ids(ualink) == {63: 0}
    node, card, how = gpu.locate_accid(63, {"ct16": {63: 0}, "ct17": {63: 2}}, 4)
    assert (node, card) == ("ct16", 0) and how == "sysfs accel_id; also claimed by ct17 card2"


def test_kernel_log_refuses_what_is_not_readable():
    with pytest.raises(ReadingUnavailable):
        KernelLog.read(CommandReading("dmesg", 1, "", "dmesg: read kernel buffer failed: Operation not permitted"))
    with pytest.raises(ParseError):
        KernelLog.read(CommandReading("dmesg", 0, "-- Boot 0123456789abcdef0123456789abcdef --\n", ""))


def test_age_and_load_time_from_one_implementation():
    dmesg = CommandReading("dmesg", 0, "[    1.000000] Linux version 6.8\n[   15.220114] [drm] amdgpu kernel "
                           "modesetting enabled.\n[  900.000000] x\n", "")
    uptime = FileReading("/proc/uptime", "1000.00 3.00\n")
    log = KernelLog.read(dmesg, uptime)
    assert log.amdgpu_loads() == [1] and log.age_s(900.0) == 100.0
    assert log.age_s(1004.0) == 0.0 and log.age_s(2000.0) is None  # past uptime + slack: not a current stamp
    assert seconds_since_amdgpu_load(uptime, dmesg) == (1000.0 - 15.220114, "amdgpu loaded 985s ago")
    assert seconds_since_amdgpu_load(FileReading("/proc/uptime", "up\n"), dmesg)[0] is None
