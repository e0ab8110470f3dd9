"""Inventories people already have (issue 11 §5): ClusterShell node sets, and Ansible inventories read by
the real ``ansible-inventory --list`` (ansible-core from the test extra)."""
import stat
from pathlib import Path

import psutil
import pytest

from k3doctor.inventory import ansible
from k3doctor.inventory.load import from_ansible, load_nodes, parse_inventory
from k3doctor.inventory.nodesets import NodeSetError, expand
from k3doctor.inventory.types import InventoryError, NodeSourceError
from k3doctor.registry import REGISTRY

INI = """\
[gpu]
ct13 ansible_host=10.0.0.13
ct14 ansible_host=10.0.0.14 ansible_user=admin ansible_ssh_private_key_file=~/.ssh/k3
ct16 ansible_host=10.0.0.16 ansible_port=2200

[head]
login1 ansible_connection=local

[rack:children]
gpu

[gpu:vars]
ansible_port=2222
"""
YML = """\
all:
  children:
    gpu:
      hosts:
        ct13: {ansible_host: 10.0.0.13, ansible_port: 2222}
        ct14: {ansible_host: 10.0.0.14}
"""
needs_ansible = pytest.mark.skipif(ansible.find_ansible_inventory() is None,
                                   reason="ansible-inventory not on PATH (pip install '.[test]')")


@pytest.fixture(scope="module")
def ini(tmp_path_factory):
    path = tmp_path_factory.mktemp("ansible") / "hosts.ini"
    path.write_text(INI)
    return str(path)


@pytest.fixture(scope="module")
def read_ini(ini):
    """The ini inventory as the real ansible-inventory reads it (once: it takes seconds on a loaded box)."""
    return ansible.read(ini)


def logins(inv):
    return [(n.name, n.host, n.port, n.user, n.identity_file, n.transport) for n in inv.nodes]


@pytest.mark.parametrize("pattern,names", [
    ("ct[13-14,16-17]", ["ct13", "ct14", "ct16", "ct17"]),
    ("ct[13-17]!ct15", ["ct13", "ct14", "ct16", "ct17"]),
    ("ct13,ct14", ["ct13", "ct14"]),
    ("node[01-03]", ["node01", "node02", "node03"]),
])
def test_a_node_set_expands_as_clustershell_reads_it(pattern, names):
    assert expand(pattern) == names


@pytest.mark.parametrize("pattern,needle", [
    ("ct[13-", "missing bracket"),
    ("ct[3-1]", "bad range"),
    ("ct[13-14]!ct[13-14]", "names no node"),
    ("@gpu", "groups come from an Ansible inventory"),
    ("", "empty node set"),
])
def test_a_bad_node_set_is_one_line(pattern, needle):
    with pytest.raises(NodeSetError, match=needle):
        expand(pattern)
    if "@" not in pattern:  # a group is looked up in Ansible's default inventory first (the e2e test does)
        with pytest.raises(NodeSourceError, match=needle) as info:
            load_nodes(pattern or " ")
        assert len(str(info.value).splitlines()) == 1


def test_a_bare_node_set_is_names_and_ssh_hosts_with_defaults():
    inv = load_nodes("ct[13-14,16-17]", registry=REGISTRY)
    assert logins(inv) == [(n, n, None, None, None, "ssh") for n in ("ct13", "ct14", "ct16", "ct17")]
    assert inv.ssh.ssh_config == "~/.ssh/config" and inv.cluster.container == "k3ep16"
    assert [n.name for n in parse_inventory(inv.text).nodes] == ["ct13", "ct14", "ct16", "ct17"]  # judge re-reads it


def test_inventory_hosts_entries_take_a_node_set_and_share_their_settings():
    inv = parse_inventory("defaults: {user: ops}\nnodes:\n  - hosts: ct[13-14]\n    port: 2222\n    stepping: A0\n"
                          "  - {name: ct16, host: 10.0.0.16}\n", "inv.yaml")
    assert [(n.name, n.host, n.port, n.user, n.settings.stepping, n.line) for n in inv.nodes] == [
        ("ct13", "ct13", 2222, "ops", "A0", 3), ("ct14", "ct14", 2222, "ops", "A0", 3),
        ("ct16", "10.0.0.16", None, "ops", None, 6)]


@pytest.mark.parametrize("text,needle", [
    ("nodes:\n  - hosts: ct[13-\n", "inv.yaml:2: nodes[0].hosts: bad node set"),
    ("nodes:\n  - {hosts: 'ct[13-14]', name: x}\n", "inv.yaml:2: nodes[0].name: unknown key"),
    ("nodes:\n  - hosts: ct[13-14]\n  - {name: ct14, host: h}\n", "duplicate node name (first at line 2)"),
    ("nodes:\n  - hosts: '-o[1-2]'\n", "is not a node name"),
])
def test_bad_hosts_entries_name_file_and_line(text, needle):
    with pytest.raises(InventoryError, match=None) as info:
        parse_inventory(text, "inv.yaml")
    assert needle in str(info.value)


