"""`k3doctor node --json` documents and `k3doctor merge`'s input formats, on plain data: plain lines, clush/pdsh
prefixes, Ansible ad-hoc output (minimal and oneline callbacks, 2.19's error blocks, UNREACHABLE!), and the bad
inputs that are one line and exit 3 (duplicates, garbled JSON nobody owns, another inventory, unknown nodes)."""
import json

import pytest

from k3doctor.fleet import merge
from k3doctor.fleet import node_mode as local
from k3doctor.inventory.load import parse_inventory
from k3doctor.judging.runner import RunReport, select_checks
from k3doctor.readings import CommandReading, Docker, DockerReading, File, FileReading
from k3doctor.registry import REGISTRY, load_checks
from k3doctor.results import Result, Status

load_checks()
INVENTORY = """
cluster: {name: rig, hbm_gib_per_gpu: 432}
nodes:
  - {name: ct13, host: 127.0.0.1}
  - {name: ct14, host: 127.0.0.2}
"""


def inventory(text=INVENTORY):
    return parse_inventory(text, "inv.yaml", REGISTRY)


def document(name="ct13", inv_text=INVENTORY, status=Status.PASS, extra_readings=None):
    """A node document as `k3doctor node --json` writes it, from a hand-made run of that node."""
    inv = local.this_node(inventory(inv_text), name)
    checks = select_checks(REGISTRY)
    hbm = REGISTRY.checks["hbm-uniform"].readings_for(inv.nodes[0].settings)
    readings = {spec: FileReading(getattr(spec, "path", "x"), "1\n") for spec in hbm.values()
                if isinstance(spec, File)}
    readings.update(extra_readings or {})
    report = RunReport(results=[Result("shm-clean", name, status, "no stale segments"),
                                Result("hbm-uniform", name, Status.PASS, "judged alone")],
                       nodes=[name], duration_s=0.1, readings={name: readings})
    return local.node_document(report, inv, checks)


def parsed(text, source="in"):
    return merge.read_inputs([(source, text)])


def test_a_document_keeps_node_results_and_only_saved_copies_of_cluster_readings():
    secret = Docker()
    doc = json.loads(document(extra_readings={secret: DockerReading(
        containers=[{"Names": ["/x"], "Command": "serve --hf-token hf_abcdefghijklmnopqrstu"}], events=[])}))
    assert doc["schema"] == "k3doctor.node/1" and doc["node"] == "ct13" and doc["error"] is None
    assert [r["check"] for r in doc["results"]] == ["shm-clean"]  # the cluster judge's lone view is not merged
    assert "hf_abc" not in json.dumps(doc)  # rack-free's Docker reading is a node check's: not shipped at all
    assert doc["inventory_sha256"] == local.inventory_digest(inventory())
    assert "\n" not in document()  # one line: engines prefix or frame it per line


def test_this_node_is_the_inventorys_entry_through_the_local_transport(monkeypatch):
    inv = local.this_node(inventory(), "ct14")
    assert [(n.name, n.transport, n.host) for n in inv.nodes] == [("ct14", "local", "127.0.0.2")]
    with pytest.raises(local.NodeSelectionError, match="'ct99' is not a node of inv.yaml"):
        local.this_node(inventory(), "ct99")
    monkeypatch.setattr(local.os, "uname", lambda: type("U", (), {"nodename": "ct13.rack.example"})())
    assert [n.name for n in local.this_node(inventory(), None).nodes] == ["ct13"]


def test_plain_lines_clush_prefixes_and_ansible_blocks_all_read():
    one, two = document("ct13"), document("ct14")
    for text in (f"{one}\n{two}\n", f"ct13: {one}\nct14: {two}\n",
                 f"[WARNING]: Platform linux\nct13 | CHANGED | rc=0 >>\n{one}\nct14 | FAILED | rc=1 >>\n{two}"
                 "non-zero return code\n",
                 f"ct13 | CHANGED | rc=0 | (stdout) {one}\nct14 | CHANGED | rc=0 | (stdout) {two}\n"):
        found = parsed(text)
        assert [(r.node, r.problem, r.document) for r in found] == [("ct13", None, True), ("ct14", None, True)], text


