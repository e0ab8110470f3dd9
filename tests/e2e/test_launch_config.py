"""launch-config end to end: the real CLI over real SSH and each node's real dockerd, with our container
created with a faulty environment, run options or launch script, running ATOM rank processes or a
held port on one node (rig/k3rig/scenarios/launch-*.yaml). Each fault is caught on exactly that
node; the healthy rack (validated env and launch command) gives no finding at all.

The rack is this module's own: every scenario recreates our container, which must not disturb other
modules' racks."""
import json
import shlex
import socket
import subprocess

import pytest
import yaml

from tests.conftest import private_rack
from tests.e2e.cli import k3, k3json
from tests.e2e.faults import docker_cli_recorded

pytestmark = pytest.mark.e2e
CHECK = "launch-config"


@pytest.fixture(scope="module")
def rack(tmp_path_factory):
    yield from private_rack(tmp_path_factory, "launch-rack")


def run(rack, scenario, inventory=None, *extra):
    rack.apply(scenario)
    return k3json("check", "--nodes", inventory or rack.inventory_path, "--only", CHECK, *extra)


def findings(doc):
    return sorted((r["node"], r["status"], r["remediation"]) for r in doc["results"]
                  if r["check"] == CHECK and r["status"] != "PASS")


def messages(doc):
    return [r["message"] for r in doc["results"] if r["check"] == CHECK and r["status"] != "PASS"]


def passed_nodes(doc):
    return sorted(r["node"] for r in doc["results"] if r["check"] == CHECK and r["status"] == "PASS")


def test_healthy_rack_has_no_finding_and_is_ready_to_launch(rack):
    rack.apply("healthy")
    rc, doc = k3json("check", "--nodes", rack.inventory_path)  # the whole fast tier
    assert (rc, doc["verdict"]) == (0, "READY TO LAUNCH")
    assert [r for r in doc["results"] if r["status"] != "PASS"] == []
    mine = [r for r in doc["results"] if r["check"] == CHECK]
    assert sorted(r["node"] for r in mine) == sorted(n.name for n in rack.nodes)
    assert all("launch command as §17" in r["message"] and "launch ports free" in r["message"] for r in mine)


@pytest.mark.parametrize("scenario, expected, text", [
    # launch-env-mnnvl-missing: since §29 (0.2) an unset NCCL_MNNVL_ENABLE is env-versions'
    # (tests/e2e/test_env_versions.py)
    ("launch-env-deprecated", [("ct16", "FAIL", "LAUNCH-ENV-INERT"), ("ct16", "WARN", "LAUNCH-ENV-INERT")],
     "MEGA_WIRE=fp8 differs from MEGA_DISPATCH_WIRE=fp4"),
    ("launch-env-inert-dispatch", [("ct17", "WARN", "LAUNCH-ENV-INERT")], "MEGA_DISPATCH=flydsl is inert"),
    ("launch-env-pair-broken", [("ct13", "FAIL", "LAUNCH-ENV-PAIR")], "assert not ca_comm.disabled"),
    ("launch-env-log-level-unset", [("ct14", "WARN", "LAUNCH-AITER-LOG")], "AITER_LOG_LEVEL is unset"),
    ("launch-ifname-wrong", [("ct17", "FAIL", "LAUNCH-IFNAME")], "NCCL_SOCKET_IFNAME=enp1s0f1: no such interface"),
    ("launch-run-options", [("ct14", "FAIL", "LAUNCH-RUN-OPTIONS")] * 3, "runs without --ipc=host"),
    ("launch-cmd-per-node", [("ct16", "FAIL", "LAUNCH-ARGS"), ("ct16", "WARN", "LAUNCH-ARGS")],
     "--max-model-len 65536 is set"),
    ("launch-cmd-cross-node", [("ct14", "FAIL", "LAUNCH-ARGS")] * 2 + [("ct17", "FAIL", "LAUNCH-ARGS")],
     "--data-parallel-rank is 8, node 1 in node order needs 4"),
    ("launch-ports-busy", [("ct13", "FAIL", "LAUNCH-PORT-BUSY"), ("ct16", "FAIL", "LAUNCH-PORT-BUSY")],
     "port 29500 (--data-parallel-master-port) is already taken"),
    ("launch-rank-env", [("ct14", "FAIL", "LAUNCH-ENV")], "ATOM::DP4TP0 (pid "),
    ("launch-env-drift", [("ct17", "WARN", "LAUNCH-DRIFT")] * 2, "AITER_LOG_LEVEL is 'ERROR' here, 'WARNING' on"),
])
def test_fault_is_caught_on_exactly_the_faulty_node(rack, scenario, expected, text):
    rc, doc = run(rack, scenario)
    assert findings(doc) == sorted(expected), messages(doc)
    assert any(text in m for m in messages(doc)), messages(doc)
    faulty = {node for node, _, _ in expected}
    assert passed_nodes(doc) == sorted(n.name for n in rack.nodes if n.name not in faulty)
    assert rc == (1 if any(status == "FAIL" for _, status, _ in expected) else 0)


