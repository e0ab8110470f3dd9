"""Saved readings judge the same offline as they did live."""
import pytest

from k3doctor.gather import snapshot
from k3doctor.inventory.load import parse_inventory
from k3doctor.judging.runner import RunOptions, run_checks
from k3doctor.readings import Command, Exists, File, Glob
from k3doctor.registry import Registry, check
from k3doctor.results import Status, fail, passed

INV = "nodes:\n  - {name: here, transport: local}\n"


def make_registry(tmp_path):
    reg = Registry()
    (tmp_path / "p").write_text("1\n")

    @check("param", title="p", reads={"p": File(str(tmp_path / "p")), "glob": Glob(str(tmp_path / "*")),
                                      "e": Exists(str(tmp_path)), "c": Command(("echo", "x"))}, registry=reg)
    def param(r, ctx):
        ok = r["p"].text() == "1" and r["e"] and len(r["glob"]) == 1 and r["c"].output() == "x\n"
        return passed("ok") if ok else fail("changed")

    @check("newer", title="a check the snapshot predates", reads={"n": File("/etc/hostname")}, registry=reg)
    def newer(r, ctx):
        return passed(r["n"].text())

    return reg


def test_round_trip_judges_identically_and_never_touches_the_node(tmp_path):
    reg = make_registry(tmp_path)
    inv = parse_inventory(INV)
    live = run_checks(inv, [reg.checks["param"]], RunOptions())
    text = snapshot.dump(live, INV, ["param.x=1"])
    (tmp_path / "p").write_text("2\n")  # the node changes after the capture
    inv_text, overrides, saved, unreachable = snapshot.load(text)
    assert overrides == ["param.x=1"]
    replay = run_checks(parse_inventory(inv_text), reg.ordered(), RunOptions(replay=(saved, unreachable)))
    by = {r.check: r for r in replay.results}
    assert by["param"].status == Status.PASS  # judged on the saved "1", not today's "2"
    assert by["newer"].status == Status.ERROR and "not in the saved readings" in by["newer"].message


@pytest.mark.parametrize("text,needle", [("{}", "not a k3doctor readings file"), ("[", "damaged"),
                                         ("[1]", "not a k3doctor readings file"),
                                         ('{"schema": "k3doctor.readings/1"}', "damaged"),
                                         ('{"schema": "k3doctor.readings/1", "inventory": 5, "nodes": {}}',
                                          "inventory must be text")])
def test_damaged_files_are_reported(text, needle):
    with pytest.raises(snapshot.SnapshotError, match=needle):
        snapshot.load(text)
