"""The number and JSON helpers every parser uses: only what a tool prints, else ParseError."""
import pytest

from k3doctor.parsers import ParseError
from k3doctor.parsers.common import embedded_json, require_lines, shown, to_float, to_int, to_percent, to_u32

ABSURD = ["nan", "NaN", "inf", "-inf", "1e999", "0x1f", "0o7", "0b1", "1_000", "1,000", "9" * 21, "9" * 5000,
          "١٢", "+5", "", "5 5", True, [1], {"a": 1}, 1.5]


def repr_id(value):
    return shown(value, 24)


@pytest.mark.parametrize("value", ABSURD + ["-1", -1, 10 ** 20, 10 ** 5000, "1.0", "1e3"], ids=repr_id)
def test_to_int_rejects(value):
    if value == "":
        assert to_int(value, "x") is None  # empty is the tools' "unknown", like N/A
        return
    with pytest.raises(ParseError):
        to_int(value, "x")


def test_to_int_accepts_decimal_and_a_signed_minimum():
    assert [to_int(v, "x") for v in ("0", " 42 ", "0042", 7, "N/A", None)] == [0, 42, 42, 7, None, None]
    assert to_int(str(10 ** 20 - 1), "x") == 10 ** 20 - 1
    assert to_int("-1", "root", minimum=-1) == -1
    with pytest.raises(ParseError, match="below -1"):
        to_int("-2", "root", minimum=-1)


def test_to_u32_sentinel_and_range():
    assert (to_u32("4294967295", "x"), to_u32("7", "x")) == (None, 7)
    with pytest.raises(ParseError, match="32-bit"):
        to_u32("4294967296", "x")


@pytest.mark.parametrize("value", [v for v in ABSURD if v not in ("", 1.5)] + [
    "-95", -0.5, float("nan"), float("inf"), 10 ** 400, 10 ** 5000, "1e400", "." + "9" * 30], ids=repr_id)
def test_to_float_rejects(value):
    with pytest.raises(ParseError):
        to_float(value, "x")


def test_to_float_accepts_what_tools_print():
    assert [to_float(v, "x") for v in ("315.69", "11940", "0.07", "1e3", ".5", 3, 2.5, "N/A")] == \
        [315.69, 11940.0, 0.07, 1000.0, 0.5, 3.0, 2.5, None]


def test_to_percent_keeps_ints_and_rejects_out_of_range():
    assert [to_percent(v, "x") for v in ("31", "0", "100", "12.5", 7, "N/A")] == [31, 0, 100, 12.5, 7, None]
    assert isinstance(to_percent("31", "x"), int)
    for bad in ("-95", "101", "250", "nan", "inf"):
        with pytest.raises(ParseError):
            to_percent(bad, "x")


@pytest.mark.parametrize("text", [
    "[1e999]", "[NaN]", '{"a": Infinity}', "[" + "9" * 5000 + "]", "[" * 100000, '{"a": 1', "no json\n",
], ids=repr_id)
def test_embedded_json_garbage_is_a_parse_error(text):
    with pytest.raises(ParseError):
        embedded_json(text, "x")


def test_embedded_json_skips_noise_lines_but_gives_up_after_a_few():
    assert embedded_json("WARNING: groups\n[output truncated]\n[1, 2]\n", "x") == [1, 2]
    noise = "[x\n" * 100 + "[1]\n"
    with pytest.raises(ParseError):
        embedded_json(noise, "x")  # each attempt may read to the end: bounded, not quadratic


def test_require_lines_rejects_a_capture_cut_mid_line():
    assert require_lines("a\nb\n", "x") == ["a", "b"]
    with pytest.raises(ParseError, match="mid-line"):
        require_lines("a\nSIZE: 4423", "x")


def test_shown_never_raises_on_values_whose_repr_would():
    nested = []
    for _ in range(100000):
        nested = [nested]
    assert shown(10 ** 5000) == "<16610-bit integer>"
    assert shown({"timeNano": 10 ** 5000}) == "<unprintable dict>"
    assert shown(nested) == "<unprintable list>"
    assert shown("x" * 1000, 10) == "'xxxxxxxxx"
