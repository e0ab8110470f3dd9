"""One severity vocabulary (issue 34): a recipe rule's BLOCK/WARN/INFO and a rule row's fail/warn/error/info are
mapped to a result status in one table (k3doctor.results.SEVERITY_STATUS); no other module converts."""
import re
from pathlib import Path

import pytest

from k3doctor.recipes import rules as recipe_rules
from k3doctor.results import SEVERITY_STATUS, Status, counts, status_of, verdict
from k3doctor.views import env_rules
from k3doctor.rules import kernel_log, triage

ROOT = Path(__file__).resolve().parents[2]


def test_the_one_table():
    assert [status_of(w) for w in ("BLOCK", "WARN", "INFO", "PASS")] == [Status.FAIL, Status.WARN, None, Status.PASS]
    assert [status_of(w) for w in ("fail", "warn", "error", "info")] == [Status.FAIL, Status.WARN, Status.ERROR, None]
    assert [counts(w) for w in ("BLOCK", "WARN", "INFO", "PASS", "fail")] == [True, True, False, False, True]
    assert verdict("BLOCK", "m", node="n").status == Status.FAIL
    with pytest.raises(ValueError):
        verdict("INFO", "worth knowing")
    with pytest.raises(KeyError):
        status_of("CRITICAL")


def test_every_rule_table_speaks_it():
    """The words the rule tables use, each known to the one table (a new word is a KeyError at once, here)."""
    words = {recipe_rules.BLOCK, recipe_rules.WARN, recipe_rules.INFO, recipe_rules.PASS}
    words |= {rule.severity for rule in kernel_log.RULES} | {rule.severity for rule in triage.RULES}
    words |= {rule.status for rule in env_rules.RULES}
    assert {w.upper() for w in words} <= set(SEVERITY_STATUS)


# a mapping from a severity word to a status or a verdict maker, written anywhere but results.py
CONVERSIONS = (re.compile(r"""[{,]\s*["'](?:fail|warn|error|BLOCK|WARN|INFO)["']\s*:\s*(?:fail|warn|error|Status\.)"""),
               re.compile(r"Status\.\w+ if .{0,80}(?:BLOCK|==\s*[\"']fail[\"']|==\s*\w+\.FAIL\b)"),
               re.compile(r"\bFAIL if .{0,60}\bBLOCK\b"))


def test_no_other_module_converts():
    sources = [*(ROOT / "k3doctor").rglob("*.py"), *(ROOT / "checks").glob("*.py")]
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for path in sources if path.name != "results.py"
             or path.parent.name != "k3doctor"
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if any(p.search(line) for p in CONVERSIONS)]
    assert found == [], "convert through k3doctor.results.status_of / verdict"
