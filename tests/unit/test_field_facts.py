"""§31.3's sysfs/procfs field facts judged on plain readings: the parsers give a value or raise ParseError, and a
value that was not read is an ERROR, never a PASS."""
import pytest

from k3doctor.parsers import ParseError
from k3doctor.parsers.gpu_sysfs import parse_err_count, parse_link_speed, parse_link_width, parse_vram_bad_pages
from k3doctor.registry import load_checks
from k3doctor.results import Status
from k3doctor.testing import judge

load_checks()
DEV = "/sys/class/drm/card{}/device"


def link(current=("32.0 GT/s PCIe", "16"), cards=2, **cut):
    readings = {"vendors": {f"{DEV.format(c)}/vendor": "0x1002" for c in range(cards)}}
    for name in ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width"):
        value = {"current_link_speed": current[0], "current_link_width": current[1]}.get(name)
        readings[name] = {f"{DEV.format(c)}/{name}": (value if c == 1 and value else
                                                       "32.0 GT/s PCIe" if "speed" in name else "16")
                          for c in range(cards)}
    for name, value in cut.items():
        readings[name][f"{DEV.format(1)}/{name}"] = value
    return readings


@pytest.mark.parametrize("text, value", [("32.0 GT/s PCIe", 32.0), ("8 GT/s", 8.0), ("2.5 GT/s PCIe", 2.5)])
def test_link_speed_values(text, value):
    assert parse_link_speed(text) == value


@pytest.mark.parametrize("text", ["Unknown", "", "0 GT/s", "32.0 Gb/s", "1e9 GT/s", "32.0 GT/s PCIe\x00"])
def test_a_link_speed_that_is_no_speed_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_link_speed(text)


@pytest.mark.parametrize("text", ["0", "33", "x16", "", "١٦"])
def test_a_link_width_out_of_range_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_link_width(text)


def test_err_count_and_bad_pages_shapes():
    assert parse_err_count("ue: 2\nce: 5\n") == {"ue": 2, "ce": 5}
    assert parse_err_count("ue: 0\nce: 0\nde: 1\n") == {"ue": 0, "ce": 0, "de": 1}
    for bad in ("Query currently inaccessible", "ue: 1", "ue: 1\nue: 2\nce: 0", "ue: -1\nce: 0", "ue: " + "9" * 30):
        with pytest.raises(ParseError):
            parse_err_count(bad + "\n")
    assert parse_vram_bad_pages("") == {"reserved": 0, "pending": 0, "unreservable": 0}
    assert parse_vram_bad_pages("0x00001234 : 0x00001000 : R\n0x00001235 : 0x00001000 : P\n")["pending"] == 1
    with pytest.raises(ParseError):
        parse_vram_bad_pages("0x00001234 : 0x00001000 : X\n")


@pytest.mark.parametrize("value, status", [("0", Status.PASS), ("1", Status.WARN), ("2", Status.WARN),
                                           (None, Status.PASS), ("on", Status.ERROR)])
def test_numa_balancing(value, status):
    assert [v.status for v in judge("numa-balancing", {"numa": value})] == [status]


def test_pcie_link_down_trained_card_is_named_and_unread_is_an_error():
    assert [v.status for v in judge("gpu-pcie-link", link())] == [Status.PASS]
    [v] = judge("gpu-pcie-link", link(current=("16.0 GT/s PCIe", "8")))
    assert (v.status, v.gpu) == (Status.WARN, 1) and "16 GT/s of 32 GT/s" in v.message and "8 lanes of 16" in v.message
    [v] = judge("gpu-pcie-link", link(current_link_speed="Unknown"))
    assert (v.status, v.gpu) == (Status.ERROR, 1)
    readings = link()
    del readings["max_link_width"][f"{DEV.format(1)}/max_link_width"]
    assert [(v.status, v.gpu) for v in judge("gpu-pcie-link", readings)] == [(Status.ERROR, 1)]


def counts(**by_key):
    return {"counts": {f"{DEV.format(key[4])}/ras/{key[6:]}_err_count": text for key, text in by_key.items()}}


def test_ras_counts_ue_fails_ce_rising_warns_only_against_a_baseline():
    healthy = counts(card0_umc="ue: 0\nce: 3\n", card1_umc="ue: 0\nce: 0\n")
    assert [v.status for v in judge("gpu-ras-counts", healthy)] == [Status.PASS]
    [v] = judge("gpu-ras-counts", counts(card0_umc="ue: 0\nce: 3\n", card1_umc="ue: 4\nce: 0\n"))
    assert (v.status, v.gpu, v.remediation) == (Status.FAIL, 1, "GPU-RAS-UE-COUNT")
    [v] = judge("gpu-ras-counts", healthy, baseline={"ce": {"card0/umc": 1, "card1/umc": 0}})
    assert (v.status, v.gpu, v.remediation) == (Status.WARN, 0, "GPU-RAS-CE-RISING")
    [v] = judge("gpu-ras-counts", counts(card0_umc="Query currently inaccessible\n"))
    assert (v.status, v.gpu) == (Status.ERROR, 0)
    assert [v.status for v in judge("gpu-ras-counts", {"counts": {}})] == [Status.SKIP]