@needs_ansible
def test_an_ansible_ini_inventory_is_read_by_ansible_inventory(read_ini):
    inv = from_ansible(read_ini, None, REGISTRY)
    assert sorted(logins(inv)) == [
        ("ct13", "10.0.0.13", 2222, None, None, "ssh"),  # the port from [gpu:vars]
        ("ct14", "10.0.0.14", 2222, "admin", "~/.ssh/k3", "ssh"),
        ("ct16", "10.0.0.16", 2200, None, None, "ssh"),  # a host's own variable wins
        ("login1", None, None, None, None, "local"),
    ]
    assert "read by ansible-inventory" in inv.path
    assert logins(parse_inventory(inv.text)) == logins(inv)  # what --save-readings keeps, for judge


@needs_ansible
def test_groups_and_node_sets_choose_among_the_ansible_hosts(read_ini):
    assert [n.name for n in from_ansible(read_ini, "@rack").nodes] == ["ct13", "ct14", "ct16"]  # via children
    assert [n.name for n in from_ansible(read_ini, "@gpu!ct14,login1").nodes] == ["ct13", "ct16", "login1"]
    assert [n.name for n in from_ansible(read_ini, "ct[13-14]").nodes] == ["ct13", "ct14"]


@needs_ansible
def test_an_ansible_yaml_inventory_is_detected_and_read(tmp_path):
    yml = tmp_path / "inventory.yml"
    yml.write_text(YML)
    assert logins(load_nodes(str(yml))) == [("ct13", "10.0.0.13", 2222, None, None, "ssh"),
                                           ("ct14", "10.0.0.14", None, None, None, "ssh")]


@needs_ansible
@pytest.mark.parametrize("spec,needle", [
    ("@nope", "no group 'nope' in the Ansible inventory (groups: all, gpu, head, rack"),
    ("ct[13-15]", "ct15 is not a host of"),
])
def test_selecting_what_the_ansible_inventory_lacks_is_one_line(read_ini, spec, needle):
    with pytest.raises((NodeSourceError, NodeSetError)) as info:
        from_ansible(read_ini, spec)
    assert needle in str(info.value) and len(str(info.value).splitlines()) == 1


def test_an_inventory_file_and_an_ansible_inventory_together_are_refused(ini):
    with pytest.raises(NodeSourceError, match="give one inventory"):
        load_nodes("inventory.yaml", ini)


@needs_ansible
def test_an_ansible_inventory_that_cannot_be_parsed_fails_instead_of_reading_as_no_hosts(tmp_path):
    broken = tmp_path / "broken.ini"
    broken.write_text("[gpu\nct13 ansible_host=x\n")
    with pytest.raises(NodeSourceError, match=r"ansible-inventory -i .*broken.ini failed \(exit \d+\): "):
        load_nodes(str(broken))


def test_a_missing_ansible_inventory_binary_is_one_line(ini, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ansible.sys, "executable", str(tmp_path / "python3"))
    with pytest.raises(NodeSourceError, match="ansible-inventory is not on PATH"):
        load_nodes(ini)


@needs_ansible
def test_a_hanging_inventory_script_is_killed_at_its_deadline_with_what_it_started(tmp_path):
    script = tmp_path / "inventory.sh"  # an executable inventory: ansible-inventory runs it with --list
    script.write_text("#!/bin/sh\nexec sleep 3017\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(ansible.AnsibleError, match="did not finish within 20 s"):
        ansible.read(str(script), timeout_s=20)
    left = [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [])[-1:] == ["3017"]]
    assert psutil.wait_procs(left, timeout=5)[1] == []


def test_templated_login_values_are_refused_not_used_as_written():
    doc = {"_meta": {"hostvars": {"ct13": {"ansible_host": "{{ lookup('env', 'H') }}"}}},
           "all": {"children": ["g"]}, "g": {"hosts": ["ct13"]}}
    with pytest.raises(ansible.AnsibleError, match="is a template"):
        ansible.parse_list(doc, "inv")


def test_k3doctor_yaml_is_never_taken_for_ansible(tmp_path):
    path = tmp_path / "inventory.yaml"
    path.write_text("nodes:\n  - {name: a, host: h, prot: 22}\n")
    with pytest.raises(InventoryError, match="inventory.yaml:2: nodes\\[0\\].prot: unknown key"):
        load_nodes(str(path))
    example = Path(__file__).resolve().parents[2] / "inventory.yaml"
    assert [n.name for n in load_nodes(str(example), registry=REGISTRY).nodes]
