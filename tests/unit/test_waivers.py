"""Waivers: read with the inventory's rules (file:line, exit 3 material), applied once after judging against an
injected day (the expiry boundary), and shown by every format as its consumer reads it."""
import datetime
import json

import junitparser
import pytest
from prometheus_client.parser import text_string_to_metric_families

from k3doctor.inventory import waivers as inv_waivers
from k3doctor.inventory.load import parse_inventory
from k3doctor.inventory.safeyaml import YAMLInputError
from k3doctor.inventory.types import InventoryError
from k3doctor.judging.runner import RunReport
from k3doctor.judging.waivers import apply
from k3doctor.outputs import OUTPUTS
from k3doctor.registry import Registry, check, remediation
from k3doctor.results import LaunchVerdict, Result, Status, overall

TODAY = datetime.date(2027, 1, 10)
NODES = "nodes:\n  - {name: ct13, transport: local}\n  - {name: ct14, transport: local}\n"
ONE = """\
waivers:
  - code: UALINK-NOT-ACTIVE
    node: ct[13-14]
    gpu: 1
    reason: card 1 RMA pending
    ticket: OPS-123
    expires: 2027-01-31
"""


@pytest.fixture
def registry():
    reg = Registry()
    remediation("UALINK-NOT-ACTIVE", "not active", "configure it", registry=reg)
    remediation("SHM-STALE", "stale shm", "remove them", registry=reg)

    @check("ualink-state", title="UALink state", scope="gpu", registry=reg, remediation="UALINK-NOT-ACTIVE")
    def _judge(readings, ctx):
        return []
    return reg


def inventory_problems(text, registry):
    with pytest.raises(InventoryError) as info:
        parse_inventory(text, "inv.yaml", registry)
    return info.value.problems


def test_an_inventory_waiver_is_read_with_its_place_and_the_nodes_of_its_node_set(registry):
    inv = parse_inventory(NODES + ONE, "inv.yaml", registry)
    [w] = inv.waivers
    assert (w.code, w.nodes, w.gpu, w.ticket, w.expires, w.source) == (
        "UALINK-NOT-ACTIVE", frozenset({"ct13", "ct14"}), 1, "OPS-123", datetime.date(2027, 1, 31), "inv.yaml:5")
    quoted = parse_inventory(NODES + ONE.replace("2027-01-31", '"2027-01-31"'), "inv.yaml", registry)
    assert quoted.waivers[0].expires == datetime.date(2027, 1, 31)


@pytest.mark.parametrize("entry, said", [
    ("{code: UALINK-NOT-ACTIV, reason: r, ticket: T-1, expires: 2027-01-31}",
     "inv.yaml:5: waivers[0].code: unknown finding code 'UALINK-NOT-ACTIV' (did you mean 'UALINK-NOT-ACTIVE'?)"),
    ("{code: UALINK-NOT-ACTIVE, reason: r, ticket: T-1}",
     "inv.yaml:5: waivers[0]: missing expires (a waiver needs code, reason, ticket and expires"),
    ("{code: UALINK-NOT-ACTIVE, reason: r, expires: 2027-01-31}", "inv.yaml:5: waivers[0]: missing ticket"),
    ("{code: UALINK-NOT-ACTIVE, reason: r, ticket: T-1, expires: 2027-01-31 10:00:00}",
     "inv.yaml:5: waivers[0].expires: expected a date YYYY-MM-DD"),
    ("{code: UALINK-NOT-ACTIVE, reason: r, ticket: T-1, expires: 31.01.2027}",
     "inv.yaml:5: waivers[0].expires: expected a date YYYY-MM-DD"),
    ("{code: UALINK-NOT-ACTIVE, reason: r, ticket: T-1, expires: 2027-02-30}",
     "inv.yaml:5: waivers[0].expires: '2027-02-30' is not a date"),
    ("{code: UALINK-NOT-ACTIVE, reason: r, ticket: T-1, expires: 2027-01-31, gpu: 99}",
     "inv.yaml:5: waivers[0].gpu: expected a GPU index"),
    ("{code: UALINK-NOT-ACTIVE, reason: r, ticket: T-1, expires: 2027-01-31, node: 'ct[14-13]'}",
     "inv.yaml:5: waivers[0].node: bad node set"),
    ("{code: UALINK-NOT-ACTIVE, reason: r, ticket: T-1, expires: 2027-01-31, nodes: ct13}",
     "inv.yaml:5: waivers[0].nodes: unknown key (did you mean 'node'?)"),
])
def test_a_bad_waiver_is_one_problem_naming_its_file_line_and_key(registry, entry, said):
    [problem] = inventory_problems(NODES + f"waivers:\n  - {entry}\n", registry)
    assert problem.startswith(said), problem


