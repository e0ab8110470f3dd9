r"""Helpers shared by the parser modules (input validation, numbers, embedded JSON).

The number helpers accept only what the tools print: plain ASCII decimal digits (a float may have a
fraction and an exponent), of a length a real counter can have.  ``nan``, ``inf``, ``1e999``,
hex, ``1_000``, a negative percentage or a 5000-digit string is garbled output: ParseError,
never a number a judge could compare, and never another exception (``int()`` refuses more
than 4300 digits with ValueError; a float that big overflows).  Python's ``int()``, ``\d`` and
``str.isdigit`` also take other scripts' digits (``int("١٢٣")`` is 123): no tool here prints
those, so a parser turns a number's text into a value through these helpers, never ``int()``
on what a ``\d`` matched.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

from k3doctor.parsers import ParseError

UINT32_MAX = 4294967295  # amdgpu/amd-smi "not populated" sentinel (reference §6, §7)
MAX_DIGITS = 20  # 2**64 has 20 decimal digits: no counter a tool prints is longer

_JSON_START = re.compile(r"^[\[{]", re.MULTILINE)
_JSON_ATTEMPTS = 16  # lines starting with [ or { tried before giving up (each try may read to the end)
_INT = re.compile(rf"-?[0-9]{{1,{MAX_DIGITS}}}")
_FLOAT = re.compile(rf"-?(?:[0-9]{{1,{MAX_DIGITS}}}(?:\.[0-9]{{0,{MAX_DIGITS}}})?|\.[0-9]{{1,{MAX_DIGITS}}})"
                    r"(?:[eE][+-]?[0-9]{1,3})?")


def shown(value: Any, limit: int = 60) -> str:
    """repr of a value for a message, at most ``limit`` characters; never raises (the repr of a
    5000-digit int raises ValueError, of a 100000-deep list RecursionError)."""
    if isinstance(value, str):
        return repr(value[:limit])[:limit]
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"<{value.bit_length()}-bit integer>"
    try:
        return repr(value)[:limit]
    except (ValueError, RecursionError):
        return f"<unprintable {type(value).__name__}>"


def require_text(text: Any, what: str) -> str:
    """Reject non-str and blank input up front: an empty capture is never a healthy reading."""
    if not isinstance(text, str):
        raise ParseError(f"{what}: expected text, got {type(text).__name__}")
    if not text.strip():
        raise ParseError(f"{what}: empty output")
    return text


def require_lines(text: Any, what: str) -> list:
    """The lines of a line-oriented capture whose last line is complete.

    A tool's stdout ends with a newline; a capture cut at a byte offset (size cap, kill) does
    not, and its last line may hold a shortened number (``4423`` of ``442368``) that would read
    as plausible.
    """
    require_text(text, what)
    if not text.endswith(("\n", "\r")):
        raise ParseError(f"{what}: output ends mid-line (cut off?): {text.splitlines()[-1][-60:]!r}")
    return text.splitlines()


def is_na(value: Any) -> bool:
    """True for the tools' "unknown" spellings (absent, ``N/A``, empty)."""
    return value is None or (isinstance(value, str) and value.strip().upper() in ("", "N/A"))


def to_int(value: Any, what: str, minimum: int = 0, maximum: int | None = None) -> int | None:
    """Integer from an int or a decimal string, at least ``minimum`` (counters, sizes, indices
    are never negative; nccl-tests' ``root`` -1 is the one signed value) and at most ``maximum``
    where the caller knows no real value can be larger (an absurd value is garbled output, not a
    figure to judge); ``N/A`` -> None."""
    if is_na(value):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ParseError(f"{what}: expected an integer, got {shown(value)}")
    if isinstance(value, str):
        if not _INT.fullmatch(value.strip()):
            raise ParseError(f"{what}: expected a decimal integer, got {shown(value)}")
        value = int(value.strip())
    if value < minimum:
        raise ParseError(f"{what}: {value} is below {minimum}: no tool prints that here")
    if value >= 10 ** MAX_DIGITS:
        raise ParseError(f"{what}: {shown(value)} has more than {MAX_DIGITS} digits")
    if maximum is not None and value > maximum:
        raise ParseError(f"{what}: {value} is above {maximum}: no real reading is that large")
    return value


def to_u32(value: Any, what: str) -> int | None:
    """Like :func:`to_int` but UINT32_MAX ("driver never set it", §6) also becomes None; more is garbled."""
    number = to_int(value, what)
    if number is not None and number > UINT32_MAX:
        raise ParseError(f"{what}: {number} does not fit the 32-bit field")
    return None if number == UINT32_MAX else number


def to_float(value: Any, what: str) -> float | None:
    """A finite, non-negative number (times, bandwidths, latencies, epoch seconds); ``N/A`` -> None."""
    if is_na(value):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ParseError(f"{what}: expected a number, got {shown(value)}")
    if isinstance(value, str) and not _FLOAT.fullmatch(value.strip()):
        raise ParseError(f"{what}: expected a decimal number, got {shown(value)}")
    if isinstance(value, int) and abs(value) >= 10 ** MAX_DIGITS:
        raise ParseError(f"{what}: {shown(value)} has more than {MAX_DIGITS} digits")
    number = float(value)
    if not math.isfinite(number):
        raise ParseError(f"{what}: {shown(value)} is not a finite number")
    if number < 0:
        raise ParseError(f"{what}: {shown(value)} is negative: no tool prints that here")
    return number


def to_percent(value: Any, what: str) -> int | float | None:
    """A percentage 0..100 as printed (``31`` stays an int); ``N/A`` -> None; -95 or 250 is garbled."""
    number = to_float(value, what)
    if number is not None and number > 100:
        raise ParseError(f"{what}: {shown(value)} is not a percentage")
    integral = isinstance(value, int) or (isinstance(value, str) and _INT.fullmatch(value.strip()))
    return int(number) if number is not None and integral else number


def ppod_or_none(raw: Any) -> str | None:
    """Lower-case PPOD UUID; None for N/A and the "not configured" sentinels (§6, §7): all-zero
    (driver default) and all-9s (amd-smi CLI), so sysfs and amd-smi readings compare alike."""
    if is_na(raw):
        return None
    text = str(raw).strip().lower()
    digits = set(text.replace("-", ""))
    return None if digits <= {"0"} or digits == {"9"} else text


def _reject_constant(name: str):
    raise ParseError(f"JSON holds {name}, which no tool prints as a value")


def _finite_float(literal: str) -> float:
    number = float(literal)
    if not math.isfinite(number):
        raise ParseError(f"JSON number {literal[:40]!r} overflows a float")
    return number


def embedded_json(text: str, what: str) -> Any:
    """The first JSON document that starts at a line beginning with ``[`` or ``{``.

    Tools run with stderr merged print noise first (amd-smi ``WARNING: User is missing …
    groups``, Python ``SyntaxWarning`` lines — corpus INDEX "Parser lessons"); text after
    the document (more stderr) is ignored.  Truncated JSON, ``NaN``/``Infinity``, numbers past
    the interpreter's digit limit and nesting past its recursion limit raise ParseError; only
    the first few candidate lines are tried, so a garbled capture costs linear time.
    """
    decoder = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)
    first_error = None
    for attempt, match in enumerate(_JSON_START.finditer(text)):
        if attempt == _JSON_ATTEMPTS:
            break
        try:
            return decoder.raw_decode(text, match.start())[0]
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, ParseError, int digit limit
            first_error = first_error or exc
    if first_error is not None:
        raise ParseError(f"{what}: malformed or truncated JSON ({first_error})")
    raise ParseError(f"{what}: no JSON document in output")
