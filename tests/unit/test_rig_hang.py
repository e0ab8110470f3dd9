"""The rig's hang drill (k3rig.hang), which stands in for a rank stuck in the driver around k3doctor's
all_reduce worker: the drill's syntax, and that the worker that ships to nodes carries no hook for it."""
import re

import pytest
from k3rig import hang

from k3doctor.probes.allreduce import WORKER_SOURCE
from k3doctor.probes.allreduce_runs import STAGES


@pytest.mark.parametrize("text, message", [
    ("n9@init", "expected NODE[:LOCAL_RANK]@STAGE[@once]"),
    ("n1@boot", "expected NODE[:LOCAL_RANK]@STAGE[@once]"),
    ("n1@dispatch", "a stage of start, rendezvous, init, warmup, sweep, alltoall"),
    ("n1@init@twice", "expected NODE[:LOCAL_RANK]@STAGE[@once]"),
])
def test_bad_hangs_are_clear_errors(text, message):
    with pytest.raises(hang.HangError, match=re.escape(message)):
        hang.parse(text, ["n1", "n2"])


def test_hangs_parse():
    assert hang.parse("n2:1@rendezvous", ["n1", "n2"]) == hang.Hang("n2", 1, "rendezvous", False)
    assert hang.parse("n1@init@once", ["n1"]) == hang.Hang("n1", 0, "init", True)
    assert hang.STAGES == STAGES  # the drill stops at the worker's own stages


def test_the_shipped_worker_has_no_test_hook():
    for word in (b"inject", b"SIGSTOP", b"K3DOCTOR_TEST", b"_hang("):
        assert word not in WORKER_SOURCE, word