def test_a_waivers_file_has_the_inventorys_list_and_its_own_lines(tmp_path, registry):
    path = tmp_path / "waivers.yaml"
    path.write_text("# accepted until the RMA lands\n" + ONE)
    [w] = inv_waivers.load_file(str(path), set(registry.remediations))
    assert w.source == f"{path}:3"
    for text, said in (("", "the waivers file is empty"), ("waiver: []\n", "unknown key (did you mean 'waivers'?)"),
                       ("waivers: {code: X}\n", "expected a list of waivers")):
        path.write_text(text)
        with pytest.raises(YAMLInputError) as info:
            inv_waivers.load_file(str(path), set(registry.remediations))
        assert len(info.value.problems) == 1 and said in info.value.problems[0], info.value.problems


def waiver(expires="2027-01-31", **entry):
    fields = {"code": "UALINK-NOT-ACTIVE", "reason": "RMA pending", "ticket": "OPS-123", "expires": expires, **entry}
    text = NODES + "waivers:\n  - " + json.dumps(fields) + "\n"
    return parse_inventory(text, "inv.yaml").waivers[0]


def fail(node="ct14", gpu=1, status=Status.FAIL, code="UALINK-NOT-ACTIVE"):
    return Result("ualink-state", node, status, "accel_state is 'unconfigured'", gpu=gpu, remediation=code)


def test_an_unexpired_waiver_turns_its_finding_waived_up_to_the_day_before_it_expires():
    w = waiver(node="ct14", gpu=1)
    for today in (TODAY, datetime.date(2027, 1, 30)):
        [r], notes = apply([fail()], [w], today)
        assert r.status == Status.WAIVED and notes == []
        assert r.message == "accel_state is 'unconfigured' (waived until 2027-01-31, OPS-123: RMA pending)"
        assert r.waiver == {"code": "UALINK-NOT-ACTIVE", "node": "ct14", "gpu": 1, "reason": "RMA pending",
                            "ticket": "OPS-123", "expires": "2027-01-31", "source": "inv.yaml:5", "finding": "FAIL"}
        assert overall([r, Result("shm", "ct14", Status.PASS, "ok")]) == LaunchVerdict.READY
        assert overall([r]) == LaunchVerdict.READY  # evaluated: a waived finding is not "nothing verified"


def test_on_its_expiry_day_a_waiver_accepts_nothing_and_the_fail_says_so():
    for today in (datetime.date(2027, 1, 31), datetime.date(2027, 6, 1)):
        [r], notes = apply([fail()], [waiver()], today)
        assert r.status == Status.FAIL and overall([r]) == LaunchVerdict.DO_NOT_LAUNCH
        assert r.message.endswith("(waiver OPS-123 expired on 2027-01-31: inv.yaml:5)")
        assert r.waiver["expired"] is True and notes == []


def test_only_the_named_code_node_and_gpu_are_waived_and_never_an_error_or_a_skip():
    w = waiver(node="ct14", gpu=1)
    others = [fail(gpu=0), fail(node="ct13"), fail(code="SHM-STALE"), fail(status=Status.ERROR),
              fail(status=Status.SKIP), fail(node=None, gpu=None)]
    out, notes = apply(others, [w], TODAY)
    assert out == others and notes == [
        "waiver inv.yaml:5 (UALINK-NOT-ACTIVE on ct14 gpu1, OPS-123) matched no finding: remove it if the fault "
        "is fixed"]
    everywhere = waiver()  # no node, no gpu: every place, the cluster rows too
    out, _ = apply([fail(gpu=0), fail(node=None, gpu=None), fail(status=Status.WARN)], [everywhere], TODAY)
    assert [r.status for r in out] == [Status.WAIVED] * 3


def test_a_live_waiver_wins_over_an_expired_one_and_a_merged_waived_result_counts_as_covered():
    old, new = waiver("2027-01-01"), waiver("2027-03-01")
    [r], notes = apply([fail()], [old, new], TODAY)
    assert r.status == Status.WAIVED and "until 2027-03-01" in r.message and notes == []
    again, notes = apply([r], [new], TODAY)  # a node's own run waived it already (merge)
    assert again == [r] and notes == []


def test_an_expired_unused_waiver_and_one_running_past_a_quarter_are_said_once():
    _, notes = apply([fail()], [waiver("2027-06-01"), waiver("2027-01-01", code="SHM-STALE")], TODAY)
    assert notes == [
        "waiver inv.yaml:5 (UALINK-NOT-ACTIVE, OPS-123) runs until 2027-06-01, more than 90 days ahead: review it "
        "sooner",
        "waiver inv.yaml:5 (SHM-STALE, OPS-123) matched no finding and expired on 2027-01-01: remove it if the "
        "fault is fixed"]


