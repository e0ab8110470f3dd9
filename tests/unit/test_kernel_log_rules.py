"""Every kernel-log rule row fires from its own sample, through the scanner every reader uses; the table is the
only place a signature is spelled (the scanner, layer 1, is handed it); `explain` and `list -v` list the rows."""
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from k3doctor.checks.kernel import unknown_error_lines
from k3doctor.views.kernel_log import KernelLog
from k3doctor.parsers.dmesg import RECORD_KINDS, find_signatures
from k3doctor.readings import CommandReading
from k3doctor.rules.kernel_log import RULES, SIGNATURES, UNKNOWN_SIGNATURE, Rule, with_site_rules

ROOT = Path(__file__).resolve().parents[2]


def stamped(sample: str, level: str = "") -> str:
    return "".join(f"{level}[{n + 1:5d}.000000] {line}\n" for n, line in enumerate(sample.splitlines()))


@pytest.mark.parametrize("rule", RULES, ids=[rule.id for rule in RULES])
def test_every_row_fires_from_its_own_sample(rule: Rule):
    assert rule.sample, f"{rule.id}: a row needs the sample line that proves it"
    text = stamped(rule.sample, "kern  :err   : " if rule.signature == UNKNOWN_SIGNATURE else "")
    hits = find_signatures(text, SIGNATURES)
    if rule.signature == UNKNOWN_SIGNATURE:  # no shape of its own: an err+ GPU line that no row knows
        assert hits == []
        log = KernelLog.read(CommandReading("dmesg", 0, text, ""))
        hits = unknown_error_lines(log, None, hits, ())
    assert [hit.signature for hit in hits] == [rule.signature], rule.sample
    assert hits[0].lines == [line for line in text.splitlines()], "the whole sample is the one hit"


def test_a_row_has_a_pattern_or_names_a_record_the_scanner_groups():
    shapes = {rule.signature for rule in RULES if rule.pattern is None} - {UNKNOWN_SIGNATURE}
    assert shapes == set(RECORD_KINDS), "every [Hardware Error] record kind has its row, and only those lack a pattern"
    assert len({rule.id for rule in RULES}) == len(RULES) and len({r.signature for r in RULES}) == len(RULES)
    for rule in RULES:
        assert (rule.remediation is None) == (rule.severity == "info"), rule.id
    assert with_site_rules({}) == {rule.id: rule for rule in RULES}  # every built-in row passes the site checks


def test_the_scanner_spells_no_signature():
    """Layer 1 takes the signatures from its caller: no row's name in the scanner, no import of the table."""
    source = (ROOT / "k3doctor" / "parsers" / "dmesg.py").read_text(encoding="utf-8")
    assert "from k3doctor.rules" not in source and "import k3doctor.rules" not in source
    spelled = [rule.signature for rule in RULES
               if rule.pattern is not None and re.search(rf"[\"']{rule.signature}[\"']", source)]
    assert spelled == []


def test_explain_and_list_show_the_rows():
    from k3doctor.cli.info import explain_cmd, list_cmd
    listed = CliRunner().invoke(list_cmd, ["-v"]).output
    for rule in RULES:
        assert f"kernel-health rule {rule.id}: {rule.remediation or '-'}\n" in listed
    shown = CliRunner().invoke(explain_cmd, ["KERNEL-RING-TIMEOUT-SOFT"])
    assert shown.exit_code == 0 and "ring gfx_0.0.0 timeout, but soft recovered" in shown.output
    assert "What to do (GPU-HUNG-RESET)" in shown.output
    known = CliRunner().invoke(explain_cmd, ["KERNEL-RETRY-PAGE-FAULT"]).output
    assert "known line that is no fault" in known


def test_a_site_judges_a_known_line_by_giving_it_a_severity_and_a_remediation():
    from k3doctor.rules.kernel_log import RuleError

    with pytest.raises(RuleError, match="a warn rule needs a remediation code"):
        with_site_rules({"KERNEL-HW-ERROR-RECORD": {"severity": "warn"}})
    table = with_site_rules({"KERNEL-HW-ERROR-RECORD": {"severity": "warn", "remediation": "GPU-RAS-ERROR"}})
    assert (table["KERNEL-HW-ERROR-RECORD"].severity, table["KERNEL-HW-ERROR-RECORD"].remediation) == (
        "warn", "GPU-RAS-ERROR")
