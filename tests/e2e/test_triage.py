"""`k3doctor triage` end to end: the real CLI reads every simulated node's container output over real SSH
(`docker logs` against the node's real dockerd) and names the node and rank at fault (§19–§25).

The log lines are written into our container's own stdout (its PID 1's fd 1), so `docker logs` serves them
exactly as it would an engine's output; only the ATOM engine itself is simulated (k3rig.server_log).
"""
import time
from pathlib import Path

import docker
import pytest
import yaml
from k3rig import server_log as L

from tests.e2e.cli import k3, k3json

pytestmark = pytest.mark.e2e


@pytest.fixture
def fresh(rig):
    """Every node's k3ep16 recreated (an empty log), before and after the test."""
    def renew():
        for node in rig.nodes:
            client = docker.DockerClient(base_url=f"unix://{node.docker_socket}", timeout=30)
            try:
                client.containers.get("k3ep16").remove(force=True)
            except docker.errors.NotFound:
                pass
            finally:
                client.close()
        rig.apply("healthy")
    renew()
    yield rig
    renew()


def write_logs(rig, logs: dict):
    """Node index -> lines, printed by that node's container (what `docker logs` returns)."""
    for index, lines in logs.items():
        node = rig.nodes[index]
        client = docker.DockerClient(base_url=f"unix://{node.docker_socket}", timeout=30)
        try:
            container = client.containers.get("k3ep16")
            pid = container.attrs["State"]["Pid"]
            text = "\n".join(lines) + "\n"
            rc, out = container.exec_run(["sh", "-c", f'printf "%s" "$0" > /proc/{pid}/fd/1', text])
            assert rc == 0, out
        finally:
            client.close()


def findings(doc):
    return sorted((r["check"], r["node"], r["gpu"], r["status"], r["remediation"])
                  for r in doc["results"] if r["status"] in ("FAIL", "WARN", "ERROR"))


def triage(rig, *args):
    return k3json("triage", "--nodes", rig.inventory_path, *args)


def test_healthy_logs_give_no_finding(fresh):
    write_logs(fresh, L.node_logs())
    rc, doc = triage(fresh)
    assert rc == 0, doc
    assert findings(doc) == []
    assert "16 rank(s)" in doc["results"][0]["message"]


def test_the_missing_participant_of_15_timed_out_ranks_is_named(fresh):
    write_logs(fresh, L.node_logs(extra=L.missing_participant(stalled=11)))
    rc, doc = triage(fresh)
    assert rc == 1
    assert findings(doc) == [("triage-collective", "ct16", 3, "FAIL", "TRIAGE-MISSING-PARTICIPANT")]


def test_a_rank_stopped_at_load_rccl_version(fresh):
    write_logs(fresh, L.node_logs(ranks={6: {"stop_at": "rccl"}}))
    rc, out, _ = k3("triage", "--nodes", fresh.inventory_path)
    assert rc == 1
    first = out.splitlines()[:3]
    assert first[0].startswith("Most likely cause: rank 6 (ct14) stopped at `load RCCL version`")
    assert "ct14 gpu2 (rank 6)" in first[1] and "TRIAGE-RCCL-INIT-HANG" in first[2]


def test_kv_budget_collision_names_the_rank_and_the_cause(fresh):
    write_logs(fresh, L.node_logs(ranks={9: {"stop_at": "load"}}, extra={9: L.KV_COLLISION}))
    rc, doc = triage(fresh)
    assert rc == 1 and findings(doc) == [("triage-kv", "ct16", 1, "FAIL", "TRIAGE-KV-COLLISION")]


def test_config_and_fatal_lines_on_one_node_only(fresh):
    write_logs(fresh, L.node_logs(ranks={12: {"max_model_len": "16384"}}, extra={13: L.TRITON}))
    rc, doc = triage(fresh)
    assert rc == 1 and findings(doc) == [
        ("triage-config", "ct17", 0, "FAIL", "TRIAGE-MAX-MODEL-LEN"),
        ("triage-fatal", "ct17", 1, "FAIL", "TRIAGE-TRITON-CODE-OBJECT")]


