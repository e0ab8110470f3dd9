"""Redaction runs on whatever a container printed: every pattern of the shared secret table costs linear
time on hostile lines (a 32 kB line of `-` took 141 s, `a.` repeated 83 s), lines are capped before any
pattern sees them, and local work stops at a deadline.

64 kB lines: quadratic patterns need minutes, linear ones milliseconds, so the generous bound below only
trips on a quadratic regression, never on a slow box (bench/redaction.py measures the real numbers)."""
import itertools
import time

import pytest

from k3doctor.deadline import Deadline
from k3doctor.redaction import MAX_LINE_CHARS, REDACTED, SECRET_SHAPES, RedactionTimeout, redact_text

LINE = 64 << 10
PATTERN_LINE = 16 << 10  # per pattern: a quadratic one takes ~40 s here (8 kB of `-` took 10.7 s)
BOUND_S = 5.0
WORDS = ("token", "secret", "password", "api_key", "access-key", "credential", "hf_", "sk-", "Bearer")
# Pieces hostile patterns backtrack on: separators, word boundaries, flag dashes, names without values.
PIECES = ("-", "a.", "a-", " ", "=", ":", "'", '"', "--", "-x", "_", "\t")


def hostile_lines(size=PATTERN_LINE):
    yield from ((p * (size // len(p))) for p in PIECES)
    for word, piece in itertools.product(WORDS, PIECES + ("",)):
        for unit in ("-" + word + piece, piece + word + " -"):
            yield unit * (size // len(unit))


def test_every_secret_pattern_costs_linear_time_on_hostile_lines():
    slowest = (0.0, None, None)
    for line in hostile_lines():
        for _what, pattern, replacement in SECRET_SHAPES:  # each pattern alone: no earlier one hides a slow one
            started = time.monotonic()
            pattern.sub(replacement, line)
            slowest = max(slowest, (time.monotonic() - started, pattern.pattern, line[:24]))
    assert slowest[0] < 1.0, slowest


def test_a_64k_hostile_line_is_capped_and_redacted_in_well_under_a_second_each():
    for line in ("-" * LINE, "a." * (LINE // 2), "--token" * (LINE // 7), "HF_TOKEN=" * (LINE // 9)):
        started = time.monotonic()
        out = redact_text(line + "\nHF_TOKEN=hf_abcdefghijklmnopqrstuvw\n")
        assert time.monotonic() - started < BOUND_S
        assert "hf_abcdefghijklmnopqrstuvw" not in out and REDACTED in out
        assert max(len(x) for x in out.split("\n")) <= MAX_LINE_CHARS + len(REDACTED) * MAX_LINE_CHARS


def test_lines_are_cut_to_the_cap_before_redaction_and_short_lines_stay_whole():
    text = "x" * (MAX_LINE_CHARS + 100) + "\rshort\n" + "y" * 10
    assert redact_text(text) == "x" * MAX_LINE_CHARS + "\rshort\n" + "y" * 10


def test_redaction_stops_at_its_deadline():
    deadline = Deadline(0.1)
    time.sleep(0.2)
    with pytest.raises(RedactionTimeout):
        redact_text("some log\n" * 10, deadline)
