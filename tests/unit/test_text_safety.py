"""One place makes node text safe for each consumer: a terminal, XML 1.0, a one-line monitor."""
import xml.etree.ElementTree as ET

from k3doctor.outputs.text import one_line, terminal_safe, xml_safe

HOSTILE = "ok\tcol\nnext \x1b[2J\x9b31m\x00\x7f\udce9\ufffe caf\u00e9 \u2028end"


def test_terminal_keeps_layout_and_escapes_what_drives_a_terminal():
    assert terminal_safe(HOSTILE) == "ok\tcol\nnext \\x1b[2J\\x9b31m\\x00\\x7f\\xe9\\ufffe caf\u00e9 \u2028end"


def test_xml_text_parses_and_shows_what_was_there():
    doc = ET.fromstring(f"<a>{xml_safe(HOSTILE).replace('&', '&amp;').replace('<', '&lt;')}</a>")
    assert "\\x1b[2J" in doc.text and "\\x00" in doc.text and "caf\u00e9" in doc.text


def test_one_line_has_no_break_of_any_kind():
    line = one_line(HOSTILE)
    assert line.isprintable() and "\n" not in line and "\u2028" not in line and line.startswith("ok col next")