@pytest.mark.parametrize("line, step, status, code", [  # §31.3's MI3xx field failures, one rank each
    ("NCCL WARN hipIpcGetMemHandle failed : invalid argument", "triage-config", "FAIL", "TRIAGE-IOMMU-NOT-PT"),
    ("AssertionError: mla_gluon requires gfx950 (CDNA4), got gfx942", "triage-config", "FAIL",
     "TRIAGE-GFX950-ONLY-KERNEL"),
    ("HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception. code: 0x1016", "triage-fatal",
     "FAIL", "TRIAGE-HSA-EXCEPTION-1016"),
    ("HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the largest legal "
     "address. code: 0x29", "triage-fatal", "FAIL", "TRIAGE-AITER-VSKIP"),
    ("NCCL WARN NUMA auto balancing enabled which can lead to variability in the RCCL performance!",
     "triage-config", "WARN", "TRIAGE-NUMA-BALANCING"),
])
def test_a_field_failure_of_section_31_is_named_on_its_rank_only(fresh, line, step, status, code):
    write_logs(fresh, L.node_logs(extra={6: [line]}))
    rc, doc = triage(fresh)
    assert findings(doc) == [(step, "ct14", 2, status, code)], doc
    assert rc == (1 if status == "FAIL" else 0)


def test_a0_declared_and_nothing_translated(fresh, tmp_path):
    inv = yaml.safe_load(fresh.inventory_path.read_text())
    inv["cluster"]["stepping"] = "A0"
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(inv))
    write_logs(fresh, {i: lines for i, lines in L.node_logs(stepping="A0").items() if i != 2} |
               {2: L.node_logs(stepping="B0")[2]})
    rc, doc = k3json("triage", "--nodes", path)
    assert rc == 1
    assert findings(doc) == [("triage-config", "ct16", g, "FAIL", "TRIAGE-NOT-TRANSLATING") for g in range(4)]


def test_an_unreadable_node_is_an_error_for_it_and_the_others_are_judged(fresh):
    write_logs(fresh, L.node_logs(extra=L.missing_participant(stalled=3)))
    client = docker.DockerClient(base_url=f"unix://{fresh.nodes[3].docker_socket}", timeout=30)
    client.containers.get("k3ep16").remove(force=True)
    client.close()
    rc, doc = triage(fresh)
    assert rc == 1  # the fault seen on the readable nodes still outranks the unreadable one
    assert ("triage-startup", "ct17", None, "ERROR", None) in findings(doc)
    assert ("triage-collective", "ct13", 3, "FAIL", "TRIAGE-MISSING-PARTICIPANT") in findings(doc)


def test_a_log_file_on_a_node_and_offline_log_files(fresh, tmp_path):
    logs = L.node_logs(extra=L.missing_participant(stalled=14))
    for index, lines in logs.items():
        (tmp_path / f"{fresh.nodes[index].name}.log").write_text("\n".join(lines) + "\n")
    rc, doc = k3json("triage", "--logs", tmp_path, "--nodes", fresh.inventory_path)
    assert rc == 1 and findings(doc) == [("triage-collective", "ct17", 2, "FAIL", "TRIAGE-MISSING-PARTICIPANT")]
    rc, doc = k3json("triage", "--logs", tmp_path)  # no inventory: the file names the node (ct17.log)
    assert rc == 1 and findings(doc) == [("triage-collective", "ct17", 2, "FAIL", "TRIAGE-MISSING-PARTICIPANT")]
    node = fresh.nodes[1]
    (node.tree / "root/atom.log").write_text("\n".join(L.node_logs(ranks={5: {"kv": "-4.67"}})[1]) + "\n")
    write_logs(fresh, {i: lines for i, lines in L.node_logs().items() if i != 1})
    rc, doc = triage(fresh, "--log", f"{node.name}=/root/atom.log")
    assert rc == 1 and findings(doc) == [("triage-kv", "ct14", 1, "FAIL", "TRIAGE-KV-NEGATIVE")]


def test_bad_log_option_is_a_usage_error(rig):
    rc, _, err = k3("triage", "--nodes", rig.inventory_path, "--log", "nosuchnode=/x")
    assert rc == 3 and "Traceback" not in err


STUCK = Path(__file__).resolve().parents[1] / "stuck_ranks.py"