def test_a_prefix_selecting_more_nics_on_one_node_is_named_against_its_peers(rack, tmp_path):
    """§29: the nodes share this host's interfaces; ct17's NCCL_SOCKET_IFNAME `lo,<another interface>` selects
    two or more where the peers' `lo` selects one (RCCL would only log mixed net device counts at INFO)."""
    others = sorted(name for _, name in socket.if_nameindex() if name != "lo")
    if not others:
        pytest.skip("this host has no interface besides lo")
    scenario = tmp_path / "nccl-prefix-count.yaml"
    scenario.write_text(yaml.safe_dump({"description": "ct17 NCCL prefix selects more NICs than its peers",
                                        "nodes": {4: {"container_env": {"NCCL_SOCKET_IFNAME": f"lo,{others[0]}"}}}}))
    rc, doc = run(rack, scenario)
    assert findings(doc) == [("ct17", "WARN", "LAUNCH-IFNAME")], messages(doc)
    [message] = messages(doc)
    assert "against its peers: selects" in message and "1 on each of the other 3 nodes (ct13, ct14, ct16)" in message
    assert passed_nodes(doc) == ["ct13", "ct14", "ct16"]


def test_a_declared_recipe_keeps_the_healthy_rack_quiet_and_names_a_launch_fault_once_in_its_words(rack, tmp_path):
    """Issue 30 on gfx1250: with cluster.recipe declared, launch-config judges each node against the recipe point
    through the judgement `recipe diff` prints. The rig's healthy launch is Config A (§16, §17): the whole gate is
    quiet. ct16's --max-model-len and dropped --served-model-name are the recipe's rows only - the wide-EP
    LAUNCH-ARGS rows that say the same step aside."""
    inv = yaml.safe_load(rack.inventory_path.read_text())
    inv["cluster"]["recipe"] = "gfx1250-config-a"
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inv))
    rack.apply("healthy")
    rc, doc = k3json("check", "--nodes", path)
    assert (rc, doc["verdict"]) == (0, "READY TO LAUNCH"), [r for r in doc["results"] if r["status"] != "PASS"]
    assert [r for r in doc["results"] if r["status"] != "PASS"] == []
    rc, doc = run(rack, "launch-cmd-per-node", path)
    assert rc == 1 and findings(doc) == [("ct16", "FAIL", "RECIPE-DIFFERENCE"),
                                         ("ct16", "WARN", "RECIPE-SERVED-MODEL-NAME")], messages(doc)
    said = " | ".join(messages(doc))
    assert "extra --max-model-len: recipe (absent), launch 65536 - do not set" in said, said
    assert "missing --served-model-name: recipe moonshotai/Kimi-K3, launch (absent)" in said, said


def test_live_rank_environment_names_every_rank_and_the_container_is_not_blamed(rack):
    rc, doc = run(rack, "launch-rank-env")
    [message] = messages(doc)
    assert message.startswith("rank ATOM::DP4TP0 (pid ") and "ATOM::DP7TP0 (pid " in message
    assert "container k3ep16" not in message


def test_a0_translation_trio_on_the_node_declared_a0(rack, tmp_path):
    inv = yaml.safe_load(rack.inventory_path.read_text())
    next(n for n in inv["nodes"] if n["name"] == "ct16")["stepping"] = "A0"
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inv))
    rc, doc = run(rack, "launch-a0-trio", path)
    assert rc == 1 and findings(doc) == [("ct16", "FAIL", "LAUNCH-ENV-INERT"), ("ct16", "FAIL", "ROCJITSU-ENV"),
                                         ("ct16", "FAIL", "ROCJITSU-ENV")]
    text = " ".join(messages(doc))
    assert "points at the translator: silently ignored" in text and "must start with /app/rjprefix/lib" in text
    assert "HOTSWAP=0 on A0 silicon" in text


