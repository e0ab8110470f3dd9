"""Hostile or careless input is one clear line naming file, line and key - never an internal error (issue 9 §3)."""
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from k3doctor.inventory import safeyaml
from k3doctor.inventory.load import load_inventory, parse_inventory, unset_password_variables
from k3doctor.inventory.types import InventoryError
from k3doctor.judging.runner import RunOptions, RunReport, run_checks
from k3doctor.outputs.report import render_junit, render_table
from k3doctor.readings import File
from k3doctor.registry import MAX_SECONDS, Param, Registry, check
from k3doctor.results import Result, Status, passed

NODES = "nodes:\n  - {name: a, host: h}\n"


def problems(text, registry=None):
    with pytest.raises(InventoryError) as info:
        parse_inventory(text, "inv.yaml", registry)
    return info.value.problems


def registry():
    reg = Registry()
    check("rack-free", title="t", params={"window_min": 30, "max_vram_pct": 10}, registry=reg)(lambda r, c: None)
    check("rocjitsu-store", title="t", params={"prefix": "/app/rjprefix"}, registry=reg)(lambda r, c: None)
    check("patch-integrity", title="t", params={"required": Param("auto", choices=("auto", "yes", "no"))},
          registry=reg)(lambda r, c: None)
    check("pairs", title="t", registry=reg,
          params={"plan": Param("quick", validate=lambda v, nodes: None if nodes is None or v in nodes
                                else f"a node of {nodes}")})(lambda r, c: None)
    return reg


@pytest.mark.parametrize("data,needle", [
    ("nodes:\n  - {name: caf\xe9, host: h}\n".encode("latin-1"), "inv.yaml:2: not UTF-8: byte 0xe9"),
    (NODES.encode("utf-16"), "inv.yaml:1: the file is UTF-16; save it as UTF-8"),
    (NODES.encode("utf-16-le"), "inv.yaml:1: NUL bytes: the file looks like UTF-16 without a byte order mark"),
])
def test_files_that_are_not_utf8_say_so(tmp_path, data, needle):
    path = tmp_path / "inv.yaml"
    path.write_bytes(data)
    with pytest.raises(InventoryError) as info:
        load_inventory(str(path))
    assert needle in info.value.problems[0] and len(info.value.problems) == 1


def test_a_utf8_bom_is_fine(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + NODES.encode())
    assert [n.name for n in load_inventory(str(path)).nodes] == ["a"]


@pytest.mark.parametrize("text,expected", [
    ("nodes:\n  - {name: a, host: !!python/object/apply:os.system [id]}\n",
     "inv.yaml:2: nodes[0].host: YAML tag !!python/object/apply:os.system is not allowed"),
    ("nodes:\n  - {name: a, host: !custom h}\n", "inv.yaml:2: nodes[0].host: YAML tag !custom is not allowed"),
    ("nodes:\n  - {name: a, host: !!binary aGVsbG8=}\n", "YAML tag !!binary is not allowed"),
    ("cluster:\n  checks:\n    ? [a]\n    : 1\n" + NODES, "inv.yaml:3: cluster.checks: keys must be plain names"),
    ("cluster:\n  tools: {? {a: 1} : x}\n" + NODES, "inv.yaml:2: cluster.tools: keys must be plain names"),
    ("nodes:\n  - {name: a, host: h, name: b}\n", "inv.yaml:2: nodes[0].name: duplicate key (first at line 2)"),
    ("cluster: {stepping: A0}\ncluster: {stepping: B0}\n" + NODES, "inv.yaml:2: cluster: duplicate key (first at "
                                                                    "line 1)"),
    ("nodes:\n  - {name: \"a\\0b\", host: h}\n", "inv.yaml:2: nodes[0].name: control character U+0000"),
    ("nodes:\n  - {name: a, host: \"h\\e[2J\"}\n", "inv.yaml:2: nodes[0].host: control character U+001B"),
    ("cluster: {gpus_per_node: " + "9" * 5000 + "}\n" + NODES, "inv.yaml:1: cluster.gpus_per_node: number"),
    ("ssh: {command_timeout_s: .nan}\n" + NODES, "inv.yaml:1: ssh.command_timeout_s: expected a finite number"),
    ("ssh: {node_deadline_s: 1.0e+999}\n" + NODES, "inv.yaml:1: ssh.node_deadline_s: expected a finite number"),
    ("ssh: {node_deadline_s: 1e7}\n" + NODES, f"expected a positive number of seconds, at most {MAX_SECONDS:g}"),
    ("nodes: " + "[" * 40 + "]" * 40 + "\n", "inv.yaml:1: nodes" + "[0]" * 23 + ": nested too deeply"),
    ("nodes: " + "[" * 5000 + "]" * 5000 + "\n", "inv.yaml:1: nested too deeply"),
], ids=lambda p: p[:60] if isinstance(p, str) else None)
def test_yaml_no_user_file_needs_is_one_line_per_problem(text, expected):
    got = problems(text)
    assert expected in got[0], got