# ------------------------------------------------------------------ every format, read by its consumer


@pytest.fixture
def waived_report(registry):
    [waived], notes = apply([fail()], [waiver(node="ct14", gpu=1), waiver(code="SHM-STALE")], TODAY)
    results = [Result("ualink-state", "ct13", Status.PASS, "active", gpu=1), waived,
               Result("ualink-state", "ct14", Status.PASS, "active", gpu=0)]
    return RunReport(results=results, nodes=["ct13", "ct14"], duration_s=1.0, notes=notes), \
        [registry.checks["ualink-state"]]


def render(fmt, report_and_checks):
    report, checks = report_and_checks
    out = OUTPUTS[fmt]
    return out.render(report, checks, False), out.exit_code(report)


def test_table_and_json_show_the_waived_line_its_waiver_the_note_and_the_count(waived_report):
    text, rc = render("table", waived_report)
    assert rc == 0
    assert ("WAIVED ualink-state ct14 gpu1: accel_state is 'unconfigured' (waived until 2027-01-31, OPS-123: RMA "
            "pending)  [UALINK-NOT-ACTIVE]") in text
    assert "NOTE  waiver inv.yaml:5 (SHM-STALE, OPS-123) matched no finding" in text
    assert text.splitlines()[-1].startswith("READY TO LAUNCH (2 pass, 1 waived; ") and "explain" not in text
    doc = json.loads(render("json", waived_report)[0])
    assert (doc["verdict"], doc["exit_code"], doc["waived"]) == ("READY TO LAUNCH", 0, 1)
    [w] = [r for r in doc["results"] if r["status"] == "WAIVED"]
    assert (w["waiver"]["ticket"], w["waiver"]["expires"], w["waiver"]["finding"]) == ("OPS-123", "2027-01-31", "FAIL")
    assert len(doc["notes"]) == 1


def test_junit_shows_a_waived_finding_as_a_skipped_case_of_its_stable_name(waived_report, tmp_path):
    text, rc = render("junit", waived_report)
    path = tmp_path / "k3doctor.xml"
    path.write_text(text)
    xml = junitparser.JUnitXml.fromfile(str(path))
    [suite] = list(xml) if isinstance(xml, junitparser.JUnitXml) else [xml]
    cases = {(c.classname, c.name): c for c in suite}
    case = cases[("k3doctor.ualink-state", "ct14 gpu1")]
    assert rc == 0 and case.is_skipped and not [c for c in cases.values() if not c.is_passed and not c.is_skipped]
    [skipped] = case.result
    assert "OPS-123" in skipped.message and "2027-01-31" in skipped.message and skipped.type == "WAIVED"
    assert (suite.tests, suite.failures, suite.skipped) == (3, 0, 1)
    assert "matched no finding" in suite._elem.find("system-out").text  # the suite's own output, after its cases


def test_prometheus_gives_waived_its_own_value_keeps_the_others_and_says_when_the_waiver_ends(waived_report):
    text, rc = render("prom", waived_report)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    status = {(s.labels["node"], s.labels["gpu"]): s.value for s in families["k3doctor_check_status"].samples}
    assert status == {("ct13", "1"): 0, ("ct14", "1"): 1.5, ("ct14", "0"): 0} and rc == 0
    assert "0 PASS, 1 SKIP, 1.5 WAIVED, 2 WARN, 3 ERROR, 4 FAIL" in text
    [end] = families["k3doctor_waiver_expiry_timestamp_seconds"].samples
    assert end.labels == {"check": "ualink-state", "node": "ct14", "gpu": "1", "code": "UALINK-NOT-ACTIVE",
                          "ticket": "OPS-123"}
    assert end.value == datetime.datetime(2027, 1, 31, tzinfo=datetime.timezone.utc).timestamp()
    verdict = {s.labels["verdict"]: s.value for s in families["k3doctor_verdict"].samples}
    assert verdict["READY TO LAUNCH"] == 1


def test_nagios_is_ok_with_the_waived_line_npd_ok_html_lists_it(waived_report):
    text, rc = render("nagios", waived_report)
    lines = text.splitlines()
    assert rc == 0 and lines[0].startswith("K3DOCTOR OK - READY TO LAUNCH") and " waived=1;;;0 " in lines[0]
    assert any(line.startswith("WAIVED ualink-state ct14 gpu1: ") and "OPS-123" in line for line in lines)
    assert any(line.startswith("NOTE waiver inv.yaml:5") for line in lines)
    text, rc = render("npd", waived_report)
    assert rc == 0 and text.startswith("READY TO LAUNCH") and "\n" not in text
    page, rc = render("html", waived_report)
    assert rc == 0 and 'data-status="WAIVED"' in page and 'id="notes"' in page and "OPS-123" in page
