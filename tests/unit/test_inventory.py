"""Inventory validation: every error names file, line and key; good files load with defaults."""
import pytest

from k3doctor.inventory.load import load_inventory, parse_inventory
from k3doctor.inventory.types import InventoryError
from k3doctor.registry import Registry, check

GOOD = """\
cluster:
  name: heliosm-c
  stepping: B0
  hbm_gib_per_gpu: 432
  tools: {amd_smi: /usr/bin/amd-smi}
ssh: {connect_timeout_s: 5, known_hosts: /etc/k3/known_hosts}
defaults: {user: root, port: 2222, identity_file: ~/.ssh/k3}
nodes:
  - {name: ct13, host: 10.210.11.14}
  - name: ct14
    host: 10.210.11.25
    data_ip: 10.210.11.125
    stepping: A0
    port: 22
  - {name: here, transport: local}
"""


def problems(text, registry=None):
    with pytest.raises(InventoryError) as info:
        parse_inventory(text, "inv.yaml", registry)
    return info.value.problems


def test_yaml_merge_keys_are_read_as_yaml_says_not_refused_and_not_dropped():
    """``<<: *anchor`` (YAML's merge key, common in hand-written inventories) brings the anchor's keys in,
    the entry's own keys winning; a bad merged value is still named with its line."""
    inv = parse_inventory("""\
nodes:
  - &tray {name: ct13, host: 10.0.0.13, user: k3, sudo: true, stepping: A0}
  - <<: *tray
    name: ct14
    host: 10.0.0.14
    stepping: B0
""", "inv.yaml")
    ct13, ct14 = inv.nodes
    assert (ct14.name, ct14.host, ct14.user, ct14.sudo) == ("ct14", "10.0.0.14", "k3", True)
    assert (ct13.settings.stepping, ct14.settings.stepping) == ("A0", "B0")
    assert problems("""\
nodes:
  - &tray {name: ct13, host: 10.0.0.13, port: 0}
  - {<<: *tray, name: ct14}
""") == ["inv.yaml:2: nodes[0].port: expected an integer between 1 and 65535, got 0",
         "inv.yaml:2: nodes[1].port: expected an integer between 1 and 65535, got 0"]


def test_good_inventory_merges_cluster_defaults_and_node_overrides():
    inv = parse_inventory(GOOD, "inv.yaml")
    ct13, ct14, here = inv.nodes
    assert (ct13.port, ct13.user, ct13.identity_file) == (2222, "root", "~/.ssh/k3")
    assert ct13.settings.stepping == "B0" and ct14.settings.stepping == "A0"
    assert ct14.port == 22 and ct14.address == "10.210.11.125"
    assert ct13.address == "10.210.11.14"  # §4: the SSH address is the data-plane address
    assert ct13.settings.tools["amd_smi"] == "/usr/bin/amd-smi"
    assert ct13.settings.tools["rocm_smi"] == "/opt/rocm/bin/rocm-smi"  # documented default kept
    assert ct13.settings.cluster == ct14.settings.cluster == "heliosm-c"
    assert here.transport == "local" and here.host is None
    assert inv.ssh.connect_timeout_s == 5 and inv.ssh.command_timeout_s == 30.0


def test_errors_name_line_and_key_and_suggest_a_fix():
    bad = "cluster:\n  stepping: C0\n  contaner: x\ndefaults: {port: abc}\nnodes:\n  - {name: a, host: h}\n"
    got = problems(bad)
    assert "inv.yaml:2: cluster.stepping: expected A0 or B0" in got[0]
    assert got[1] == "inv.yaml:3: cluster.contaner: unknown key (did you mean 'container'?)"
    assert got[2].startswith("inv.yaml:4: defaults.port: expected an integer between 1 and 65535, got 'abc'")


def test_duplicate_and_missing_names_and_hosts():
    got = problems("nodes:\n  - {name: a, host: h}\n  - {name: a}\n  - {host: q}\n")
    assert any(p.startswith("inv.yaml:4: nodes[2].name: missing") for p in got)
    assert any("inv.yaml:3: nodes: a: duplicate node name (first at line 2)" == p for p in got)
    assert any(p.startswith("inv.yaml:3: nodes: a.host: missing") for p in got)


def test_yaml_syntax_error_has_line_and_column():
    (only,) = problems("nodes: [a, b\n")
    assert only.startswith("inv.yaml:2:1: YAML syntax error")


@pytest.mark.parametrize("text,needle", [
    ("", "inventory is empty"),
    ("cluster: {name: x}\n", "nodes: missing"),
    ("nodes: []\n", "expected a non-empty list"),
    ("- a\n- b\n", "expected a mapping"),
])
def test_structurally_wrong_files(text, needle):
    assert needle in "\n".join(problems(text))


def test_check_parameters_are_validated_against_the_registry():
    reg = Registry()
    check("rack-free", title="t", params={"window_min": 30}, registry=reg)(lambda r, c: None)
    check("fabric-domain", title="t", params={"expected_vpod_id": None}, registry=reg)(lambda r, c: None)
    text = ("cluster:\n  checks:\n    rack-free: {window_min: soon}\n    rackfree: {}\nnodes:\n"
            "  - {name: a, host: h, checks: {rack-free: {window_min: 5}}}\n")
    got = problems(text, reg)
    assert "inv.yaml:3: cluster.checks.rack-free.window_min: expected a number like the default 30" in got[0]
    assert "inv.yaml:4: cluster.checks.rackfree: no such check (did you mean 'rack-free'?)" == got[1]
    fixed = text.replace("soon", "10").replace("    rackfree: {}\n", "    fabric-domain: {expected_vpod_id: 2}\n")
    inv = parse_inventory(fixed, "inv.yaml", reg)
    assert inv.cluster.param(reg.checks["fabric-domain"], "expected_vpod_id") == 2
    chk = reg.checks["rack-free"]
    assert inv.cluster.param(chk, "window_min") == 10
    assert inv.nodes[0].settings.param(chk, "window_min") == 5


def test_unreadable_file_is_an_inventory_error(tmp_path):
    with pytest.raises(InventoryError, match="cannot read inventory"):
        load_inventory(str(tmp_path / "missing.yaml"))


def test_the_shipped_example_inventory_is_valid():
    from pathlib import Path

    from k3doctor.registry import REGISTRY, load_checks

    load_checks()
    inv = load_inventory(str(Path(__file__).resolve().parents[2] / "inventory.yaml"), REGISTRY)
    assert [n.name for n in inv.nodes] == ["ct13", "ct14", "ct16", "ct17"]
    assert {n.settings.container for n in inv.nodes} == {"k3ep16"}


def test_docker_socket_is_an_absolute_one_line_path_on_the_nodes():
    assert parse_inventory(GOOD, "inv.yaml").ssh.docker_socket is None  # the engine's default socket
    inv = parse_inventory(GOOD.replace("ssh: {", "ssh: {docker_socket: /run/user/1000/docker.sock, "), "inv.yaml")
    assert inv.ssh.docker_socket == "/run/user/1000/docker.sock"
    for bad in ("docker.sock", "'/run/docker.sock '", "/" + "x" * 120):
        (got,) = problems(GOOD.replace("ssh: {", f"ssh: {{docker_socket: {bad}, "))
        assert got.startswith("inv.yaml:6: ssh.docker_socket: expected an absolute path of a unix socket"), got