def test_ansible_failures_become_that_hosts_problem_with_the_engines_words():
    text = ("[ERROR]: Task failed: Module failed: non-zero return code\nOrigin: <adhoc 'command' task>\n\n"
            "{'action': 'command', 'args': {}}\n\n"
            "ct13 | FAILED | rc=127 >>\n/bin/sh: 1: k3doctor: not foundnon-zero return code\n"
            'ct14 | UNREACHABLE! => {\n    "changed": false,\n    "msg": "ssh: connect to host 10.0.0.2 port 22: '
            'Connection refused",\n    "unreachable": true\n}\n')
    found = {r.node: r.problem for r in parsed(text)}
    assert found == {"ct13": "no k3doctor result (FAILED rc=127: /bin/sh: 1: k3doctor: not foundnon-zero return code)",
                     "ct14": "no k3doctor result (UNREACHABLE: ssh: connect to host 10.0.0.2 port 22: "
                             "Connection refused)"}


def test_a_garbled_document_is_its_hosts_error_where_the_engine_names_it_else_exit_3():
    cut = document()[:200]
    assert [(r.node, r.problem.split(":")[0]) for r in parsed(f"ct13: {cut}\n")] == \
        [("ct13", "its result is garbled (cut short?)")]
    with pytest.raises(merge.MergeError, match=r"^in:1: not a k3doctor node result \(garbled JSON"):
        parsed(cut + "\n")
    with pytest.raises(merge.MergeError, match=r"^in:2: not a k3doctor node result \('Traceback"):
        parsed(document() + "\nTraceback (most recent call last):\n")
    with pytest.raises(merge.MergeError, match="schema 'k3doctor.outputs.report/1'"):
        parsed('{"schema": "k3doctor.outputs.report/1"}\n')


def test_two_results_for_one_node_another_inventory_or_an_unknown_node_are_bad_input():
    with pytest.raises(merge.MergeError, match=r"two results for ct13 \(a:1 and b:1\)"):
        merge.one_each(merge.read_inputs([("a", document()), ("b", document())]))
    other = INVENTORY.replace("432", "288")
    with pytest.raises(merge.MergeError, match="ct13's result was taken with another inventory"):
        merge.inventory_of(parsed(document(inv_text=other)), inventory())
    with pytest.raises(merge.MergeError, match="pass the same file to merge with --nodes"):
        merge.inventory_of(parsed(document()), None)
    found = [merge.NodeResult("ct99", "in:1", problem="no k3doctor result (FAILED rc=1: ...)")]
    with pytest.raises(merge.MergeError, match="a result for 'ct99', which is not a node of inv.yaml"):
        merge.inventory_of(found, inventory())


def test_merge_puts_node_results_in_inventory_order_and_a_silent_node_is_an_error():
    inv = inventory()
    checks = select_checks(REGISTRY, only=("shm-clean", "hbm-uniform"))
    by_node = merge.one_each(parsed(document("ct13", status=Status.FAIL)))
    report = merge.merge(inv, checks, by_node)
    rows = [(r.check, r.node, r.status.value, r.message) for r in report.results]
    assert rows[0] == ("shm-clean", "ct13", "FAIL", "no stale segments")
    assert ("shm-clean", "ct14", "ERROR", "node not checked: no result from this node in the merged input") in rows
    assert report.nodes == ["ct13", "ct14"] and list(report.unreachable) == ["ct14"]
    why = report.unreachable["ct14"]
    assert (why.cause, why.message) == ("NODE-NO-RESULT", "no result from this node in the merged input")
    assert {r.remediation for r in report.results if r.node == "ct14"} == {"NODE-NO-RESULT"}
    hbm = [r for r in report.results if r.check == "hbm-uniform" and r.node == "ct14"]
    assert [r.message for r in hbm] == ["node not checked: no result from this node in the merged input"]


