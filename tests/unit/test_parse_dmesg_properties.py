"""Property tests of the dmesg parser: any text parses or raises ParseError, in linear time."""
import re
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from k3doctor.parsers import ParseError, dmesg
from k3doctor.rules.kernel_log import SIGNATURES

PREFIXES = st.sampled_from(["", "[ 4778.915423] ", "[Sat Jan  7 14:25:56 2023] ",
                            "kern  :err   : 2026-01-07T10:02:00,123456-06:00 ", "Oct 09 10:00:01 ct13 kernel: ",
                            "-- Boot 0123456789abcdef0123456789abcdef --", "{1}[Hardware Error]: "])
FRAGMENTS = st.sampled_from(["amdgpu 0000:c6:00.0: amdgpu: ", "[gfxhub0] no-retry page fault", "MES", " remove ",
                             "queue", "ring gfx timeout", "AccId:", "[Hardware Error]: ", "event severity: fatal",
                             "ACA[01/01].STATUS=0x98000800003e0000", " Process information: process x pid 1",
                             "Accelerator Check Architecture events logged", "MSR Address: 0xc00023e1", "\t", " "])
LINES = st.lists(st.tuples(PREFIXES, st.lists(st.one_of(FRAGMENTS, st.text(max_size=12)), max_size=8)), max_size=30)


@settings(max_examples=150, deadline=None)
@given(LINES)
def test_any_log_like_text_parses_or_raises_parse_error(lines):
    text = "\n".join(prefix + "".join(parts) for prefix, parts in lines)
    try:
        findings = dmesg.find_signatures(text, SIGNATURES)
    except ParseError:
        return
    assert all(isinstance(f, dmesg.SignatureHit) and f.lines for f in findings)
    assert [f.index for f in findings] == sorted(f.index for f in findings)


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_any_text_at_all_parses_or_raises_parse_error(text):
    try:
        dmesg.find_signatures(text, SIGNATURES)
    except ParseError:
        pass


@given(st.one_of(st.none(), st.integers(), st.binary()))
def test_non_text_raises_parse_error(value):
    try:
        dmesg.find_signatures(value, SIGNATURES)
    except ParseError:
        return
    raise AssertionError("non-text input was accepted")


UNBOUNDED = re.compile(r"(?<!\\)[*+]|\{\d+,\}")


def test_every_signature_and_detail_pattern_is_bounded():
    """No `*`, `+` or `{n,}` in the patterns that search inside a line (anchored prefix ends excepted)."""
    searched = [s.pattern for s in SIGNATURES] + list(dmesg._DETAIL_LINES) + [
        dmesg._BDF, dmesg._ACA_REG, dmesg._HW_START, dmesg._HW_SEVERITY, dmesg._DUMP_LINE, *dmesg._HW_FIELDS]
    unbounded = [p.pattern for p in searched if UNBOUNDED.search(p.pattern)]
    assert unbounded == []


def test_a_40kb_adversarial_line_is_linear():
    """Lines built to make a backtracking pattern quadratic.  CPU time, not wall time (a loaded box): the
    bounded patterns take ~0.05 s per line here, the earlier unbounded `MES.*remove` took 4 s."""
    for unit in ("MES", "ring ", "[Hardware Error]: ", "AccId:9", "amdgpu 0000:c6:00.0: ", "Process x ", "1 "):
        line = "[ 1.000000] " + unit * (40_000 // len(unit))
        started = time.process_time()
        dmesg.find_signatures(line + "\n", SIGNATURES)
        assert time.process_time() - started < 1.0, unit
