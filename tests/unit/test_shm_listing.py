"""shm-clean's /dev/shm listing: a name with a TAB or newline is read whole, so --fix removes
exactly that file; a listing cut inside a name is an error, never a shorter (different) name."""
import shlex

import pytest
from k3doctor.checks import shm

from k3doctor import testing
from k3doctor.api import Context, judge_safely
from k3doctor.inventory.types import Settings
from k3doctor.parsers import ParseError
from k3doctor.readings import CommandReading, Readings
from k3doctor.registry import REGISTRY
from k3doctor.results import Status

CHECK = REGISTRY.checks["shm-clean"]


class RecordingTransport:
    node = "ct17"

    def __init__(self):
        self.commands = []

    def run(self, command, *, timeout_s, stdin=None):
        self.commands.append(command)
        return CommandReading(command, 0, "", "")


def judge(listing):
    r = Readings({"shm": CommandReading("find", 0, listing, ""), "kfd": {}})
    return testing.judge(CHECK, r, node="ct17")


def test_the_reading_puts_the_size_before_the_name():
    argv = CHECK.readings_for(Settings())["shm"].argv
    assert argv[-2:] == ("-printf", "%s\\t%f\\0")


def test_a_name_with_a_tab_is_removed_whole_not_as_its_prefix():
    assert shm.stale_entries("4096\tpsm_a\tb\0" "7\tnccl-x\ny\0") == [("nccl-x\ny", 7), ("psm_a\tb", 4096)]
    [v] = judge("4096\tpsm_a\tb\0")
    assert v.status == Status.FAIL and v.evidence["names"] == ["psm_a\tb"]
    assert "'psm_a\\tb'" in v.message  # escaped on screen, exact in the evidence
    transport = RecordingTransport()
    [done] = shm.remove_stale(transport, [v], None)
    assert shlex.split(transport.commands[0]) == ["rm", "-f", "--", "/dev/shm/psm_a\tb"]
    assert done.evidence["removed"] == ["/dev/shm/psm_a\tb"]


@pytest.mark.parametrize("listing", [
    "4096\tpsm_abc",  # cut inside the last name: "psm_a..." is another file
    "4096\tpsm_a\0" "40",
    "psm_a\t4096\0",  # the old name-first layout
    "4096\t\0",
    "4096\tpsm_a/b\0",
    "9" * 30 + "\tpsm_a\0",
])
def test_cut_or_garbled_listing_is_an_error(listing):
    with pytest.raises(ParseError):
        shm.stale_entries(listing)
    [v] = judge(listing)
    assert v.status == Status.ERROR


def test_a_listing_cut_at_the_output_cap_is_an_error():
    r = Readings({"shm": CommandReading("find", 0, "4096\tpsm_a\0", "", truncated=True), "kfd": {}})
    [v] = judge_safely(CHECK.judge, r, Context(CHECK, Settings(), node="ct17"))
    assert v.status == Status.ERROR and "cut off" in v.message
