"""The verdict line's `k3doctor explain CODE` points at the most severe finding, not the first code A-Z."""
from k3doctor.judging.runner import RunReport
from k3doctor.outputs.report import render_table
from k3doctor.registry import Check
from k3doctor.results import Result, Status


def verdict_line(results):
    checks = [Check(name=n, title=n, scope="node", judge=print) for n in dict.fromkeys(r.check for r in results)]
    return render_table(RunReport(results=results, nodes=["n0", "n1"], duration_s=1.0), checks).splitlines()[-1]


def test_the_explain_hint_names_the_fail_above_an_earlier_sorting_warn_and_error():
    line = verdict_line([
        Result("alpha", "n0", Status.WARN, "slow", remediation="AAA-WARNING"),
        Result("beta", "n0", Status.ERROR, "unreadable", remediation="BBB-ERROR"),
        Result("zulu", "n1", Status.FAIL, "broken", remediation="ZZZ-FAIL"),
        Result("zulu", "n0", Status.PASS, "fine")])
    assert line.startswith("DO NOT LAUNCH") and line.endswith("see `k3doctor explain ZZZ-FAIL`")


def test_without_a_fail_the_hint_names_the_error_and_without_codes_there_is_none():
    assert verdict_line([Result("alpha", "n0", Status.WARN, "w", remediation="AAA-WARNING"),
                         Result("beta", "n1", Status.ERROR, "e", remediation="BBB-ERROR")]).endswith(
        "see `k3doctor explain BBB-ERROR`")
    assert "explain" not in verdict_line([Result("alpha", "n0", Status.PASS, "ok")])