def start_ranks(rig, where: dict):
    """rank -> 'idle' | 'nccl': a real Python ModelRunner stand-in inside its node's k3ep16."""
    code = STUCK.read_text()
    for rank, how in where.items():
        node = rig.nodes[rank // 4]
        client = docker.DockerClient(base_url=f"unix://{node.docker_socket}", timeout=30)
        try:
            container = client.containers.get("k3ep16")
            rc, out = container.exec_run(["sh", "-c", 'printf "%s" "$0" > /tmp/stuck_ranks.py', code])
            assert rc == 0, out
            container.exec_run(["/usr/bin/python3", "/tmp/stuck_ranks.py", str(rank), how], detach=True)
        finally:
            client.close()


@pytest.mark.skipif(not Path("/usr/local/bin/py-spy").exists() and not Path("/usr/bin/py-spy").exists(),
                    reason="py-spy is not installed for the nodes (scripts/install.sh installs it)")
def test_live_stacks_name_the_rank_stuck_in_ncclCommInitRank(fresh):
    write_logs(fresh, L.node_logs())
    start_ranks(fresh, {r: ("nccl" if r == 7 else "idle") for r in range(16)})
    deadline = time.monotonic() + 90
    while True:  # until every rank has reached the frame it waits in
        rc, doc = triage(fresh, "--stacks")
        stacks = [r for r in doc["results"] if r["check"] == "triage-stacks"]
        if (stacks and "16 ModelRunner" in str(doc)) or any(r["status"] == "FAIL" for r in stacks) \
                or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert rc == 1, doc
    assert findings(doc) == [("triage-stacks", "ct14", 3, "FAIL", "TRIAGE-COLLECTIVE-HANG")]


def test_without_py_spy_on_the_nodes_the_stacks_are_skipped_with_how_to_get_it(fresh):
    write_logs(fresh, L.node_logs())
    rc, doc = triage(fresh, "--stacks", "--py-spy", "/nonexistent/py-spy")
    assert rc == 0, doc
    skipped = [r for r in doc["results"] if r["check"] == "triage-stacks"]
    assert {(r["node"], r["status"], r["remediation"]) for r in skipped} == {
        (n.name, "SKIP", "TRIAGE-NO-PYSPY") for n in fresh.nodes}


def test_a_bundle_keeps_what_was_read_without_secrets_and_judges_the_same_offline(fresh, tmp_path):
    token = "hf_" + "Q7x" * 10
    extra = L.missing_participant(stalled=11)
    extra[0] = [f"INFO launching with HF_TOKEN={token} api_key: sk-{token}"] + extra[0]
    logs = L.node_logs(extra=extra)
    write_logs(fresh, logs)
    bundle = tmp_path / "triage.tar.gz"
    rc, out, err = k3("triage", "--nodes", fresh.inventory_path, "-o", bundle)
    assert rc == 1 and "Most likely cause: rank 11 (ct16)" in out, err
    assert oct(bundle.stat().st_mode & 0o777) == "0o600"
    import tarfile
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
        blob = b"".join(tar.extractfile(m).read() for m in tar if m.isfile())
    assert {"manifest.json", "report.json", "logs/ct13", "logs/ct17"} <= set(names)
    assert token.encode() not in blob and b"<redacted>" in blob
    live = k3json("triage", "--nodes", fresh.inventory_path)[1]
    rc, offline = k3json("judge", bundle)
    assert rc == 1 and findings(offline) == findings(live) == [
        ("triage-collective", "ct16", 3, "FAIL", "TRIAGE-MISSING-PARTICIPANT")]


def test_a_damaged_bundle_is_one_line_exit_3(tmp_path):
    bad = tmp_path / "x.tar.gz"
    bad.write_bytes(b"\x1f\x8b not really")
    rc, _, err = k3("judge", bad)
    assert rc == 3 and "cannot judge" in err and "Traceback" not in err


def test_the_kernel_log_joins_the_triage_report_and_its_bundle(fresh, tmp_path):
    fresh.apply("kernel-page-fault")  # ct16 card2: a no-retry page fault in the node's kernel log (§10)
    write_logs(fresh, L.node_logs())
    bundle = tmp_path / "triage.tar.gz"
    rc, out, err = k3("triage", "--nodes", fresh.inventory_path, "-o", bundle)
    assert rc == 1 and "Most likely cause:" in out and "GPU-PAGE-FAULT" in out, out + err
    rc, offline = k3json("judge", bundle)
    assert rc == 1 and findings(offline) == [("kernel-health", "ct16", 2, "FAIL", "GPU-PAGE-FAULT")]


def test_a_log_larger_than_one_reading_is_read_from_its_end(fresh):
    """A busy server's log is bigger than the 4 MiB a reading may carry: its newest part is judged."""
    node = fresh.nodes[0]
    client = docker.DockerClient(base_url=f"unix://{node.docker_socket}", timeout=60)
    try:
        container = client.containers.get("k3ep16")
        pid = container.attrs["State"]["Pid"]
        line = "(EngineCore_DP0 pid=4000) INFO " + "x" * 120
        rc, out = container.exec_run(["sh", "-c", f'i=0; while [ $i -lt 45000 ]; do echo "{line}"; i=$((i+1)); '
                                     f"done > /proc/{pid}/fd/1"])  # ~6.6 MB before the real lines
        assert rc == 0, out
    finally:
        client.close()
    write_logs(fresh, L.node_logs(extra=L.missing_participant(stalled=2)))
    rc, doc = triage(fresh)
    assert rc == 1 and findings(doc) == [("triage-collective", "ct13", 2, "FAIL", "TRIAGE-MISSING-PARTICIPANT")]
