"""host-resources end to end (reference §12): the real CLI over real SSH against the simulated rack.

The checkpoint is 96 sparse files per node (real sizes, no disk used), host RAM and swap come from
each node's /proc/meminfo (the simulated hardware), the Docker root is each node's real dockerd
data root, and the full disk is a real 64 MiB tmpfs mounted over one node's log directory.
"""
import pytest
import yaml

from tests.e2e.cli import k3, k3json

pytestmark = pytest.mark.e2e

CHECK = "host-resources"
NODES = ("ct13", "ct14", "ct16", "ct17")


def run(inventory, *extra):
    return k3json("check", "--nodes", inventory, "--only", CHECK, *extra)


def findings(doc):
    """(node, status, remediation) of every non-PASS result, sorted."""
    return sorted((r["node"], r["status"], r["remediation"]) for r in doc["results"] if r["status"] != "PASS")


def failures(doc):
    return [r["message"] for r in doc["results"] if r["status"] != "PASS"]


def test_healthy_rack_gives_no_finding_and_is_ready_to_launch(rig):
    rig.apply("healthy")
    rc, doc = run(rig.inventory_path)
    assert (rc, doc["verdict"], findings(doc)) == (0, "READY TO LAUNCH", [])
    assert {r["node"] for r in doc["results"]} == {*NODES, None}
    [rack] = [r for r in doc["results"] if r["node"] is None]
    assert rack["message"].startswith("checkpoint on 4 node(s): 96 shards, 1,561,306,814,873 B, as expected")
    # the node's script, the Docker API channel, and the Docker root's `stat -f` given the engine's DockerRootDir
    assert {n["name"]: n["round_trips"] for n in doc["nodes"]} == {n: 3 for n in NODES}


def test_healthy_rack_is_ready_with_every_fast_check(rig):
    rig.apply("healthy")
    rc, out, err = k3("check", "--nodes", rig.inventory_path)
    lines = out.rstrip().splitlines()
    assert rc == 0 and lines[-1].startswith("READY TO LAUNCH"), out + err
    assert any(line.split()[:1] == [CHECK] and set(line.split()[1:]) == {"PASS"} for line in lines), out


def test_missing_shard_is_named_on_its_node_only(rig):
    rig.apply("host-shard-missing")  # ct14 lacks model-00042-of-00096.safetensors
    rc, doc = run(rig.inventory_path)
    assert rc == 1 and findings(doc) == [("ct14", "FAIL", "CHECKPOINT-INCOMPLETE")]
    [message] = failures(doc)
    assert message == ("checkpoint /mnt/k3/Kimi-K3 (95 shards, 1,544,944,212,127 B) differs from the copy on ct13, "
                       "ct16, ct17: missing model-00042-of-00096.safetensors")


def test_short_shard_is_named_with_both_sizes_on_its_node_only(rig):
    rig.apply("host-shard-short")  # ct16 model-00007 cut to 8e9 B
    rc, doc = run(rig.inventory_path)
    assert rc == 1 and findings(doc) == [("ct16", "FAIL", "CHECKPOINT-INCOMPLETE")]
    [message] = failures(doc)
    assert message.endswith("model-00007-of-00096.safetensors is 8,000,000,000 B, 16,405,433,791 B on ct13, "
                            "ct14, ct17 (cut short)")
    [bad] = [r for r in doc["results"] if r["status"] == "FAIL"]
    assert bad["evidence"]["size differs (here, elsewhere)"] == {
        "model-00007-of-00096.safetensors": [8000000000, 16405433791]}


def test_low_ram_is_caught_on_its_node_only(rig):
    rig.apply("host-ram-low")  # ct17 MemTotal 235.5 GiB
    rc, doc = run(rig.inventory_path)
    assert rc == 1 and findings(doc) == [("ct17", "FAIL", "HOST-RAM-LOW")]
    assert failures(doc)[0].startswith("host RAM is 235.5 GiB (MemTotal), below min_mem_total_gib 240")


