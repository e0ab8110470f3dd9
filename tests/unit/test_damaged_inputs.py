"""Damaged files and odd option values (issue 22 §5): one line and exit 3 before anything is judged - never
an internal error, a traceback, a crash in a judge later on, nor a report a strict JSON parser refuses."""
import io
import json
import subprocess
import sys
import tarfile

import pytest
from k3rig import server_log as L

from k3doctor.inventory.overrides import OverrideError, apply_overrides
from k3doctor.registry import REGISTRY

DEEP = "[" * 100_000 + "]" * 100_000


def k3(*args, timeout=120):
    proc = subprocess.run([sys.executable, "-m", "k3doctor.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def one_usage_line(rc, err, needle):
    assert rc == 3 and "internal error" not in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and needle in err, err


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A readings file, a node document and a triage bundle, each as this version writes it."""
    where = tmp_path_factory.mktemp("saved")
    rc, _, err = k3("check", "--only", "shm-clean", "--save-readings", where / "r.json", "-o", where / "report")
    assert rc in (0, 1), err
    rc, _, err = k3("node", "--only", "shm-clean", "--json", "-o", where / "node.json")
    assert rc in (0, 1), err
    logs = where / "logs"
    logs.mkdir()
    for index, lines in L.node_logs().items():
        (logs / f"ct{13 + index}.log").write_text("\n".join(lines) + "\n")
    rc, _, err = k3("triage", "--logs", logs, "-o", where / "b.tar.gz")
    assert rc in (0, 1), err
    with tarfile.open(where / "b.tar.gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
    return where, json.loads((where / "r.json").read_text()), json.loads((where / "node.json").read_text()), members


def bundle_with(where, members, manifest_text):
    path = where / "damaged.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            data = manifest_text.encode() if name == "manifest.json" else data
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("change, needle", [
    ({"layout": {"per_node": 0}}, "layout.per_node"), ({"layout": {"per_node": -4}}, "layout.per_node"),
    ({"layout": {"per_node": True}}, "layout.per_node"), ({"layout": {"nodes": [[1]]}}, "layout.nodes"),
    ({"layout": {"nodes": ["ct13\nFAIL forged"]}}, "layout.nodes"), ({"layout": {"board_gib": "x"}}, "board_gib"),
    ({"layout": {"stepping": 5}}, "layout.stepping"), ({"now": "1700000000"}, "is not a time"),
    ({"now": [1]}, "is not a time"), ({"problems": {"a": {"b": 1}}}, "problems"), ({"layout": []}, "layout must"),
])
def test_a_damaged_bundle_manifest_is_one_line(saved, change, needle):
    where, _, _, members = saved
    manifest = json.loads(members["manifest.json"])
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(manifest.get(key), dict):
            manifest[key].update(value)
        else:
            manifest[key] = value
    rc, _, err = k3("judge", bundle_with(where, members, json.dumps(manifest)))
    one_usage_line(rc, err, needle)


def test_a_bundle_manifest_nested_100k_deep_is_one_line(saved):
    where, _, _, members = saved
    rc, _, err = k3("judge", bundle_with(where, members, '{"layout": ' + DEEP + "}"))
    one_usage_line(rc, err, "nested too deeply")


@pytest.mark.parametrize("overrides", [[5], [None], [{"a": 1}]])
def test_saved_overrides_that_are_not_text_are_one_line(saved, tmp_path, overrides):
    _, doc, node, _ = saved
    path = tmp_path / "r.json"
    path.write_text(json.dumps({**doc, "overrides": overrides}))
    one_usage_line(*k3("judge", path)[::2], "overrides must be a list of NAME=VALUE strings")
    path = tmp_path / "n.jsonl"
    path.write_text(json.dumps({**node, "overrides": overrides}) + "\n")
    rc, out, err = k3("merge", path, "--format", "json")  # a damaged node document: that node's ERROR
    assert rc == 2 and err == "" and "overrides must be a list" in json.loads(out)["results"][0]["message"]


def test_merge_of_json_nested_100k_deep_is_one_line(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text('{"schema": "k3doctor.node/1", "results": ' + DEEP + "}\n")
    one_usage_line(*k3("merge", path)[::2], "nested too deeply")


def test_merge_never_prints_a_bare_nan(saved, tmp_path):
    _, _, node, _ = saved
    node["results"][0]["evidence"] = {"busbw": float("nan"), "peaks": [float("inf"), -float("inf")]}
    path = tmp_path / "n.jsonl"
    path.write_text(json.dumps(node) + "\n")
    rc, out, err = k3("merge", path, "--format", "json")
    doc = json.loads(out, parse_constant=lambda name: pytest.fail(f"bare {name} in the JSON report"))
    [mine] = [r for r in doc["results"] if r["check"] == node["results"][0]["check"]]
    assert mine["evidence"] == {"busbw": "NaN", "peaks": ["Infinity", "-Infinity"]}


@pytest.mark.parametrize("item", ["kernel-health.silence=[{a: 1}]", "ualink-state.accepted_states=[[]]",
                                  "host-resources.log_dirs=[1]", "launch-config.env={A: [1]}",
                                  "launch-config.ignore=[[x]]", "allreduce-probe.busbw_floor_gbs={1: [2]}"])
def test_list_and_mapping_parameters_are_checked_element_by_element(item):
    from k3doctor.inventory.load import localhost_inventory
    from k3doctor.registry import load_checks

    load_checks()
    with pytest.raises(OverrideError, match="takes a"):
        apply_overrides(localhost_inventory(), (item,), REGISTRY)


def test_good_lists_and_mappings_still_pass():
    from k3doctor.inventory.load import localhost_inventory
    from k3doctor.registry import load_checks

    load_checks()
    apply_overrides(localhost_inventory(), ("ualink-state.accepted_states=[active, ready]",
                                            "launch-config.env={A: x, B: null, C: '*'}",
                                            "allreduce-probe.busbw_floor_gbs={1048576: 50.5}",
                                            "kernel-health.silence=[]"), REGISTRY)


@pytest.mark.parametrize("name", ["ct13\x1b[2J", "ct13\nPASS", "-ct13", ""])
def test_node_name_is_a_node_name(name):
    rc, _, err = k3("node", "--name", name, "--only", "shm-clean")
    one_usage_line(rc, err, "--name")


@pytest.mark.parametrize("option", ["--only", "--skip"])
def test_a_check_list_that_names_no_check_is_an_error(option):
    rc, _, err = k3("check", option, ",,,")
    one_usage_line(rc, err, "names no check")
