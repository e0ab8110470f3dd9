"""Helpers shared by the parser modules (input validation, numbers, embedded JSON)."""
from __future__ import annotations

import json
import re
from typing import Any

from k3doctor.parsers import ParseError

UINT32_MAX = 4294967295  # amdgpu/amd-smi "not populated" sentinel (reference §6, §7)

_JSON_START = re.compile(r"^[\[{]", re.MULTILINE)


def require_text(text: Any, what: str) -> str:
    """Reject non-str and blank input up front: an empty capture is never a healthy reading."""
    if not isinstance(text, str):
        raise ParseError(f"{what}: expected text, got {type(text).__name__}")
    if not text.strip():
        raise ParseError(f"{what}: empty output")
    return text


def is_na(value: Any) -> bool:
    """True for the tools' "unknown" spellings (absent, ``N/A``, empty)."""
    return value is None or (isinstance(value, str) and value.strip().upper() in ("", "N/A"))


def to_int(value: Any, what: str) -> int | None:
    """Integer from an int or a decimal/hex string; ``N/A`` -> None; anything else -> ParseError."""
    if is_na(value):
        return None
    if isinstance(value, bool):
        raise ParseError(f"{what}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip(), 0)
    except ValueError:
        raise ParseError(f"{what}: expected an integer, got {value!r}") from None


def to_u32(value: Any, what: str) -> int | None:
    """Like :func:`to_int` but UINT32_MAX ("driver never set it", §6) also becomes None."""
    number = to_int(value, what)
    return None if number == UINT32_MAX else number


def ppod_or_none(raw: Any) -> str | None:
    """Lower-case PPOD UUID; None for N/A and the "not configured" sentinels (§6, §7): all-zero
    (driver default) and all-9s (amd-smi CLI), so sysfs and amd-smi readings compare alike."""
    if is_na(raw):
        return None
    text = str(raw).strip().lower()
    digits = set(text.replace("-", ""))
    return None if digits <= {"0"} or digits == {"9"} else text


def to_float(value: Any, what: str) -> float | None:
    if is_na(value):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ParseError(f"{what}: expected a number, got {value!r}") from None


def embedded_json(text: str, what: str) -> Any:
    """The first JSON document that starts at a line beginning with ``[`` or ``{``.

    Tools run with stderr merged print noise first (amd-smi ``WARNING: User is missing …
    groups``, Python ``SyntaxWarning`` lines — corpus INDEX "Parser lessons"); text after
    the document (more stderr) is ignored.  Truncated JSON raises ParseError.
    """
    decoder = json.JSONDecoder()
    first_error = None
    for match in _JSON_START.finditer(text):
        try:
            return decoder.raw_decode(text, match.start())[0]
        except json.JSONDecodeError as exc:
            first_error = first_error or exc
    if first_error is not None:
        raise ParseError(f"{what}: malformed or truncated JSON ({first_error})")
    raise ParseError(f"{what}: no JSON document in output")
