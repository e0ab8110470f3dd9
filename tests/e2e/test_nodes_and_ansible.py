"""Inventories people already have (issue 11 §5), through the real CLI against the rig: a bare ClusterShell
node set whose logins come from ~/.ssh/config, and an Ansible inventory read by the real
``ansible-inventory`` (groups, ansible_host / ansible_port / ansible_user / ansible_ssh_private_key_file)."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e


def k3(home, *args, timeout=240):
    proc = subprocess.run([sys.executable, "-m", "k3doctor.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "HOME": str(home)})
    return proc.returncode, proc.stdout, proc.stderr


def passed(out):
    doc = json.loads(out)
    return doc["verdict"], sorted((r["node"], r["status"]) for r in doc["results"])


@pytest.fixture
def home(rig, tmp_path):
    """A HOME with the rig's host keys as ~/.ssh/known_hosts (OpenSSH's default file) and nothing else."""
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh/known_hosts").write_text(rig.known_hosts.read_text())
    return tmp_path


def test_a_bare_node_set_takes_its_logins_from_the_ssh_config(rig, home):
    rig.apply("healthy")
    hosts = "".join(f"Host {n.name}\n  HostName {n.host}\n" for n in rig.nodes)
    (home / ".ssh/config").write_text(hosts + f"Host ct*\n  Port {rig.nodes[0].port}\n  User root\n"
                                      f"  IdentityFile {rig.identity_file}\n")
    rc, out, err = k3(home, "check", "--nodes", "ct[13-14,16-17]", "--only", "amdgpu-driver", "--format", "json")
    assert rc == 0, err
    assert passed(out) == ("READY TO LAUNCH", [(n, "PASS") for n in ("ct13", "ct14", "ct16", "ct17")])


def test_an_ansible_inventory_and_its_groups_name_the_nodes(rig, home):
    rig.apply("card-unconfigured")  # ct14 card1: the Ansible route reaches the right node
    lines = ["[gpu]"] + [f"{n.name} ansible_host={n.host}" for n in rig.nodes]
    lines += ["[front]", "ct13", "ct14", "[gpu:vars]", f"ansible_port={rig.nodes[0].port}", "ansible_user=root",
              f"ansible_ssh_private_key_file={rig.identity_file}"]
    ini = home / "hosts.ini"
    ini.write_text("\n".join(lines) + "\n")
    try:
        rc, out, err = k3(home, "check", "--nodes", "@front", "--ansible-inventory", ini, "--only", "ualink-state",
                          "--format", "json")
        assert rc == 1, err + out
        doc = json.loads(out)
        assert [n["name"] for n in doc["nodes"]] == ["ct13", "ct14"]
        assert [(r["node"], r["gpu"]) for r in doc["results"] if r["status"] != "PASS"] == [("ct14", 1)]
        rc, out, err = k3(home, "check", "--nodes", ini, "--only", "amdgpu-driver", "--format", "json")  # detected
        assert rc == 0, err
        assert passed(out) == ("READY TO LAUNCH", [(n, "PASS") for n in ("ct13", "ct14", "ct16", "ct17")])
    finally:
        rig.apply("healthy")


@pytest.mark.parametrize("args,needle", [
    (("--nodes", "ct[13-"), "bad node set 'ct[13-': missing bracket"),
    (("--nodes", "@nosuch", "--ansible-inventory", "INI"), "no group 'nosuch' in the Ansible inventory"),
])  # (hosts missing from it, an unparseable or hanging inventory, no ansible-inventory: the unit tests)
def test_bad_node_sources_are_one_line_exit_3(home, args, needle):
    ini = home / "hosts.ini"
    ini.write_text("[gpu]\nct13 ansible_host=127.0.0.1\n")
    rc, out, err = k3(home, "check", *[str(ini) + a[3:] if a.startswith("INI") else a for a in args])
    assert (rc, out) == (3, "") and needle in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