def test_aliases_are_walked_once_not_exponentially():
    laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True))
    got = problems(laughs + NODES)
    assert got[0] == ("inv.yaml:1: aliases (*name) expand to more than 10000 values beyond those written "
                      "(write the values out)")


@pytest.mark.parametrize("params,expected", [
    ("rocjitsu-store: {prefix: null}", "cluster.checks.rocjitsu-store.prefix: expected a string, got None"),
    ("rack-free: {window_min: .inf}", "cluster.checks.rack-free.window_min: expected a finite number"),
    ("rack-free: {window_min: 1000000}", "cluster.checks.rack-free.window_min: expected a number in [0, 1440]"),
    ("rack-free: {window_min: -5}", "expected a number in [0, 1440], got -5"),
    ("rack-free: {max_vram_pct: true}", "max_vram_pct: expected a number like the default 10, got True"),
    ("patch-integrity: {required: maybe}", "cluster.checks.patch-integrity.required: expected one of auto, yes, no"),
    ("pairs: {plan: z}", "cluster.checks.pairs.plan: expected a node of ['a'], got 'z'"),
])
def test_check_parameters_follow_their_declaration(params, expected):
    (got,) = problems(f"cluster:\n  checks:\n    {params}\n" + NODES, registry())
    assert got.startswith("inv.yaml:3: ") and expected in got


def test_one_nodes_bad_override_is_named_by_its_line_before_anything_runs():
    text = ("nodes:\n  - {name: a, host: h}\n  - name: b\n    host: h\n"
            "    checks: {rocjitsu-store: {prefix: null}}\n")
    assert problems(text, registry()) == [
        "inv.yaml:5: nodes[1].checks.rocjitsu-store.prefix: expected a string, got None"]


@pytest.mark.parametrize("node,expected", [
    ("{name: a, host: h, container: -it}", "nodes[0].container: expected a Docker container name"),
    ("{name: a, host: h, container: 'k3 ep16'}", "nodes[0].container: expected a Docker container name"),
    ("{name: -a, host: h}", "nodes[0].name: expected a node name"),
    ("{name: a, host: -oProxyCommand=x}", "nodes[0].host: expected a host name or IP address"),
    ("{name: a, host: h, user: -l}", "nodes[0].user: expected a user name"),
    ("{name: a, host: h, tools: {rocm_smi: -rf}}", "nodes[0].tools.rocm_smi: expected a tool path"),
    ("{name: a, host: h, password_env: 'A B'}", "nodes[0].password_env: expected an environment variable name"),
    ("{name: a, host: h, image: \"x\\ny\"}", "nodes[0].image: expected a non-empty one-line string"),
])
def test_names_that_would_reach_a_command_line_as_options_are_refused(node, expected):
    (got,) = problems(f"nodes:\n  - {node}\n")  # one problem, not also "missing"
    assert got.startswith("inv.yaml:2: ") and expected in got


def test_unset_password_variable_is_named(monkeypatch):
    monkeypatch.delenv("K3_TEST_PW", raising=False)
    inv = parse_inventory("nodes:\n  - {name: a, host: h, password_env: K3_TEST_PW}\n  - {name: b, host: h}\n",
                          "inv.yaml")
    assert unset_password_variables(inv) == [
        "inv.yaml:2: nodes: a.password_env: environment variable K3_TEST_PW is not set"]
    monkeypatch.setenv("K3_TEST_PW", "s3cret")
    assert unset_password_variables(inv) == []


