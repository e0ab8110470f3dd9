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


def test_first_screen_fields_are_one_safe_line_each():
    """Triage's "Most likely cause" quotes log text; a bundle's manifest names the nodes of the table."""
    from k3doctor.judging.runner import RunReport
    from k3doctor.outputs.report import render_table
    from k3doctor.results import Result, Status
    from k3doctor.triage import first_screen

    class Check:
        name = "triage-kv"

    cause = Result("triage-kv", "ct13\nFAIL  forged ct14", Status.FAIL, "KV \x1b]0;owned\x07 budget\x1b[2J\nPASS x",
                   gpu=1, remediation="TRIAGE-KV\x1b[2J", evidence={"rank": "1\x1b[2J"})
    screen = first_screen([cause])
    assert "\x1b" not in screen and "\x07" not in screen and screen.count("\n") == 4
    assert screen.startswith("Most likely cause: KV \\x1b]0;owned\\x07 budget\\x1b[2J PASS x\n")
    table = render_table(RunReport(results=[cause], nodes=["ct13\nFAIL  forged ct14"], duration_s=1.0), [Check()],
                         verbose=True)
    assert "\x1b" not in table and not any(line.startswith(("FAIL  forged", "PASS x")) for line in table.splitlines())
