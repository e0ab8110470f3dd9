"""First contact (issue 33): a node that cannot be read is one cause, said once, in every format.

One light rack (real sshd per node) with every way a node is unreadable on a first day, each on its own node:
two nodes whose identity file is missing (one group), an unknown host key, a refused key, a login whose sudo
wants a password, a stopped sshd; beside them a healthy node and one without python3 (degraded, not unread: the
shell takes its readings). Each format is read by its real consumer (junitparser, prometheus_client, Chromium).
"""
import re
import subprocess
import tempfile
import types
from pathlib import Path

import junitparser
import pytest
import yaml
from k3rig.light import LightRack
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import light_nodes_unavailable
from tests import chromium
from tests.e2e.cli import k3, k3json
from tests.e2e.faults import sudo_user_wanting_password, without_python3

pytestmark = pytest.mark.e2e

CHECKS = "shm-clean,amdgpu-driver,hbm-uniform"  # two node checks, one cluster check
CAUSES = {1: "NODE-IDENTITY-FILE", 2: "NODE-IDENTITY-FILE", 3: "NODE-HOSTKEY-UNKNOWN", 4: "NODE-AUTH-REFUSED",
          5: "NODE-SUDO-PASSWORD", 7: "NODE-REFUSED"}  # by node index; 0 healthy, 6 without python3


@pytest.fixture(scope="module")
def first_day():
    """(inventory path, node names, the rack) with each fault in place for the whole module."""
    reason = light_nodes_unavailable()
    if reason:
        pytest.skip(reason)
    workdir = Path(tempfile.mkdtemp(prefix="k3first-", dir="/tmp"))
    workdir.chmod(0o711)  # the sudo case's non-root login must reach the rack's authorized_keys
    with LightRack(workdir / "rack", nodes=8) as rack:
        (workdir / "rack").chmod(0o711)
        names = [name for name, _, _ in rack.hosts]
        node = {n: types.SimpleNamespace(ns_pid=rack.namespace_pid(n), dir=workdir / n) for n in names}
        for n in node.values():
            n.dir.mkdir()
        inv = yaml.safe_load(rack.inventory_path.read_text())
        entries = {e["name"]: e for e in inv["nodes"]}
        for i in (1, 2):
            entries[names[i]]["identity_file"] = str(workdir / "no-such-key")
        known = workdir / "known_hosts"  # node 3's host key is not in it
        host3 = rack.hosts[3][1]
        known.write_text("".join(line for line in rack.known_hosts.read_text().splitlines(keepends=True)
                                 if not line.startswith(f"[{host3}]:")))
        inv["ssh"].update(known_hosts=str(known), connect_timeout_s=30)  # a loaded 2-core machine: no timeouts
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", workdir / "other-key"], check=True)
        entries[names[4]]["identity_file"] = str(workdir / "other-key")
        rack.stop_sshd(names[7])
        path = workdir / "inventory.yaml"
        with sudo_user_wanting_password(node[names[5]]) as user, without_python3(node[names[6]]):
            entries[names[5]].update(user=user, sudo=True)
            path.write_text(yaml.safe_dump(inv))
            yield path, names, rack


def test_each_unread_node_is_one_line_grouped_by_cause_and_the_verdict_counts_them(first_day):
    path, names, _ = first_day
    rc, out, err = k3("check", "--nodes", path, "--only", CHECKS)
    assert rc == 2, err
    not_read = [line for line in out.splitlines() if line.startswith("NOT READ")]
    assert len(not_read) == 5, out  # 6 unread nodes, the two missing key files in one line
    assert not_read[0].startswith(f"NOT READ 2 of 8 nodes ({names[1]}, {names[2]}): identity file ")
    assert "does not exist [NODE-IDENTITY-FILE]" in not_read[0]
    for i in (3, 4, 5, 7):
        assert sum(f"1 of 8 nodes ({names[i]}): " in line and f"[{CAUSES[i]}]" in line for line in not_read) == 1
    assert "ssh-keyscan -H -p 2222" in out and "ssh-keygen -lf" in out  # the host key's fix checks its fingerprint
    assert "NOPASSWD" in out and "systemctl start ssh" in out and "ssh-copy-id" in out
    assert "1 cluster check(s) judged 2 of 8 nodes" in out
    assert not re.search(r"^ERROR .*node not checked", out, re.M)  # no result per check of an unread node
    verdict = out.strip().splitlines()[-1]
    assert verdict.startswith("INCONCLUSIVE: 2 of 8 nodes read - 2 identity file missing, 1 host key unknown, "
                              "1 authentication refused, 1 sudo wants a password, 1 connection refused"), verdict
    header = next(line for line in out.splitlines() if line.startswith("check"))
    assert header.split()[1:] == [names[0], names[6], "cluster"]  # the table: the nodes that were read
    rc, verbose, _ = k3("check", "--nodes", path, "--only", CHECKS, "-v")
    assert "not run on them: amdgpu-driver, hbm-uniform, shm-clean" in verbose, verbose
    assert f"  {names[7]}: connection refused by " in verbose


