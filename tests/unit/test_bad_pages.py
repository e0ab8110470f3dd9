"""gpu-bad-pages: amd-smi bad-pages read in-band (reference §29, §30), on the JSON amdsmi_commands.py prints
(per kind "No bad pages found.", one page as an object, several as a list, "N/A" when unread) in both roots."""
import json

import pytest
from k3doctor.checks import bad_pages

from k3doctor import testing
from k3doctor.parsers import ParseError
from k3doctor.parsers.amdsmi import parse_bad_pages
from k3doctor.parsers.gpu_sysfs import parse_bad_page_threshold
from k3doctor.readings import CommandReading
from k3doctor.registry import REGISTRY
from k3doctor.results import Status

CHECK = REGISTRY.checks[bad_pages.CHECK]
NONE = "No bad pages found."
NO_SYSFS = {"vendors": {}, "sysfs": {}, "threshold": None}  # a driver without ras/gpu_vram_bad_pages: amd-smi judged
PAGE = {"page_address": 1056964608, "page_size": 4096, "status": "RESERVED"}


def output(entries, root="gpu_data"):
    return json.dumps({"gpu_data": entries} if root == "gpu_data" else entries)


def gpu(n, retired=NONE, pending=NONE, un_res=NONE):
    return {"gpu": n, "retired": retired, "pending": pending, "un_res": un_res}


def judge(text, rc=0):
    return testing.judge(CHECK, {"pages": CommandReading("amd-smi bad-pages --json", rc, text, ""), **NO_SYSFS})


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


DEV = "/sys/class/drm/card{}/device"
R, P, F = ("0x027f5d43 : 0x00001000 : R", "0x027f5d4b : 0x00001000 : P", "0x027f5d53 : 0x00001000 : F")


def sysfs(lists, threshold="-1", amd_smi=None, vendors=None):
    """Readings of AMD cards 0.. with the given gpu_vram_bad_pages texts (None: no file); amd-smi output as given."""
    vendors = vendors or {f"{DEV.format(c)}/vendor": "0x1002" for c in range(len(lists))}
    return testing.judge(CHECK, {"pages": amd_smi if amd_smi is not None else output([gpu(0, "N/A", "N/A", "N/A")]),
                                 "vendors": vendors, "threshold": threshold,
                                 "sysfs": {f"{DEV.format(c)}/ras/gpu_vram_bad_pages": text
                                           for c, text in enumerate(lists)}})


def test_the_drivers_own_list_is_judged_by_card_and_amd_smi_is_not_said_again():
    """§31.3: P and F lines in ras/gpu_vram_bad_pages (the lines of the kernel's RAS patch thread) are named once,
    on their card; amd-smi's reading of the same file (here N/A) is not a second verdict."""
    verdicts = sysfs(["", f"{R}\n{R}\n{P}\n{F}\n", "", f"{P}\n"])
    assert [(v.status, v.gpu, v.remediation) for v in verdicts] == [
        (Status.WARN, 1, "GPU-BAD-PAGES"), (Status.WARN, 3, "GPU-BAD-PAGES")]
    assert verdicts[0].message.startswith("2 retired, 1 pending, 1 un-res HBM page(s) listed by ras/gpu_vram_bad_pages")
    [v] = sysfs(["", "", "", ""])
    assert v.status == Status.PASS and "no bad pages on 4 GPU(s)" in v.message and "INFO" not in v.message


def test_a_card_whose_list_is_unread_is_an_error_and_no_list_anywhere_falls_back_to_amd_smi():
    verdicts = sysfs(["", "0x1 : 0x1000 : X\n", None, ""])
    assert [(v.status, v.gpu) for v in verdicts] == [(Status.ERROR, None)]
    assert "card1" in verdicts[0].message and "card2" in verdicts[0].message
    [v] = sysfs([None, None], amd_smi=output([gpu(0), gpu(1, retired=PAGE)]))
    assert (v.status, v.gpu) == (Status.WARN, 1) and "amd-smi bad-pages" in v.message
    not_amd = {f"{DEV.format(0)}/vendor": "0x1a03", f"{DEV.format(1)}/vendor": "0x1002"}  # a BMC's VGA card0
    [v] = sysfs([f"{F}\n", ""], vendors=not_amd)
    assert v.status == Status.PASS and "1 GPU(s)" in v.message


@pytest.mark.parametrize("value, said", [("-1", None), (None, None), ("-2", "bad_page_threshold=-2 (the threshold "
                                                                              "ignored"),
                                         ("0", "=0 (bad page retirement disabled"), ("128", "=128 (a user-set")])
def test_bad_page_threshold_other_than_the_default_is_said(value, said):
    """amdgpu_drv.c (mainline): -1 = auto (default), 0 = retirement disabled, -2 = threshold ignored, N = user's."""
    [v] = sysfs([""], threshold=value)
    assert v.status == Status.PASS
    assert ("INFO" in v.message) == bool(said) and (said or "") in v.message


@pytest.mark.parametrize("text", ["", "-3", "auto", "1" * 11, "١٢٨"])
def test_a_threshold_that_is_no_number_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_bad_page_threshold(text)
