"""pcie-acs (§31.3): the listing script run on this machine's own /sys/bus/pci (real kernel, no fake) parses;
listings judged: SrcValid+ above a GPU/NIC = WARN naming the bridge, config past 64 bytes unread = SKIP."""
import os
import subprocess

import pytest
from k3doctor.checks import pcie_acs

from k3doctor import testing
from k3doctor.parsers import ParseError
from k3doctor.results import Status

GPU, NIC = "@endpoint 0000:05:00.0\n", "@endpoint 0000:06:00.0\n"


def judge(text):
    return testing.judge("pcie-acs", {"acs": text})


def test_the_listing_runs_on_this_machines_kernel():
    out = subprocess.run(["sh", "-c", pcie_acs._LIST], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    pcie_acs.parse_listing(out.stdout)  # a value, not a ParseError


def test_srcvalid_on_a_bridge_above_a_gpu_warns_naming_that_bridge():
    verdicts = judge(GPU + NIC + "@bridge 0000:00:01.1 5 5 001d\n@bridge 0000:00:02.1 6 6 0000\n")
    assert [(v.status, v.remediation, v.evidence) for v in verdicts] == [
        (Status.WARN, "PCIE-ACS-SRCVALID", {"bridge": "0000:00:01.1"})]
    assert "ACSCtl: SrcValid+" in verdicts[0].message


@pytest.mark.parametrize("bridges, status, said", [
    ("@bridge 0000:00:01.1 5 5 001c\n@bridge 0000:00:02.1 6 6 none\n", Status.PASS, "off on all 2 bridge(s)"),
    ("@bridge 0000:00:01.1 5 5 unread\n", Status.SKIP, "needs root"),
    ("", Status.PASS, "all 0 bridge(s) above 2"),
])
def test_off_missing_or_unread(bridges, status, said):
    [v] = judge(GPU + NIC + bridges)
    assert v.status == status and said in v.message


@pytest.mark.parametrize("text", ["@bridge 0000:00:01.1 5 5 zz1d\n", "od: /sys/bus/pci/devices/x/config: EIO\n",
                                  "@endpoint\n"])
def test_anything_else_is_a_parse_error(text):
    with pytest.raises(ParseError):
        pcie_acs.parse_listing(text)
    assert judge(GPU + text)[0].status == Status.ERROR


def test_no_gpu_or_nic_listed_is_an_error():
    [v] = judge("@bridge 0000:00:01.1 5 5 0000\n")
    assert v.status == Status.ERROR and "no GPU or NIC" in v.message


def _config(bus: int | None, caps: list, size: int = 4096) -> bytes:
    """A bridge's config space: its bus range in the header (``bus`` as secondary and subordinate) and the
    extended capabilities ``caps`` - (offset, id, dword at +4) - chained in the order given."""
    config = bytearray(4096)
    if bus is not None:
        config[0x19] = config[0x1a] = bus
    for at, (offset, cap_id, second) in enumerate(caps):
        after = caps[at + 1][0] if at + 1 < len(caps) else 0
        config[offset:offset + 4] = (cap_id | 1 << 16 | after << 20).to_bytes(4, "little")
        config[offset + 4:offset + 8] = second.to_bytes(4, "little")
    return bytes(config[:size])


def _device(root, bdf, cls, vendor="0x1022", config=None, bus_attrs=None):
    d = root / bdf
    d.mkdir()
    (d / "class").write_text(cls + "\n")
    (d / "vendor").write_text(vendor + "\n")
    if config is not None:
        (d / "config").write_bytes(config)
    if bus_attrs is not None:
        (d / "secondary_bus_number").write_text(bus_attrs[0] + "\n")
        (d / "subordinate_bus_number").write_text(bus_attrs[1] + "\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="a private mount namespace (unshare -m) needs root")
def test_the_listing_walks_each_bridges_capabilities_from_one_read(tmp_path):
    """Over a sysfs laid out as the kernel has it (bind-mounted on /sys/bus/pci/devices in a mount namespace of
    its own): the bus range from the kernel's attributes, else (an older kernel, or attributes that are not a
    number) from the header; ACS found wherever it sits in the capability list; a bridge whose config space
    stops at 64 bytes (what a reader without CAP_SYS_ADMIN gets) is unread, not passed; a bridge above no GPU
    or NIC is not listed."""
    root = tmp_path / "devices"
    root.mkdir()
    _device(root, "0000:05:00.0", "0x120000", vendor="0x1002")
    _device(root, "0000:06:00.0", "0x020000", vendor="0x15b3")
    _device(root, "0000:07:00.0", "0x120000", vendor="0x10de")  # not AMD: not an endpoint of ours
    acs_third = [(0x100, 0x0001, 0), (0x148, 0x000b, 0), (0x200, 0x000d, 0x001d << 16 | 0x007f)]
    _device(root, "0000:00:01.1", "0x060400", config=_config(None, acs_third), bus_attrs=("5", "5"))
    _device(root, "0000:00:02.1", "0x060400", config=_config(6, [(0x100, 0x0001, 0)]))  # header only, no ACS
    _device(root, "0000:00:03.1", "0x060400", config=_config(5, [(0x100, 0x000d, 0)]), bus_attrs=("x", "5"))
    _device(root, "0000:00:04.1", "0x060400", config=_config(5, [], size=64), bus_attrs=("5", "6"))
    _device(root, "0000:00:05.1", "0x060400", config=_config(9, [(0x100, 0x000d, 1 << 16)]), bus_attrs=("9", "9"))
    # never "off" from what was not read: ACS whose control register would lie past the 4 KiB, a list that loops,
    # a config space of all ones (the device gone)
    past_end = bytearray(_config(None, [(0x100, 0x0001, 0)]))
    past_end[0x100:0x104] = (0x0001 | 1 << 16 | 0xffc << 20).to_bytes(4, "little")
    past_end[0xffc:0x1000] = (0x000d | 1 << 16).to_bytes(4, "little")
    looping = bytearray(_config(None, []))
    looping[0x100:0x104] = (0x0001 | 1 << 16 | 0x100 << 20).to_bytes(4, "little")
    for bdf, config in (("0000:00:06.1", past_end), ("0000:00:07.1", looping),
                        ("0000:00:08.1", bytes(256) + b"\xff" * 3840)):
        _device(root, bdf, "0x060400", config=bytes(config), bus_attrs=("5", "5"))
    run = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                          'mount --bind "$1" /sys/bus/pci/devices && exec sh -c "$2"', "sh", str(root),
                          pcie_acs._LIST], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert run.stdout.splitlines() == [
        "@endpoint 0000:05:00.0", "@endpoint 0000:06:00.0",
        "@bridge 0000:00:01.1 5 5 001d", "@bridge 0000:00:02.1 6 6 none", "@bridge 0000:00:03.1 5 5 0000",
        "@bridge 0000:00:04.1 5 6 unread", "@bridge 0000:00:06.1 5 5 unread", "@bridge 0000:00:07.1 5 5 unread",
        "@bridge 0000:00:08.1 5 5 unread"]
    [verdict] = judge(run.stdout)
    assert verdict.status == Status.WARN and verdict.evidence == {"bridge": "0000:00:01.1"}
