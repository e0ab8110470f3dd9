"""`k3doctor node --json` carried by a real Ansible (ansible-core's own fan-out over the rig's sshd), joined by
`k3doctor merge`: the merged report is the direct `k3doctor check` report of the same rack, healthy and faulty;
an engine's failures become that node's ERROR."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.cli import k3, k3json
from tests.e2e.node_install import NODE_PYTHON, install_for_nodes

pytestmark = pytest.mark.e2e

ANSIBLE = Path(sys.executable).with_name("ansible")
HEADER = re.compile(r"^(\S+) \| [A-Z]+ \| rc=-?\d+ >>$", re.M)
SAME = ("check", "node", "gpu", "status", "message", "remediation", "evidence")


@pytest.fixture(scope="module")
def engine(rig, tmp_path_factory):
    """(run ansible ad-hoc with ARGS -> (rc, stdout), the node-side k3doctor command) for the rig."""
    if not ANSIBLE.exists():
        pytest.skip("ansible-core is not installed (pip install -e '.[test]')")
    work = tmp_path_factory.mktemp("ansible")
    user_base = install_for_nodes(work / "node-site")
    hosts = work / "hosts.ini"
    hosts.write_text("[rig]\n" + "".join(
        f"{n.name} ansible_host={n.host} ansible_port={n.port} ansible_user=root\n" for n in rig.nodes) +
        "[all:vars]\n"
        f"ansible_ssh_private_key_file={rig.identity_file}\n"
        f"ansible_ssh_common_args='-o UserKnownHostsFile={rig.known_hosts} -o StrictHostKeyChecking=yes'\n"
        f"ansible_python_interpreter={NODE_PYTHON}\n")
    env = {**os.environ, "ANSIBLE_HOME": str(work / "home"), "ANSIBLE_LOCAL_TEMP": str(work / "local"),
           "ANSIBLE_REMOTE_TMP": str(work / "remote"), "ANSIBLE_SSH_ARGS": "-o ControlMaster=no",
           "ANSIBLE_PIPELINING": "true", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORKS": "4"}
    node_cmd = (f"env {user_base} {NODE_PYTHON} -m k3doctor.cli node --json --nodes {rig.inventory_path} "
                "--name {{ inventory_hostname }}")

    def ansible(command: str):
        proc = subprocess.run([str(ANSIBLE), "all", "-i", str(hosts), "-m", "command", "-a", command],
                              capture_output=True, text=True, timeout=240, env=env)
        return proc.returncode, proc.stdout

    yield ansible, node_cmd
    shutil.rmtree(work / "remote", ignore_errors=True)


def merged(tmp_path, out, *args):
    (tmp_path / "ansible.out").write_text(out)
    return k3json("merge", tmp_path / "ansible.out", *args)


# What moved between the two runs by itself: the clock (kernel-health says how long ago amdgpu loaded) and the
# free space of the disk the rig's Docker roots share with everything else on this machine (host-resources).
MOVING = ((re.compile(r"\(\d+s ago\)"), "(Ns ago)"), (re.compile(r"\d+(\.\d+)? GB free"), "N GB free"))
MOVING_EVIDENCE = ("available_bytes", "used_pct")


def steady(value):
    if isinstance(value, str):
        for pattern, same in MOVING:
            value = pattern.sub(same, value)
        return value
    if isinstance(value, dict):
        return {k: None if k in MOVING_EVIDENCE else steady(v) for k, v in value.items()}
    if isinstance(value, list):
        return [steady(v) for v in value]
    return value


def rows(doc):
    """Every result's check, node, GPU, status, message, remediation and evidence, less what moved by itself."""
    return [{k: steady(r[k]) for k in SAME} for r in doc["results"]]


def hosts_answered(out):
    return sorted(HEADER.findall(out))


@pytest.mark.parametrize("scenario", ["healthy", "mixed-hbm"])
def test_merged_ansible_results_are_the_direct_check_report(rig, engine, tmp_path, scenario):
    """mixed-hbm: ct16's 288 GiB boards are a node finding (gpu-inventory, judged on ct16) and a cluster one
    (hbm-uniform, judged in merge across the nodes' readings); both as `check` reports them."""
    ansible, node_cmd = engine
    rig.apply(scenario)
    rc_direct, direct = k3json("check", "--nodes", rig.inventory_path)
    rc_engine, out = ansible(node_cmd)
    assert hosts_answered(out) == ["ct13", "ct14", "ct16", "ct17"] and out.count('{"schema":"k3doctor.node/1"') == 4
    rc_merged, report = merged(tmp_path, out, "--nodes", rig.inventory_path)
    assert rows(report) == rows(direct)
    assert (rc_merged, report["verdict"], [n["name"] for n in report["nodes"]]) == \
        (rc_direct, direct["verdict"], [n["name"] for n in direct["nodes"]])
    if scenario == "healthy":
        assert rc_engine == 0 and rc_merged == 0 and all(r["status"] == "PASS" for r in report["results"])
    else:  # named where it is: ct16's GPUs, by the node's own judge and by the cluster judge in merge
        failed = {(r["check"], r["node"]) for r in report["results"] if r["status"] == "FAIL"}
        assert rc_merged == 1 and failed == {("gpu-inventory", "ct16"), ("hbm-uniform", "ct16")}, failed


def test_an_engine_failure_is_that_nodes_error_and_bad_inputs_are_one_line(rig, engine, tmp_path):
    """ct14 answers without a result (the engine says why); the others are merged. The same results twice, or a
    document cut in half with no host to own it, are bad input: one line, exit 3."""
    ansible, node_cmd = engine
    rig.apply("healthy")
    broken = node_cmd + " {{ '--only=no-such-check' if inventory_hostname == 'ct14' else '' }}"
    _, out = ansible(broken)
    rc, report = merged(tmp_path, out, "--nodes", rig.inventory_path)
    errors = {r["node"] for r in report["results"] if r["status"] == "ERROR"}
    assert rc == 2 and errors == {"ct14"}, report["results"]
    why = next(r["message"] for r in report["results"] if r["node"] == "ct14")
    assert why.startswith("node not checked: no k3doctor result (FAILED rc=3") and "no-such-check" in why
    assert all(r["status"] == "PASS" for r in report["results"] if r["node"] != "ct14")

    rc, stdout, err = k3("merge", tmp_path / "ansible.out", tmp_path / "ansible.out", "--nodes", rig.inventory_path)
    assert (rc, stdout) == (3, "") and len(err.strip().splitlines()) == 1 and "two results for ct1" in err
    doc = next(line for line in out.splitlines() if line.startswith('{"schema"'))
    json.loads(doc)  # whole as the node wrote it ...
    (tmp_path / "cut.json").write_text(doc[: len(doc) // 2] + "\n")  # ... and cut short
    rc, stdout, err = k3("merge", tmp_path / "cut.json", "--nodes", rig.inventory_path)
    assert (rc, stdout) == (3, "") and len(err.strip().splitlines()) == 1 and "garbled JSON" in err
