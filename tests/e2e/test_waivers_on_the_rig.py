"""Waivers end to end: a known FAIL on the simulated rack (ct14 card1's UALink not active), waived in the
inventory (READY, exit 0, a WAIVED line in every format as its consumer reads it), waived by a --waivers file
that expired today (DO NOT LAUNCH again, exit 1, the line says so), and a waiver with an unknown code (exit 3,
one line, before any node is touched). One rack state, one `check` with the readings saved, the formats judged
from them."""
import datetime
import json

import junitparser
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import chromium
from tests.e2e.cli import k3, k3json

pytestmark = pytest.mark.e2e
TICKET = "OPS-4242"


def waivers_yaml(expires, code="UALINK-NOT-ACTIVE", node="ct14", ticket=TICKET) -> str:
    entry = {"code": code, "node": node, "gpu": 1, "reason": "card RMA pending", "ticket": ticket,
             "expires": expires.isoformat()}
    return "waivers:\n  - " + json.dumps(entry) + "\n"


def test_a_waived_fail_is_shown_by_every_format_and_fails_again_once_expired(rig, tmp_path):
    rig.apply("card-unconfigured")
    today = datetime.datetime.now(datetime.timezone.utc).date()  # k3doctor judges expiry on UTC's day
    until = today + datetime.timedelta(days=30)
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(rig.inventory_path.read_text() + waivers_yaml(until))
    state = tmp_path / "state.json"

    rc, doc = k3json("check", "--nodes", inventory, "--save-readings", state, "--keep-identifiers")
    assert (rc, doc["verdict"], doc["waived"], doc["notes"]) == (0, "READY TO LAUNCH", 1, []), doc["results"]
    assert not [r for r in doc["results"] if r["status"] in ("FAIL", "ERROR", "WARN")]
    [waived] = [r for r in doc["results"] if r["status"] == "WAIVED"]
    assert (waived["check"], waived["node"], waived["gpu"], waived["remediation"]) == (
        "ualink-state", "ct14", 1, "UALINK-NOT-ACTIVE")
    assert (waived["waiver"]["ticket"], waived["waiver"]["expires"], waived["waiver"]["finding"]) == (
        TICKET, until.isoformat(), "FAIL")

    # every format, from the same readings (the saved inventory carries its waivers)
    rc, out, err = k3("judge", state)
    lines = out.splitlines()
    [line] = [x for x in lines if x.startswith("WAIVED")]
    assert rc == 0 and line.startswith("WAIVED ualink-state ct14 gpu1: ") and TICKET in line, (out, err)
    assert f"waived until {until}" in line and "card RMA pending" in line
    assert lines[-1].startswith("READY TO LAUNCH (") and " 1 waived" in lines[-1]

    rc, out, err = k3("judge", state, "--format", "junit", "-o", tmp_path / "k3doctor.xml")
    xml = junitparser.JUnitXml.fromfile(str(tmp_path / "k3doctor.xml"))
    cases = {(c.classname, c.name): c for s in (list(xml) if isinstance(xml, junitparser.JUnitXml) else [xml])
             for c in s}
    case = cases[("k3doctor.ualink-state", "ct14 gpu1")]
    assert rc == 0 and case.is_skipped and TICKET in case.result[0].message, err
    assert not [k for k, c in cases.items() if not c.is_passed and not c.is_skipped]

    rc, out, err = k3("judge", state, "--format", "prom", "-o", tmp_path / "k3doctor.prom")
    families = {f.name: f for f in text_string_to_metric_families((tmp_path / "k3doctor.prom").read_text())}
    status = {(s.labels["check"], s.labels["node"], s.labels["gpu"]): s.value
              for s in families["k3doctor_check_status"].samples}
    assert rc == 0 and {k: v for k, v in status.items() if v > 1} == {("ualink-state", "ct14", "1"): 1.5}, err
    [end] = families["k3doctor_waiver_expiry_timestamp_seconds"].samples
    assert end.labels["ticket"] == TICKET and end.value == datetime.datetime.combine(
        until, datetime.time(), datetime.timezone.utc).timestamp()

    rc, out, err = k3("judge", state, "--format", "nagios")
    assert rc == 0 and out.startswith("K3DOCTOR OK - READY TO LAUNCH"), (out, err)
    assert any(x.startswith("WAIVED ualink-state ct14 gpu1") for x in out.splitlines())
    rc, out, err = k3("judge", state, "--format", "npd")
    assert rc == 0 and out.startswith("READY TO LAUNCH"), (out, err)

    rc, _, err = k3("judge", state, "--format", "html", "-o", tmp_path / "report.html")
    _, dom = chromium.render(tmp_path / "report.html", tmp_path)
    assert rc == 0 and dom.first("h1", id="verdict").text == "READY TO LAUNCH", err
    [finding] = [f for f in dom.find_all("li", cls="finding") if f.attrs["data-status"] == "WAIVED"]
    assert (finding.attrs["data-node"], finding.attrs["data-gpu"]) == ("ct14", "1") and TICKET in finding.text

    # the same waiver in a file beside the rig's own inventory, expired today: the FAIL is back and says so
    expired = tmp_path / "waivers.yaml"
    expired.write_text(waivers_yaml(today) + waivers_yaml(until, code="SHM-STALE", ticket="OPS-1")
                       .replace("waivers:\n", ""))
    rc, out, err = k3("check", "--nodes", rig.inventory_path, "--waivers", expired)
    [line] = [x for x in out.splitlines() if x.startswith("FAIL")]
    assert rc == 1 and line.startswith("FAIL  ualink-state ct14 gpu1: "), (out, err)
    assert f"(waiver {TICKET} expired on {today}: {expired}:2)" in line
    assert f"NOTE  waiver {expired}:3 (SHM-STALE on ct14 gpu1, OPS-1) matched no finding" in out
    assert out.splitlines()[-1].startswith("DO NOT LAUNCH")

    # an unknown code: one line naming the file and line, exit 3, no node touched
    bad = tmp_path / "bad-waivers.yaml"
    bad.write_text(waivers_yaml(until, code="UALINK-NOT-ACTIV"))
    rc, out, err = k3("check", "--nodes", rig.inventory_path, "--waivers", bad)
    assert (rc, out) == (3, ""), err
    assert err.strip() == (f"k3doctor: {bad}:2: waivers[0].code: unknown finding code 'UALINK-NOT-ACTIV' "
                           "(did you mean 'UALINK-NOT-ACTIVE'?)")