def test_secret_values_never_reach_the_report_or_the_saved_readings(rack, tmp_path):
    """HF_TOKEN in the container env, exported by the launch script and in the ranks' live env, and an
    --api-key argument: only names reach the JSON report, the table and the saved readings."""
    saved = tmp_path / "state.json"
    rc, doc = run(rack, "launch-secrets", None, "--save-readings", saved, "--keep-identifiers")  # ct13 by name
    report = json.dumps(doc)
    assert "k3rigSECRET" not in report and "k3rigSECRET" not in saved.read_text()
    assert "HF_TOKEN is set (value not read: no rule names it) here" in report  # the name is there
    assert "--api-key <redacted>" in report
    state = json.loads(saved.read_text())
    kept = [e["reading"] for e in state["nodes"]["ct13"] if e["spec"]["kind"] == "ContainerInspect"]
    assert kept and kept[0]["record"]["env"]["HF_TOKEN"] is None and kept[0]["record"]["env"]["NCCL_IB_DISABLE"]
    rc_table, out, err = k3("check", "--nodes", rack.inventory_path, "--only", CHECK, "-v")
    assert "k3rigSECRET" not in out + err
    rc_judge, again, _ = k3("judge", saved, "--format", "json")
    assert findings(json.loads(again)) == findings(doc) and "k3rigSECRET" not in again


CLI_FACTS = {"State.Pid": "docker inspect -f '{{.State.Pid}}' k3ep16",  # how the readings got them before
             "DockerRootDir": "docker info --format '{{.DockerRootDir}}'"}


def test_engine_facts_start_no_docker_cli_on_the_node_and_read_what_the_cli_would(rack, tmp_path):
    """launch-config's ranks and host-resources' Docker root need one engine fact each (the container's
    PID, DockerRootDir): it comes from the Docker API, so no `docker` CLI starts on the node for them (a
    logging wrapper around ct14's CLI sees only the API channel's own `docker system dial-stdio`, if
    any), and each reading is what the same script reads given the fact by the CLI, the old way."""
    rack.apply("launch-rank-env")  # ct14 runs ATOM ranks
    ct14, saved = rack.nodes[1], tmp_path / "state.json"
    with docker_cli_recorded(ct14) as starts:
        rc, doc = k3json("check", "--nodes", rack.inventory_path, "--only", f"{CHECK},host-resources",
                         "--save-readings", saved, "--keep-identifiers")
        during_run = starts()
        facts = {e["spec"]["fact"]: e for e in json.loads(saved.read_text())["nodes"]["ct14"]
                 if e["spec"]["kind"] == "EngineFactCommand"}
        old_way = {fact: ssh(rack, ct14, f'{shlex.join(e["spec"]["argv"])} "$({CLI_FACTS[fact]})"')
                   for fact, e in facts.items()}
        after_run = starts()[len(during_run):]
    assert set(during_run) <= {"system dial-stdio"}, during_run
    assert sorted(after_run) == ["info --format {{.DockerRootDir}}", "inspect -f {{.State.Pid}} k3ep16"]  # it sees
    assert findings(doc) == [("ct14", "FAIL", "LAUNCH-ENV")] and rc == 1  # as test_fault_is_caught_... says
    assert not [r for r in doc["results"] if r["check"] == "host-resources" and r["status"] != "PASS"]
    ranks, root = (facts[f]["reading"] for f in ("State.Pid", "DockerRootDir"))
    assert (ranks["rc"], ranks["stdout"]) == (old_way["State.Pid"].returncode, old_way["State.Pid"].stdout)
    assert ranks["stdout"].count("@rank ") == 4
    # stat -f: file system id, block size, blocks and path alike (free blocks move as the box writes)
    fields = (root["stdout"].split()[:3], root["stdout"].split(" ", 5)[5])
    assert fields == (old_way["DockerRootDir"].stdout.split()[:3], old_way["DockerRootDir"].stdout.split(" ", 5)[5])
    assert fields[1].strip() == str(ct14.dir / "docker" / "data")
    assert any(f"Docker root {ct14.dir / 'docker' / 'data'}" in r["message"] for r in doc["results"]
               if r["check"] == "host-resources" and r["node"] == "ct14")


def ssh(rack, node, command):
    return subprocess.run(["ssh", "-i", str(rack.identity_file), "-o", f"UserKnownHostsFile={rack.known_hosts}",
                           "-o", "BatchMode=yes", "-p", str(node.port), f"root@{node.host}", command],
                          capture_output=True, text=True, timeout=60)