def test_param_declarations():
    assert Param(30).problem(float("nan")) == "a finite number"
    assert Param(30).problem(2 ** 70) == "a finite number"
    assert Param(1.5, minimum=1, maximum=2).problem(3) == "a number in [1, 2]"
    assert Param("a", choices=("a", "b")).problem("c") == "one of a, b"
    assert Param("a", choices=("a", "b")).problem("b") is None
    reg = Registry()
    check("c", title="t", registry=reg, params={"wait_s": 5, "n": 3})(lambda r, c: None)
    chk = reg.checks["c"]
    assert chk.params == {"wait_s": 5, "n": 3}  # the defaults, as `list -v` shows them
    assert chk.param_problem("wait_s", MAX_SECONDS + 1) == f"a number in [0, {MAX_SECONDS:g}]"
    assert chk.param_problem("n", 10 ** 9) == "a number <= 1000000"  # a count: no node has a billion of anything
    assert chk.param_problem("n", -1) is None


def test_reads_that_cannot_be_built_for_one_node_are_that_nodes_error_only():
    reg = Registry()

    def reads(settings):
        if settings.param("path") == "boom":
            raise ValueError("no path")
        return {"f": File(settings.param("path"))}

    check("c", title="t", reads=reads, params={"path": "/etc/hostname"}, registry=reg)(lambda r, ctx: passed("ok"))
    check("d", title="t", reads={"f": File("/etc/hostname")}, registry=reg)(lambda r, ctx: passed("ok"))
    inv = parse_inventory("nodes:\n  - {name: a, transport: local}\n  - {name: b, transport: local, "
                          "checks: {c: {path: boom}}}\n", "inv.yaml")
    got = {(r.check, r.node): r for r in run_checks(inv, reg.ordered(), RunOptions()).results}
    assert got[("c", "a")].status == Status.PASS and got[("d", "b")].status == Status.PASS
    assert got[("c", "b")].status == Status.ERROR and "ValueError: no path" in got[("c", "b")].message


def test_control_characters_from_a_node_never_reach_terminal_or_junit_raw():
    reg = Registry()
    check("c", title="t", registry=reg)(lambda r, ctx: None)
    report = RunReport(results=[Result("c", "a", Status.FAIL, "accel_state reads '\x1b[2J\x00\x07'")], nodes=["a"],
                       duration_s=0.1)
    table = render_table(report, reg.ordered(), verbose=True)
    assert "\x1b" not in table and "\x00" not in table and "\\x1b[2J\\x00\\x07" in table
    suite = ET.fromstring(render_junit(report, reg.ordered()))  # a strict XML parser accepts it
    assert "\\x1b[2J" in suite.find("testcase/failure").get("message")


def test_safeyaml_load_gives_plain_values():
    assert safeyaml.load("a: [1, 2.5, x, null, true]\n", "f") == {"a": [1, 2.5, "x", None, True]}
    with pytest.raises(safeyaml.YAMLInputError, match="f:1:5: YAML syntax error"):
        safeyaml.load("a: [", "f")


@pytest.mark.parametrize("argv, said", [
    (["check", "--nodes", "{fifo}.yaml"], "cannot read inventory: it is a FIFO"),
    (["check", "--nodes", "{inv}", "--only", "rack-free", "--baseline", "{fifo}.yaml"],
     "cannot read baseline {fifo}.yaml: it is a FIFO"),
    (["merge", "{fifo}.json"], "cannot read {fifo}.json: it is a FIFO"),
    (["judge", "{fifo}.json"], "cannot judge {fifo}.json: it is a FIFO"),
    (["judge", "{fifo}.tar.gz"], "not a triage bundle (it is a FIFO"),
    (["recipe", "diff", "--recipe", "{fifo}.yaml", "--script", "{inv}"], "cannot read recipe: it is a FIFO"),
], ids=["inventory", "baseline", "merge", "saved-readings", "bundle", "recipe"])
def test_a_fifo_given_for_a_file_is_named_exit_3_never_a_hang(tmp_path, argv, said):
    """Opening a FIFO for reading blocks until a writer comes: every file k3doctor is given is read only
    when it is a regular file (``localfiles``), so a wrong path ends at once in one line (before: a hang)."""
    fifo = tmp_path / "given"
    for suffix in (".yaml", ".json", ".tar.gz"):
        os.mkfifo(f"{fifo}{suffix}")
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  - {name: here, transport: local}\n")
    words = [w.format(fifo=fifo, inv=inv) for w in argv]
    proc = subprocess.run([sys.executable, "-m", "k3doctor.cli", *words], capture_output=True, text=True,
                          timeout=120)  # a hang guard only: the read used to block for ever
    assert proc.returncode == 3, proc.stderr
    assert said.format(fifo=fifo) in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
