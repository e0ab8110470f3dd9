"""Triage's log rules are rows (``k3doctor.rules.triage.RULES``): every row carries a sample line, and its sample
fires that row - alone, a row that is one line shape fires exactly itself; a row that is a predicate fires after the
context the predicate needs (the lines before, the layout, the clock), which is all this test adds. Every input
shape of the compound rules (``rules.triage_signals.SIGNALS``) is carried by its own sample (issue 20 §6, issue 34).
"""
from datetime import timedelta

import pytest
from k3rig import server_log as L

from k3doctor.parsers.atom_log import parse_log
from k3doctor.registry import REGISTRY
from k3doctor.results import Status
from k3doctor.rules.triage import RULES, SHAPES
from k3doctor.rules.triage_signals import SIGNALS
from k3doctor.triage.rank_logs import Layout, judge_rank

STALL_NOW = (L.T0 + timedelta(hours=2)).timestamp()
STATUS = {"warn": Status.WARN, "fail": Status.FAIL, "error": Status.ERROR}

# predicate row -> (the rank's lines before its sample, layout keywords, now): what the predicate needs besides
# the sample line (a row that is one line shape needs nothing)
CONTEXT = {
    "budget-board-size": ([], {"board_gib": 288}, None),
    "budget-kv-not-positive": ([], {}, None),
    "kv-collision": (L.rank_lines(0, stop_at="load") + [L.KV_COLLISION[0]], {}, None),
    "kv-raise-util": (L.rank_lines(0, stop_at="load") + [L.KV_COLLISION[0]], {}, None),
    "kv-cannot-fit": (L.rank_lines(0, stop_at="load"), {}, None),
    "expert-count": ([], {}, None),
    "max-model-len-set": ([], {}, None),
    "profiler-dir-unset": (L.rank_lines(0), {}, None),
    "a0-not-translating": (L.rank_lines(0)[:-1], {"stepping": "A0"}, None),
    "b0-translating": (L.rank_lines(0), {"stepping": "B0"}, None),
    "drafter-downloading": (L.rank_lines(0, stop_at="config"), {}, None),
    "log-stalled": (L.rank_lines(0, stop_at="config"), {}, STALL_NOW),
}


def fired(rule, rules=RULES):
    """(step, status, remediation, node) of every finding of ``rules`` on rank 0 of ct13, whose lines are the row's
    context, then its sample."""
    before, layout, now = CONTEXT.get(rule.name, ([], {}, None))
    lines = before + [rule.sample]
    parsed = parse_log(L.stamped(lines) if now else "\n".join(lines), SHAPES)
    return [(step, v.status, v.remediation, v.node) for step, v in
            judge_rank(0, parsed, Layout(("ct13",), **layout), now, rules=rules)]


def test_every_row_has_a_sample_a_section_and_a_registered_code():
    assert [rule.name for rule in RULES] == list(dict.fromkeys(rule.name for rule in RULES))  # names are unique
    assert all(rule.sample and rule.section.startswith("§") for rule in RULES)
    assert all(rule.remediation in REGISTRY.remediations for rule in RULES)
    assert all(rule.severity in STATUS for rule in RULES)
    assert all(rule.pattern is not None or rule.test is not None for rule in RULES)  # a line shape or a predicate
    assert set(CONTEXT) <= {rule.name for rule in RULES if rule.pattern is None}  # no stale context


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_every_row_fires_from_its_own_sample(rule):
    mine = (rule.step, STATUS[rule.severity], rule.remediation, "ct13")
    assert fired(rule, rules=(rule,)) == [mine]
    everything = fired(rule)
    if rule.pattern is not None:  # a line shape: its sample fires that row and no other
        assert everything == [mine]
    else:
        assert mine in everything


@pytest.mark.parametrize("rule", [rule for rule in RULES if rule.pattern is not None], ids=lambda rule: rule.name)
def test_a_line_row_needs_its_own_line(rule):
    """Without its sample the context alone never fires a line row: the row, not the context, is what fires."""
    assert rule.name not in CONTEXT and not fired_without_sample(rule)


def fired_without_sample(rule):
    return judge_rank(0, parse_log("(EngineCore_DP0 pid=1) INFO nothing to see", SHAPES), Layout(("ct13",)), None,
                      rules=(rule,))


@pytest.mark.parametrize("signal", SIGNALS, ids=lambda signal: signal.kind)
def test_every_input_shape_is_carried_by_its_sample(signal):
    (line,) = parse_log(signal.sample, SHAPES)
    assert line.has(signal.kind)


def test_a_healthy_rank_fires_no_row():
    assert judge_rank(0, parse_log("\n".join(L.rank_lines(0)), SHAPES), Layout(("ct13",), board_gib=432), None) == []


def test_explain_names_the_rows_that_give_a_code():
    from click.testing import CliRunner

    from k3doctor.cli.info import explain_cmd
    out = CliRunner().invoke(explain_cmd, ["TRIAGE-RUNNER-DIED"])
    assert out.exit_code == 0, out.output
    assert out.output.rstrip().endswith("Raised by: triage rule runner-died, triage rule double-free")


def test_list_verbose_shows_every_row():
    from click.testing import CliRunner

    from k3doctor.cli.info import list_cmd
    from k3doctor.rules import kernel_log
    out = CliRunner().invoke(list_cmd, ["-v"])
    assert out.exit_code == 0, out.output
    shown = out.output.split("rule rows besides the checks", 1)[1]
    assert all(f"triage rule {rule.name}: {rule.remediation}\n" in shown for rule in RULES)
    assert all(f"kernel-health rule {rule.id}: {rule.remediation or '-'}\n" in shown for rule in kernel_log.RULES)
    assert "triage rule idle-as-completed: -" in shown  # a stack rule that names no fault
