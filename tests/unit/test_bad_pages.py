"""gpu-bad-pages: amd-smi bad-pages read in-band (reference §29, §30), on the JSON amdsmi_commands.py prints
(per kind "No bad pages found.", one page as an object, several as a list, "N/A" when unread) in both roots."""
import json

import pytest
from k3doctor.checks import bad_pages

from k3doctor import testing
from k3doctor.parsers import ParseError
from k3doctor.parsers.amdsmi import parse_bad_pages
from k3doctor.readings import CommandReading
from k3doctor.registry import REGISTRY
from k3doctor.results import Status

CHECK = REGISTRY.checks[bad_pages.CHECK]
NONE = "No bad pages found."
PAGE = {"page_address": 1056964608, "page_size": 4096, "status": "RESERVED"}


def output(entries, root="gpu_data"):
    return json.dumps({"gpu_data": entries} if root == "gpu_data" else entries)


def gpu(n, retired=NONE, pending=NONE, un_res=NONE):
    return {"gpu": n, "retired": retired, "pending": pending, "un_res": un_res}


def judge(text, rc=0):
    return testing.judge(CHECK, {"pages": CommandReading("amd-smi bad-pages --json", rc, text, "")})


@pytest.mark.parametrize("root", ["gpu_data", "list"])
def test_healthy_gpus_pass(root):
    [v] = judge(output([gpu(n) for n in range(4)], root))
    assert v.status == Status.PASS and "no bad pages on 4 GPU(s)" in v.message


def test_retired_and_pending_pages_warn_on_that_gpu_with_their_counts():
    verdicts = judge(output([gpu(0), gpu(1, retired=[PAGE, PAGE]), gpu(2, pending=PAGE), gpu(3)]))
    assert [(v.status, v.gpu, v.remediation) for v in verdicts] == [
        (Status.WARN, 1, "GPU-BAD-PAGES"), (Status.WARN, 2, "GPU-BAD-PAGES")]
    assert verdicts[0].message.startswith("2 retired HBM page(s)") and verdicts[1].message.startswith("1 pending")


def test_na_is_unknown_not_zero_and_unreadable_output_is_an_error():
    [v] = judge(output([gpu(0, "N/A", "N/A", "N/A"), gpu(1)]))
    assert v.status == Status.ERROR and "GPU 0" in v.message
    for text, rc in (("", 0), ("Traceback (most recent call last):\n", 0), (output([gpu(0)]), 1)):
        [v] = judge(text, rc)
        assert v.status == Status.ERROR and v.message.startswith("bad pages not read")


def test_parser_counts_and_rejects_other_output():
    assert parse_bad_pages(output([gpu(0, [PAGE] * 3, PAGE)])) == {0: {"retired": 3, "pending": 1, "un_res": 0}}
    human = "GPU: 0\n    RETIRED: No bad pages found.\n    PENDING: No bad pages found.\n    UN_RES: N/A\n"
    assert parse_bad_pages(human) == {0: {"retired": 0, "pending": 0, "un_res": None}}
    with pytest.raises(ParseError):
        parse_bad_pages(output([{"gpu": 0, "vram": {}}]))
    with pytest.raises(ParseError):
        parse_bad_pages(output([gpu(0, retired=7)]))
