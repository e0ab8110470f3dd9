"""The engine end to end: the real CLI against the simulated rack over real SSH (issue 2)."""
import os
import subprocess
import time
from pathlib import Path

import psutil
import pytest
import yaml

from tests.e2e.cli import k3, k3json

pytestmark = pytest.mark.e2e


def statuses(doc, check):
    return {(r["node"], r["gpu"]): r["status"] for r in doc["results"] if r["check"] == check}


def edited_inventory(rig, tmp_path, edit):
    inv = yaml.safe_load(rig.inventory_path.read_text())
    edit(inv)
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inv))
    return path


def test_healthy_rack_is_ready_to_launch(rig):
    rig.apply("healthy")
    rc, out, err = k3("check", "--nodes", rig.inventory_path)
    assert rc == 0, out + err
    header = out.splitlines()[0].split()
    assert header[:5] == ["check", "ct13", "ct14", "ct16", "ct17"]
    assert "FAIL" not in out and "ERROR" not in out
    assert out.rstrip().splitlines()[-1].startswith("READY TO LAUNCH")


def test_fast_tier_costs_one_script_round_trip_per_node(rig):
    rig.apply("healthy")
    rc, doc = k3json("check", "--nodes", rig.inventory_path, "--skip",  # the checks that ask the Docker API
                     "rack-free,launch-config,host-resources,rocjitsu-store,patch-integrity,env-versions,"
                     "aiter-jit-locks,lmcache-ops")
    assert rc == 0
    assert {n["name"]: n["round_trips"] for n in doc["nodes"]} == {n.name: 1 for n in rig.nodes}
    # + the script of the commands given an engine fact (Docker root, ranks), + the Docker API's channels: the
    # first, which the container's exec then takes for its output stream, and one for whichever of the two
    # engine threads (engine readings, the exec's inspect) asks next; a second one when both ask at once
    rc, doc = k3json("check", "--nodes", rig.inventory_path)
    assert rc == 0
    assert all(n["round_trips"] in (4, 5) for n in doc["nodes"]), doc["nodes"]


def test_one_unconfigured_card_is_named_by_node_and_gpu(rig):
    rig.apply("card-unconfigured")  # ct14 card1
    rc, doc = k3json("check", "--nodes", rig.inventory_path, "--only", "ualink-state")
    assert rc == 1 and doc["verdict"] == "DO NOT LAUNCH"
    bad = [r for r in doc["results"] if r["status"] != "PASS"]
    assert [(r["node"], r["gpu"], r["status"]) for r in bad] == [("ct14", 1, "FAIL")]
    assert "unconfigured" in bad[0]["message"] and bad[0]["remediation"]
    assert len(statuses(doc, "ualink-state")) == 16


def test_unreachable_node_is_an_error_for_that_node_only(rig, tmp_path):
    rig.apply("healthy")
    path = edited_inventory(rig, tmp_path, lambda inv: inv["nodes"].append(
        {"name": "ct99", "host": rig.unreachable_host}))
    started = time.monotonic()
    rc, doc = k3json("check", "--nodes", path, "--only", "amdgpu-driver,ualink-state")
    assert rc == 2 and doc["verdict"] == "INCONCLUSIVE"
    assert time.monotonic() - started < 30
    ct99 = [r for r in doc["results"] if r["node"] == "ct99"]
    assert {r["status"] for r in ct99} == {"ERROR"} and len(ct99) == 2
    assert "connection refused" in ct99[0]["message"]
    others = [r for r in doc["results"] if r["node"] != "ct99"]
    assert others and {r["status"] for r in others} == {"PASS"}
    assert [n["reachable"] for n in doc["nodes"]] == [True, True, True, True, False]


def test_a_changed_host_key_is_refused(rig, tmp_path):
    rig.apply("healthy")
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other], check=True)
    fake = other.with_suffix(".pub").read_text().split()[:2]
    lines = rig.known_hosts.read_text().splitlines()
    victim = f"[{rig.nodes[1].host}]"  # ct14
    lines = [" ".join([ln.split()[0], *fake]) if ln.startswith(victim) else ln for ln in lines]
    (tmp_path / "known_hosts").write_text("\n".join(lines) + "\n")
    path = edited_inventory(rig, tmp_path, lambda inv: inv["ssh"].update(known_hosts=str(tmp_path / "known_hosts")))
    for extra in ((), ("--accept-unknown-hosts",)):  # opting in to unknown keys never accepts a changed one
        rc, doc = k3json("check", "--nodes", path, "--only", "amdgpu-driver", *extra)
        assert rc == 2
        got = {r["node"]: (r["status"], r["message"]) for r in doc["results"]}
        assert got["ct14"][0] == "ERROR" and "does NOT match known_hosts" in got["ct14"][1]
        assert {got[n][0] for n in ("ct13", "ct16", "ct17")} == {"PASS"}