def test_racks_group_the_nodes_and_every_node_is_in_exactly_one():
    inv = inventory(INVENTORY + "racks:\n  A: [ct13]\n  B: [ct14]\n")
    assert [(rack, [n.name for n in nodes]) for rack, nodes in inv.rack_groups()] == [("A", ["ct13"]), ("B", ["ct14"])]
    assert [(r, [n.name for n in ns]) for r, ns in inventory().rack_groups()] == [(None, ["ct13", "ct14"])]
    assert [(r, [n.name for n in ns]) for r, ns in local.this_node(inv, "ct14").rack_groups()] == [("B", ["ct14"])]
    with pytest.raises(Exception) as bad:
        inventory(INVENTORY + "racks:\n  A: [ct13, ct15]\n  B: [ct13]\n")
    problems = str(bad.value)
    assert "racks.A: 'ct15' is not a node of this inventory" in problems
    assert "racks.B: ct13 is already in rack A" in problems
    assert "nodes: ct14: in no rack" in problems


def test_cluster_results_of_a_rack_say_which_rack():
    inv = inventory(INVENTORY + "racks:\n  A: [ct13]\n  B: [ct14]\n")
    checks = select_checks(REGISTRY, only=("hbm-uniform",))
    text = document("ct13", inv_text=inv.text) + "\n" + document("ct14", inv_text=inv.text)
    report = merge.merge(inv, checks, merge.one_each(parsed(text)))
    cluster = [r for r in report.results if r.node is None]
    assert [r.message.split(":")[0] for r in cluster] == ["rack A", "rack B"], [r.message for r in report.results]


def test_a_command_reading_keeps_its_saved_form_through_the_document():
    from k3doctor.gather import snapshot
    from k3doctor.readings import Command
    from k3doctor.redaction import EnvValues

    spec = Command(("env",), saved=EnvValues(("LD_LIBRARY_PATH",)))
    entries = snapshot.encode_readings({spec: CommandReading("env", 0, "HF_TOKEN=hf_secret\nLD_LIBRARY_PATH=/x\n", "")})
    back = snapshot.decode_readings(json.loads(json.dumps(entries)))
    assert back[spec].stdout == "HF_TOKEN=<redacted>\nLD_LIBRARY_PATH=/x\n"


def test_a_nodes_figures_survive_its_document_and_a_damaged_one_is_its_error():
    from k3doctor.results import CardId, PairRate, figure_to_dict

    figures = [CardId(2, 51), PairRate("a<->b", "a", "b", (("bidir", 10.5),))]
    result = merge._result({"check": "c", "node": "n", "status": "PASS", "message": "m",
                            "figures": [figure_to_dict(f) for f in figures]}, "n")
    assert result.figures == figures
    with pytest.raises(ValueError, match="not a figure"):
        merge._result({"check": "c", "node": "n", "status": "PASS", "message": "m", "figures": [{"kind": "x"}]}, "n")

def test_a_check_listed_as_run_without_a_result_is_an_error_not_a_silent_gap():
    inv = inventory()
    doc = json.loads(document("ct13", status=Status.FAIL))
    doc["results"] = [r for r in doc["results"] if r["check"] != "shm-clean"]  # the FAIL is gone, the check listed
    assert "shm-clean" in doc["checks"]
    by_node = merge.one_each(parsed(json.dumps(doc)) + parsed(document("ct14")))
    report = merge.merge(inv, select_checks(REGISTRY, only=("shm-clean", "hbm-uniform")), by_node)
    shm = [(r.node, r.status) for r in report.results if r.check == "shm-clean"]
    assert shm == [("ct13", Status.ERROR), ("ct14", Status.PASS)]
    assert "no result" in next(r.message for r in report.results if r.check == "shm-clean")