def test_missing_swap_is_caught_on_its_node_only(rig):
    rig.apply("host-no-swap")  # ct13 SwapTotal 0
    rc, doc = run(rig.inventory_path)
    assert rc == 1 and findings(doc) == [("ct13", "FAIL", "HOST-NO-SWAP")]
    assert failures(doc)[0].startswith("no swap (SwapTotal 0)")


def test_full_log_file_system_is_caught_on_its_node_only(rig):
    rig.apply("host-disk-full")  # ct14 /root/k3ep16-logs: 64 MiB tmpfs, 63 MiB used
    rc, doc = run(rig.inventory_path)
    assert rc == 1 and findings(doc) == [("ct14", "FAIL", "HOST-DISK-FULL")]
    [message] = failures(doc)
    assert message.startswith("only 1.0 MB free on the file system of log directory /root/k3ep16-logs (67.1 MB, "
                              "98 % used): the log directory needs at least 1.0 GB (log_min_free_gb)")
    rig.apply("healthy")  # the tmpfs is gone again
    assert findings(run(rig.inventory_path)[1]) == []


def test_docker_root_thresholds_apply_per_node_to_the_engines_real_root(rig, tmp_path):
    """The Docker root is the one each node's engine reports (its real data root on this machine's
    disk); a node whose inventory asks for more room than there is gets the finding, no other."""
    rig.apply("healthy")
    inv = yaml.safe_load(rig.inventory_path.read_text())
    nodes = {n["name"]: n for n in inv["nodes"]}
    nodes["ct16"]["checks"] = {CHECK: {"docker_root_min_free_gb": 10**6}}  # a petabyte
    nodes["ct17"]["checks"] = {CHECK: {"docker_root_warn_free_gb": 10**6}}
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inv))
    rc, doc = run(path)
    assert rc == 1 and findings(doc) == [("ct16", "FAIL", "HOST-DISK-FULL"), ("ct17", "WARN", "HOST-DOCKER-ROOT-ROOM")]
    fail_message, warn_message = (r["message"] for r in sorted(doc["results"], key=lambda r: r["node"] or "")
                                  if r["status"] != "PASS")
    root = str(rig.nodes[2].dir / "docker" / "data")
    assert f"Docker root {root}" in fail_message and "(docker_root_min_free_gb)" in fail_message
    assert "log directory /root/k3ep16-logs" in fail_message  # same file system: named once, together
    assert "the epcheck image (~373 GB unpacked, §9) does not fit" in warn_message


CASES = {  # scenario: (the one finding, what its message says)
    "host-checkpoint-missing": (("ct13", "FAIL", "CHECKPOINT-INCOMPLETE"),
                                "no checkpoint directory /mnt/k3/Kimi-K3 on this node"),
    "host-shard-extra": (("ct17", "FAIL", "CHECKPOINT-INCOMPLETE"),
                         "differs from the copy on ct13, ct14, ct16: not on the other nodes: "
                         "model-00001-of-00064.safetensors"),
    "host-log-dir-missing": (("ct16", "WARN", "HOST-DISK-FULL"),
                             "log directory /root/k3ep16-logs does not exist on this node"),
    "host-meminfo-truncated": (("ct14", "ERROR", None),
                               "/proc/meminfo not readable: /proc/meminfo: unexpected line 'MemAvail'"),
}


@pytest.mark.parametrize("scenario", CASES)
def test_each_fault_is_named_once_on_its_node(rig, scenario):
    finding, says = CASES[scenario]
    rig.apply(scenario)
    rc, doc = run(rig.inventory_path)
    assert findings(doc) == [finding]
    assert rc == {"FAIL": 1, "WARN": 0, "ERROR": 2}[finding[1]]
    [message] = failures(doc)
    assert says in message


def test_a_shard_missing_on_every_node_is_one_rack_finding(rig):
    rig.apply("host-shard-missing-everywhere")
    rc, doc = run(rig.inventory_path)
    assert rc == 1 and findings(doc) == [(None, "FAIL", "CHECKPOINT-UNEXPECTED")]
    [message] = failures(doc)
    assert message.startswith("the checkpoint copy the 4 node(s) agree on is not the expected one: 95 shards, "
                              "expected 96; missing on every node: model-00042-of-00096.safetensors")