def test_an_unknown_host_key_needs_an_explicit_opt_in(rig, tmp_path):
    rig.apply("healthy")
    victim = f"[{rig.nodes[2].host}]"  # ct16
    lines = [ln for ln in rig.known_hosts.read_text().splitlines() if not ln.startswith(victim)]
    known = tmp_path / "known_hosts"
    known.write_text("\n".join(lines) + "\n")
    path = edited_inventory(rig, tmp_path, lambda inv: inv["ssh"].update(known_hosts=str(known)))
    rc, doc = k3json("check", "--nodes", path, "--only", "amdgpu-driver")
    assert rc == 2
    (ct16,) = [r for r in doc["results"] if r["node"] == "ct16"]
    assert ct16["status"] == "ERROR" and "is unknown" in ct16["message"]
    user_known = Path("~/.ssh/known_hosts").expanduser()
    before = user_known.read_bytes() if user_known.exists() else None
    rc, doc = k3json("check", "--nodes", path, "--only", "amdgpu-driver", "--accept-unknown-hosts")
    assert rc == 0
    assert victim not in known.read_text()  # accepting for one run never writes the key ...
    assert (user_known.read_bytes() if user_known.exists() else None) == before  # ... anywhere


def test_a_hung_read_is_killed_at_its_deadline_and_nothing_is_left_running(rig):
    rig.apply("healthy")
    param = rig.nodes[2].tree / "sys/module/amdgpu/parameters/gpu_recovery"  # ct16
    param.unlink()
    os.mkfifo(param)  # a read that never returns, like a wedged device's sysfs file
    try:
        # 10 s per reading: a healthy run of amdgpu-driver took 0.7-1.2 s in all (4 runs, 2 cores at load ~20),
        # so only the hung read reaches it; the run then ends by that deadline instead of never.
        rc, doc = k3json("check", "--nodes", rig.inventory_path, "--only", "amdgpu-driver", "--timeout", "10")
        assert rc == 2 and doc["duration_s"] < 10 + 30
        got = {r["node"]: (r["status"], r["message"]) for r in doc["results"]}
        assert got["ct16"][0] == "ERROR" and "timed out" in got["ct16"][1]
        assert {got[n][0] for n in ("ct13", "ct14", "ct17")} == {"PASS"}
        assert rig.pids_matching("/sys/module/amdgpu/parameters/gpu_recovery") == []
    finally:
        param.unlink()
        rig.apply("healthy")


def test_a_malformed_inventory_exits_3_with_file_and_line(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text("cluster:\n  stepping: B0\nnodes:\n  - {name: a, host: h, prot: 22}\n")
    rc, out, err = k3("check", "--nodes", path)
    assert rc == 3 and out == ""
    assert f"{path}:4: nodes[0].prot: unknown key (did you mean 'port'?)" in err
    assert "Traceback" not in err


def test_bad_arguments_are_one_line_usage_errors():
    rc, out, err = k3("check", "--format", "pdf")
    assert rc == 3 and "Traceback" not in err and "pdf" in err
    rc, out, err = k3("explain", "NO-SUCH-CODE")
    assert rc == 3 and "known codes:" in err


def test_ssh_config_supplies_port_identity_and_proxyjump(rig, tmp_path):
    rig.apply("healthy")
    ct13, ct14 = rig.nodes[0], rig.nodes[1]
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host ct14-via-ct13\n  HostName {ct14.host}\n  Port {ct14.port}\n  IdentityFile {rig.identity_file}\n"
        f"  ProxyJump root@{ct13.host}:{ct13.port}\n"
        f"Host ct14-via-nowhere\n  HostName {ct14.host}\n  Port {ct14.port}\n  IdentityFile {rig.identity_file}\n"
        f"  ProxyJump root@{rig.unreachable_host}:{ct13.port}\n"
        f"Host {ct13.host}\n  IdentityFile {rig.identity_file}\n")

    def via(alias):
        def edit(inv):
            inv["ssh"]["ssh_config"] = str(config)
            del inv["defaults"]["port"], inv["defaults"]["identity_file"]
            inv["nodes"] = [{"name": "ct14", "host": alias}]
        return edited_inventory(rig, tmp_path, edit)

    rc, doc = k3json("check", "--nodes", via("ct14-via-ct13"), "--only", "amdgpu-driver")
    assert rc == 0 and doc["results"][0]["status"] == "PASS"
    rc, doc = k3json("check", "--nodes", via("ct14-via-nowhere"), "--only", "amdgpu-driver")
    assert rc == 2
    assert f"connection refused by {rig.unreachable_host}" in doc["results"][0]["message"]


