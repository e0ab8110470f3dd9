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


def saved_file(reading: dict, spec=None) -> str:
    import json
    spec = spec or {"kind": "Command", "argv": ["echo", "x"], "saved": None}
    return json.dumps({"schema": snapshot.SCHEMA, "inventory": INV, "overrides": [], "unreachable": {},
                       "nodes": {"here": [{"spec": spec, "reading": reading}]}})


CMD = {"kind": "CommandReading", "command": "echo x", "rc": 0, "stdout": "x\n", "stderr": ""}
DOCKER = {"kind": "DockerReading", "containers": [{"Names": ["/k3ep16"], "Id": "a"}], "events": [], "now": 1.7e9}
DOCKER_SPEC = {"kind": "Docker", "saved": None}


@pytest.mark.parametrize("reading, spec", [
    ({"kind": "Exists", "value": "yes"}, {"kind": "Exists", "path": "/x"}),
    ({**CMD, "rc": 0.0}, None),
    ({**CMD, "truncated": 1}, None),
    ({"kind": "FileReading", "path": "/x", "content": None, "error": ""}, {"kind": "File", "path": "/x"}),
    ({**DOCKER, "now": float("nan")}, DOCKER_SPEC),
    ({**DOCKER, "now": float("inf")}, DOCKER_SPEC),
    ({**DOCKER, "now": 1e18}, DOCKER_SPEC),
    ({**DOCKER, "containers": [{"Names": ["/k3ep16"], "Id": "a"}, {"Names": ["/k3ep16"], "Id": "b"}]}, DOCKER_SPEC),
], ids=["exists-yes", "rc-float", "truncated-int", "error-empty", "clock-nan", "clock-inf", "clock-1e18",
        "name-twice"])
def test_saved_readings_are_validated_like_an_inventory(reading, spec):
    with pytest.raises(snapshot.SnapshotError):
        snapshot.load(saved_file(reading, spec))


def test_a_json_key_given_twice_is_damage_not_the_last_value():
    text = saved_file(CMD).replace('"rc": 0,', '"rc": 1, "rc": 0,')
    with pytest.raises(snapshot.SnapshotError, match="duplicate key 'rc'"):
        snapshot.load(text)


def test_valid_saved_readings_still_load():
    assert snapshot.load(saved_file(CMD))[2]["here"]
    assert snapshot.load(saved_file(DOCKER, DOCKER_SPEC))[2]["here"]