def test_machine_formats_keep_one_entry_per_check_and_node_with_the_cause(first_day, tmp_path):
    path, names, _ = first_day
    rc, doc = k3json("check", "--nodes", path, "--only", CHECKS)
    assert rc == 2
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert {n: nodes[n].get("cause") for n in names} == {n: CAUSES.get(i) for i, n in enumerate(names)}
    assert all(nodes[names[i]]["fix"] and not nodes[names[i]]["reachable"] for i in CAUSES)
    assert nodes[names[6]]["reachable"]  # without python3 the shell read it
    assert {r["status"] for r in doc["results"] if r["node"] == names[6] and r["check"] == "shm-clean"} == {"PASS"}
    for i, cause in CAUSES.items():
        mine = [r for r in doc["results"] if r["node"] == names[i]]
        assert sorted((r["check"], r["status"], r["remediation"]) for r in mine) == sorted(
            (c, "ERROR", cause) for c in CHECKS.split(","))

    k3("check", "--nodes", path, "--only", CHECKS, "--format", "junit", "-o", tmp_path / "r.xml")
    xml = junitparser.JUnitXml.fromfile(str(tmp_path / "r.xml"))
    cases = {(c.classname, c.name): c for suite in (list(xml) if isinstance(xml, junitparser.JUnitXml) else [xml])
             for c in suite}
    for i, cause in CAUSES.items():
        for check in CHECKS.split(","):
            [res] = cases[(f"k3doctor.{check}", names[i])].result
            assert isinstance(res, junitparser.Error) and f"[{cause}]" in res.text and "fix: " in res.text

    k3("check", "--nodes", path, "--only", CHECKS, "--format", "prom", "-o", tmp_path / "r.prom")
    families = {f.name: f for f in text_string_to_metric_families((tmp_path / "r.prom").read_text())}
    status = {(s.labels["check"], s.labels["node"]): s.value for s in families["k3doctor_check_status"].samples}
    assert all(status[(c, names[i])] == 3 for i in CAUSES for c in CHECKS.split(","))
    up = {s.labels["node"]: s.value for s in families["k3doctor_node_reachable"].samples}
    assert up == {n: float(i not in CAUSES) for i, n in enumerate(names)}
    unread = {s.labels["node"]: s.labels["cause"] for s in families["k3doctor_node_unread"].samples}
    assert unread == {names[i]: cause for i, cause in CAUSES.items()}

    rc, _, _ = k3("check", "--nodes", path, "--only", CHECKS, "--format", "nagios")
    assert rc == 3  # UNKNOWN
    k3("check", "--nodes", path, "--only", CHECKS, "--format", "html", "-o", tmp_path / "r.html")
    _, dom = chromium.render(tmp_path / "r.html", tmp_path)
    groups = dom.find_all("li", cls="not-read")
    assert [g.attrs["data-cause"] for g in groups] == [
        "NODE-IDENTITY-FILE", "NODE-HOSTKEY-UNKNOWN", "NODE-AUTH-REFUSED", "NODE-SUDO-PASSWORD", "NODE-REFUSED"]
    assert groups[0].attrs["data-nodes"] == f"{names[1]} {names[2]}"
    assert "2 of 8 nodes read" in dom.first(id="cause").text


def test_connect_only_says_per_node_what_works(first_day):
    path, names, _ = first_day
    rc, out, err = k3("check", "--nodes", path, "--connect-only", "--format", "json")
    assert rc == 2, err
    import json

    doc = {n["node"]: n for n in json.loads(out)["nodes"]}
    steps = {n: [doc[n]["steps"][s] for s in ("tcp", "host key", "auth", "sudo", "read")] for n in names}
    assert steps[names[0]] == ["ok", "ok", "ok", "n/a", "ok"]
    assert steps[names[1]] == ["-", "-", "FAILED", "n/a", "-"]  # no key file: nothing was tried
    assert steps[names[3]] == ["ok", "FAILED", "-", "n/a", "-"]
    assert steps[names[4]] == ["ok", "ok", "FAILED", "n/a", "-"]
    assert steps[names[5]] == ["ok", "ok", "ok", "FAILED", "-"]
    assert steps[names[7]] == ["FAILED", "-", "-", "n/a", "-"]
    assert doc[names[0]]["found"] == {"python3": "/usr/bin/python3", "amd-smi": "/opt/rocm/bin/amd-smi",
                                      "rocm-smi": "/opt/rocm/bin/rocm-smi"}
    assert doc[names[6]]["found"]["python3"] is None and doc[names[6]]["found"]["amd-smi"]
    assert {doc[names[i]]["cause"] for i in CAUSES} == set(CAUSES.values())
    rc, table, _ = k3("check", "--nodes", path, "--connect-only")
    assert f"no python3 on {names[6]}" in table and table.strip().endswith("2 of 8 nodes ready for `k3doctor check` "
                                                                            "- fix the above first")


def test_a_fresh_clone_with_the_shipped_inventory_prints_a_few_lines(tmp_path):
    inventory = Path(__file__).parents[2] / "inventory.yaml"
    rc, out, err = k3("check", "--nodes", inventory, env={"HOME": str(tmp_path)})  # no ~/.ssh/id_ed25519 here
    lines = out.strip().splitlines()
    assert rc == 2 and len(lines) <= 6, out
    assert lines[0].startswith("NOT READ 4 of 4 nodes (ct13, ct14, ct16, ct17): identity file ")
    assert lines[-1].startswith("INCONCLUSIVE: 0 of 4 nodes read - identity file missing")
