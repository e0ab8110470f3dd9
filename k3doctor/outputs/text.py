"""Node text made safe for consumers that reject some characters (XML 1.0, one-line monitors).

Node output is arbitrary: NUL, terminal escapes, invalid UTF-8 (decoded to U+FFFD, or lone
surrogates when a saved file carried them). Unsafe characters are written as visible escapes
(``\\x00``) instead of being dropped, so a reader still sees that something odd was there.
"""
from __future__ import annotations

import json
import math
import re

# XML 1.0 Char production (tab, LF, CR, U+0020-U+D7FF, U+E000-U+FFFD, U+10000-U+10FFFF) less the
# DEL and C1 controls the spec asks documents to avoid (a terminal reads U+009B as an escape).
_NOT_XML = re.compile("[^\t\n\r\u0020-\u007e\u0085\u00a0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# A terminal: tab and line breaks stay; C0 and C1 controls, DEL, non-characters and the bytes a saved
# file kept as lone surrogates are escaped (an ESC or U+009B would drive the terminal).
_NOT_TERMINAL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
# One line: also no line breaks, C1 controls or the Unicode line/paragraph separators.
_NOT_LINE = re.compile("[^\u0020-\u007e\u00a0-\u2027\u202a-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte kept by surrogateescape
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """``text`` with every character that could drive a terminal written as an escape (the table)."""
    return _NOT_TERMINAL.sub(_escape, str(text))


def xml_safe(text: str) -> str:
    """``text`` with every character XML 1.0 forbids written as an escape."""
    return _NOT_XML.sub(_escape, str(text))


def one_line(text: str, limit: int | None = None) -> str:
    """``text`` as one printable line (breaks become spaces), cut to ``limit`` characters."""
    line = _NOT_LINE.sub(lambda m: " " if m.group() in "\t\n\r" else _escape(m), str(text)).strip()
    if limit is not None and len(line) > limit:
        line = line[:limit - 3].rstrip() + "..."
    return line


def finite_json(value):
    """``value`` with every non-finite float written as its name (``"NaN"``, ``"Infinity"``): ``json.dumps``
    would print a bare ``NaN``, which JSON (RFC 8259) has not and strict parsers (jq, Go, JavaScript) refuse.
    Evidence can carry one from a node document or a tool's output."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {finite_json(k): finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def json_text(doc, **kwargs) -> str:
    """``json.dumps`` that only ever writes valid JSON (see :func:`finite_json`). A document without a non-finite
    float (nearly every one) is written as it is; walking it first cost a 256-node report ~0.2 s."""
    try:
        return json.dumps(doc, allow_nan=False, **kwargs)
    except ValueError:  # a NaN or an infinity somewhere: written as its name
        return json.dumps(finite_json(doc), allow_nan=False, **kwargs)
