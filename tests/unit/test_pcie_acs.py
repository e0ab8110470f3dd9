"""pcie-acs (§31.3): the listing script run on this machine's own /sys/bus/pci (real kernel, no fake) parses;
listings judged: SrcValid+ above a GPU/NIC = WARN naming the bridge, config past 64 bytes unread = SKIP."""
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