def test_demo_stands_up_a_rack_shows_the_bad_card_and_tears_down(rig):
    rc, out, err = k3("demo")  # its own rack, beside the session's (it picks free loopback addresses)
    assert rc == 1, out + err
    assert "ualink-state ct16 gpu2" in out and out.rstrip().splitlines()[-1].startswith("DO NOT LAUNCH")
    # one fault, one FAIL, the cause in the verdict line; its consequence says where it comes from
    assert [ln.split(":")[0] for ln in out.splitlines() if ln.startswith("FAIL")] == ["FAIL  ualink-state ct16 gpu2"]
    assert "SKIP  fabric-domain ct16 gpu2: follows from ualink-state on ct16 gpu2" in out
    assert out.rstrip().splitlines()[-1].endswith("see `k3doctor explain UALINK-STUCK-UNCONFIGURED`")
    # the demo's rack is not the session rig, so look at every process on the machine
    left = [p for p in psutil.process_iter(["cmdline"]) if "k3doctor-demo-" in " ".join(p.info["cmdline"] or ())]
    assert psutil.wait_procs(left, timeout=5)[1] == []


@pytest.mark.parametrize("args,needle", [
    (("check", "--set", "rack-free.window_min=["), "is not a valid value"),
    (("check", "--set", "ualink-state.accepted_states=active"), "takes a list"),
    (("check", "--set", "amdgpu-driver.require_tuned=maybe"), "takes true or false"),
    (("judge", "/bin/true"), "cannot judge /bin/true"),
    (("check", "-o", "/nonexistent-dir/report.txt"), "/nonexistent-dir/report.txt"),
    (("check", "--save-readings", "/nonexistent-dir/r.json"), "cannot write /nonexistent-dir/r.json"),
    (("check", "--save-readings", "-"), "needs a file name"),
    (("baseline", "record", "-o", "/nonexistent-dir/b.yaml"), "cannot write /nonexistent-dir/b.yaml"),
])
def test_bad_input_is_one_line_and_exit_3_before_anything_runs(args, needle):
    started = time.monotonic()
    rc, out, err = k3(*args)
    assert (rc, out) == (3, "") and needle in err and "Traceback" not in err
    assert time.monotonic() - started < 20


def test_malformed_baseline_and_inventory_keys_are_usage_errors(tmp_path):
    baseline = tmp_path / "b.yaml"
    baseline.write_text("nodes: {vm: }\n")
    rc, _, err = k3("check", "--baseline", baseline)
    assert rc == 3 and "not a k3doctor baseline" in err and "Traceback" not in err
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  - {name: a, host: h}\n? [x]\n: 1\n")
    rc, _, err = k3("check", "--nodes", inv)
    assert rc == 3 and f"{inv}:3: (top level): keys must be plain names" in err


def test_a_broken_ssh_config_is_an_error_for_the_node_not_a_crash(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host broken\n  Port abc\n")
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"ssh: {{ssh_config: {config}}}\nnodes:\n  - {{name: a, host: broken}}\n"
                   "  - {name: here, transport: local}\n")
    rc, doc = k3json("check", "--nodes", inv, "--only", "shm-clean")
    by_node = {r["node"]: r for r in doc["results"]}
    assert rc == 2 and by_node["a"]["status"] == "ERROR" and "cannot use ssh config" in by_node["a"]["message"]
    assert by_node["here"]["status"] == "PASS"
