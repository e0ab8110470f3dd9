"""Monitoring and CI outputs end to end: the real CLI on the simulated rack, read by each format's consumer.

prom by prometheus_client's text parser, junit by junitparser, nagios by the plugin-API exit code and
status-line grammar, npd by its exit-code contract. A fault shows on exactly its node and GPU.
"""
import re

import junitparser
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.cli import k3, k3json

pytestmark = pytest.mark.e2e
XML_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def statuses(path):
    """{(check, node, gpu): severity} from a textfile-collector file."""
    [family] = [f for f in text_string_to_metric_families(path.read_text()) if f.name == "k3doctor_check_status"]
    keys = [(s.labels["check"], s.labels["node"], s.labels["gpu"]) for s in family.samples]
    assert len(keys) == len(set(keys)), "duplicate series: node_exporter would drop the file"
    return {k: s.value for k, s in zip(keys, family.samples, strict=True)}


def junit_cases(text, tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(text, encoding="utf-8")
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = list(xml) if isinstance(xml, junitparser.JUnitXml) else [xml]
    cases = {(c.classname, c.name): c for s in suites for c in s}
    assert len(cases) == sum(len(list(s)) for s in suites), "duplicate testcase names"
    return cases


def test_unconfigured_card_in_prom_junit_and_nagios(rig, tmp_path):
    rig.apply("card-unconfigured")  # ct14 card1
    inv = rig.inventory_path
    prom = tmp_path / "k3doctor.prom"
    rc, out, err = k3("check", "--nodes", inv, "--format", "prom", "-o", prom)
    assert (rc, out) == (1, ""), err
    status = statuses(prom)
    bad = {k: v for k, v in status.items() if v >= 2}
    assert bad == {("ualink-state", "ct14", "1"): 4}, bad
    assert {n for _, n, _ in status} >= {"ct13", "ct14", "ct16", "ct17"}

    rc, out, err = k3("check", "--nodes", inv, "--format", "junit")
    assert rc == 1, err
    cases = junit_cases(out, tmp_path)
    failed = {k: c for k, c in cases.items() if not c.is_passed and not c.is_skipped}
    assert list(failed) == [("k3doctor.ualink-state", "ct14 gpu1")]
    [failure] = failed[("k3doctor.ualink-state", "ct14 gpu1")].result
    code = re.search(r"\[([A-Z0-9-]+)\]", failure.text).group(1)
    _, explained, _ = k3("explain", code)
    remedy = explained.split("\n\n", 1)[1].split("\n\nRaised by")[0].strip()
    assert remedy and remedy in failure.text  # the fix, not only the code

    rc, out, err = k3("check", "--nodes", inv, "--format", "nagios")
    first = out.splitlines()[0]
    assert rc == 2 and first.startswith("K3DOCTOR CRITICAL - DO NOT LAUNCH: ualink-state ct14 gpu1"), (out, err)
    assert re.search(r"\| fail=1;;;0 error=0;;;0 warn=0;;;0 ", first)


def test_healthy_rack_is_ok_for_nagios_and_npd(rig):
    rig.apply("healthy")
    rc, out, err = k3("check", "--nodes", rig.inventory_path, "--format", "nagios")
    assert rc == 0 and out.startswith("K3DOCTOR OK - READY TO LAUNCH") and out.count("\n") == 1, (out, err)
    rc, out, err = k3("check", "--nodes", rig.inventory_path, "--format", "npd")
    assert rc == 0 and out.startswith("READY TO LAUNCH") and out.count("\n") == 1, (out, err)


def test_control_characters_from_a_node_still_give_valid_junit_prom_and_one_line(rig, tmp_path):
    rig.apply("outputs-hostile-accel-state")  # ct16 card2: ESC, NUL, SOH, DEL around "training"
    rc, doc = k3json("check", "--nodes", rig.inventory_path)
    [bad] = [r for r in doc["results"] if r["status"] in ("ERROR", "FAIL", "WARN")]
    assert (bad["check"], bad["node"], bad["gpu"], rc) == ("ualink-state", "ct16", 2, 1)
    assert XML_FORBIDDEN.search(bad["message"])  # the node's raw bytes reach the renderers
    rc, out, err = k3("check", "--nodes", rig.inventory_path, "--format", "junit")
    assert rc == 1 and not XML_FORBIDDEN.search(out), err
    cases = junit_cases(out, tmp_path)
    failed = {k: c for k, c in cases.items() if not c.is_passed and not c.is_skipped}
    assert list(failed) == [("k3doctor.ualink-state", "ct16 gpu2")]
    [failure] = failed[("k3doctor.ualink-state", "ct16 gpu2")].result
    assert "'\\x1b[31mtraining\\x00\\x01\\x7f'" in failure.message  # shown escaped, not dropped
    prom = tmp_path / "k3doctor.prom"
    rc, _, err = k3("check", "--nodes", rig.inventory_path, "--format", "prom", "-o", prom)
    assert {k: v for k, v in statuses(prom).items() if v >= 2} == {("ualink-state", "ct16", "2"): 4}, err
    for fmt, code in (("nagios", 2), ("npd", 1)):
        rc, out, _ = k3("check", "--nodes", rig.inventory_path, "--format", fmt)
        first = out.split("\n")[0]
        assert rc == code and "ct16 gpu2" in first and first.isprintable(), (fmt, out)
