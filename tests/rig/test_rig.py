"""End-to-end tests of the simulated rack itself: plain OpenSSH client and docker SDK against it."""
from __future__ import annotations

import io
import json
import os
import socket
import stat
import subprocess
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor

import docker
import pytest
import yaml
from k3rig import scenario_names
from k3rig.scenario import load as load_scenario

pytestmark = pytest.mark.e2e

UALINK = "/sys/class/drm/card{}/device/ualink"


def ssh_to(rig, host: str, command: str, timeout: float = 30) -> subprocess.CompletedProcess:
    argv = [
        "ssh", "-F", "/dev/null", "-i", str(rig.identity_file),
        "-o", f"UserKnownHostsFile={rig.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
        "-p", "2222", f"root@{host}", command,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def ssh(rig, node, command: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return ssh_to(rig, node.host, command, timeout)


def read_all(rig, command: str) -> dict[str, str]:
    """stdout of ``command`` on every node, by node name (asserting it succeeded)."""
    out = {}
    for node in rig.nodes:
        result = ssh(rig, node, command)
        assert result.returncode == 0, (node.name, result.stderr)
        out[node.name] = result.stdout
    return out


def container_states(node) -> dict[str, str]:
    client = docker.DockerClient(base_url=f"unix://{node.docker_socket}")
    try:
        return {c.name: c.status for c in client.containers.list(all=True)}
    finally:
        client.close()


def test_healthy_sysfs_per_node(rig):
    rig.apply("healthy")
    cmd = "hostname; " + "; ".join(f"cat {UALINK.format(c)}/accel_state {UALINK.format(c)}/accel_id" for c in range(4))
    for (name, out), tray in zip(read_all(rig, cmd).items(), (13, 14, 16, 17), strict=True):
        lines = out.split()
        assert lines[0] == name == f"ct{tray}"
        states, ids = lines[1::2], [int(x) for x in lines[2::2]]
        assert states == ["active"] * 4
        assert sorted(ids) == list(range(4 * (tray - 1), 4 * (tray - 1) + 4))  # §4 tray numbering


def test_tools_print_recorded_outputs(rig):
    rig.apply("healthy")
    node = rig.nodes[0]
    fabric = json.loads(ssh(rig, node, "/opt/rocm/bin/amd-smi fabric --json").stdout)["gpu_data"]
    sysfs_ids = ssh(rig, node, f"cat {UALINK.format('[0-3]')}/accel_id").stdout.split()
    assert [str(g["fabric"]["fabric_info"]["accelerator_id"]) for g in fabric] == sysfs_ids
    assert {g["fabric"]["fabric_info"]["accel_state"] for g in fabric} == {"ACTIVE"}
    assert "No KFD PIDs currently running" in ssh(rig, node, "/opt/rocm/bin/rocm-smi --showpids").stdout
    assert "UALINK: accelerator accel_id=51 is now ACTIVE" in ssh(rig, node, "dmesg").stdout
    unknown = ssh(rig, node, "/opt/rocm/bin/amd-smi metric --json")
    assert unknown.returncode == 64 and "no recorded output" in unknown.stderr
    assert ssh(rig, node, "command -v amd-smi").returncode == 1  # /opt/rocm/bin is not on PATH


def test_inventory_and_ssh_files(rig):
    inventory = yaml.safe_load(rig.inventory_path.read_text())
    assert [(n["name"], n["host"]) for n in inventory["nodes"]] == [(n.name, n.host) for n in rig.nodes]
    assert inventory["defaults"] == {"user": "root", "port": 2222, "identity_file": str(rig.identity_file),
                                     "sudo": False}
    assert inventory["cluster"]["tools"]["amd_smi"] == "/opt/rocm/bin/amd-smi"
    assert stat.S_IMODE(rig.identity_file.stat().st_mode) == 0o600
    hosts = [line.split()[0] for line in rig.known_hosts.read_text().splitlines()]
    assert hosts == [f"[{h}]:2222" for h in [n.host for n in rig.nodes] + [rig.unreachable_host]]
    assert [n.host.rsplit(".", 1)[1] for n in rig.nodes] + [rig.unreachable_host.rsplit(".", 1)[1]] == [
        "11", "12", "13", "14", "15"]
    refused = ssh_to(rig, rig.unreachable_host, "true")
    assert refused.returncode == 255 and "refused" in refused.stderr


def test_scenario_changes_exactly_one_node_live(rig):
    rig.apply("healthy")
    pids = [n.ns_pid for n in rig.nodes]
    rig.apply("card-unconfigured")
    states = read_all(rig, f"cat {UALINK.format(1)}/accel_state")
    assert {k: v.strip() for k, v in states.items()} == {
        "ct13": "active", "ct14": "unconfigured", "ct16": "active", "ct17": "active"}
    fabric = json.loads(ssh(rig, rig.nodes[1], "/opt/rocm/bin/amd-smi fabric --json").stdout)["gpu_data"]
    assert [g["fabric"]["fabric_info"]["accel_state"] for g in fabric] == ["ACTIVE", "UNCONFIGURED", "ACTIVE", "ACTIVE"]
    rig.apply("healthy")
    assert ssh(rig, rig.nodes[1], f"cat {UALINK.format(1)}/accel_state").stdout == "active\n"
    assert [n.ns_pid for n in rig.nodes] == pids  # sshd kept running


def test_kfd_missing_only_on_its_node(rig):
    rig.apply("kfd-missing")
    present = {n.name: ssh(rig, n, "test -c /dev/kfd").returncode for n in rig.nodes}
    assert present == {"ct13": 0, "ct14": 0, "ct16": 0, "ct17": 1}
    assert ssh(rig, rig.nodes[3], "ls /dev/dri").stdout.split() == [
        "card0", "card1", "card2", "card3", "renderD128", "renderD129", "renderD130", "renderD131"]
    rig.apply("healthy")
    assert ssh(rig, rig.nodes[3], "test -c /dev/kfd").returncode == 0


def test_foreign_containers_only_on_their_node(rig):
    rig.apply("foreign-container-running")
    assert [container_states(n) for n in rig.nodes] == [
        {"k3ep16": "running"}, {"k3ep16": "running", "sglang-bench": "running"},
        {"k3ep16": "running"}, {"k3ep16": "running"}]
    rig.apply("foreign-container-created")
    assert container_states(rig.nodes[1]) == {"k3ep16": "running"}
    assert container_states(rig.nodes[2]) == {"k3ep16": "running", "kimi-k3-dp8": "created"}
    # The docker CLI on the node reaches the node's own engine through /var/run/docker.sock.
    out = ssh(rig, rig.nodes[2], "docker ps -a --format '{{.Names}} {{.State}} {{.Image}}' | sort").stdout
    assert out.splitlines() == ["k3ep16 running rocm/fw-bringup:gfx1250-atom-20260918-ep8",
                                "kimi-k3-dp8 created rocm/fw-bringup:gfx1250-atom-20260918-ep8"]
    rig.apply("healthy")
    assert container_states(rig.nodes[2]) == {"k3ep16": "running"}


def test_boot_ids_differ_and_reboot_changes_one(rig):
    rig.apply("healthy")
    before = read_all(rig, "cat /proc/sys/kernel/random/boot_id")
    assert len(set(before.values())) == len(rig.nodes)
    rig.apply("reboot")
    after = read_all(rig, "cat /proc/sys/kernel/random/boot_id")
    assert [name for name in before if before[name] != after[name]] == ["ct14"]
    bitmaps = ssh(rig, rig.nodes[1], f"cat {UALINK.format('[0-3]')}/station_lane_en_bitmap").stdout.split()
    assert bitmaps[:3] == ["ffffffffffffffffff"] * 3 and bitmaps[3] != bitmaps[0]
    rig.apply("healthy")


def test_shm_hbm_and_gpu_process(rig):
    rig.apply("stale-shm")
    assert read_all(rig, "ls /dev/shm")["ct17"].split() == ["nccl-7Qm2Xz", "nccl-shm-a8f3c2d1", "psm_shm.1c9e42b7"]
    assert "128G" in ssh(rig, rig.nodes[3], "df -h /dev/shm").stdout
    rig.apply("mixed-hbm")
    vram = read_all(rig, "cat /sys/class/drm/card0/device/mem_info_vram_total")
    assert {k: int(v) // 2**30 for k, v in vram.items()} == {"ct13": 432, "ct14": 432, "ct16": 288, "ct17": 432}
    rig.apply("gpu-process")
    assert ssh(rig, rig.nodes[0], "ls /sys/class/kfd/kfd/proc").stdout.split() == ["1168514"]
    assert "1168514\tpt_main_thread" in ssh(rig, rig.nodes[0], "/opt/rocm/bin/rocm-smi --showpids").stdout
    rig.apply("healthy")
    cleared = read_all(rig, "ls /dev/shm /sys/class/kfd/kfd/proc")
    assert cleared["ct17"].split() == cleared["ct13"].split() == ["/dev/shm:", "/sys/class/kfd/kfd/proc:"]


def test_hung_tool_is_recognisable(rig):
    rig.apply("amd-smi-hang")
    node = rig.nodes[2]
    assert ssh(rig, node, "timeout 1 /opt/rocm/bin/amd-smi fabric --json").returncode == 124
    assert rig.pids_matching("k3rig-hang.amd-smi") == []  # the node-side deadline killed it
    with pytest.raises(subprocess.TimeoutExpired):  # a client-side deadline alone leaves it running
        ssh(rig, node, "/opt/rocm/bin/amd-smi fabric --json", timeout=2)
    left = rig.pids_matching("k3rig-hang.amd-smi")
    assert len(left) == 1
    os.kill(left[0], 9)
    rig.apply("healthy")
    assert ssh(rig, node, "/opt/rocm/bin/amd-smi fabric --json").returncode == 0


# What a node shows over SSH of its simulated hardware, without running a (possibly hanging) fake tool:
# the fake files, links (a driver binding), devices and boot id; then, from its engine, the containers and our
# container's files (sizes), environment and log.
NODE_FILES = r"""{ find /sys/class /sys/module /opt/k3rig /root/ubench -type f | sort | xargs -d '\n' tail -n +1
  find /sys/class -type l -printf '%p -> %l\n' | sort; ls /dev/dri /dev/shm; [ -e /dev/kfd ] && echo kfd
  cat /proc/sys/kernel/random/boot_id /proc/sys/kernel/numa_balancing; } 2>&1 | sha256sum"""
# Host resources (§12): memory, the checkpoint's shards and sizes, the log directory's file system.
NODE_HOST = r"""{ cat /proc/meminfo; find /mnt -printf '%p %s %y\n' | sort; ls -d /root/k3ep16-logs;
  stat -f -c '%T %b' /root/k3ep16-logs; } 2>&1 | sha256sum"""
RUN_OPTIONS = ("NetworkMode", "IpcMode", "PidMode", "ShmSize", "CapAdd", "Devices", "Privileged", "SecurityOpt",
               "GroupAdd", "Binds")


def fingerprint(rig, node) -> tuple:
    files, host = ssh(rig, node, NODE_FILES), ssh(rig, node, NODE_HOST)
    assert files.returncode == 0 and host.returncode == 0, files.stderr + host.stderr
    client = docker.DockerClient(base_url=f"unix://{node.docker_socket}")
    try:
        ours = client.containers.get("k3ep16")
        containers = sorted((c.name, c.status, c.attrs["Config"]["Image"]) for c in client.containers.list(all=True))
        archive, _ = ours.get_archive("/app")  # the files as the engine has them (no exec, no times)
        with tarfile.open(fileobj=io.BytesIO(b"".join(archive))) as tar:
            sizes = sorted((m.name, m.size) for m in tar.getmembers() if m.isfile())
        run = {k: ours.attrs["HostConfig"].get(k) for k in RUN_OPTIONS}
        listed = ours.top(ps_args="-eo pid,args")["Processes"]
        processes = sorted(row[-1] for row in listed if "sleep infinity" not in row[-1])
        return (files.stdout, host.stdout, containers, sizes, sorted(ours.attrs["Config"]["Env"] or []), ours.logs(),
                run, processes)
    finally:
        client.close()


def fingerprints(rig) -> list[tuple]:
    with ThreadPoolExecutor(len(rig.nodes)) as pool:
        return list(pool.map(lambda node: fingerprint(rig, node), rig.nodes))


@pytest.fixture(scope="module")
def healthy_fingerprints(rig):
    rig.apply("healthy")
    return fingerprints(rig)


@pytest.mark.parametrize("name", scenario_names("gfx1250"))
def test_every_scenario_takes_effect_on_exactly_its_nodes(rig, healthy_fingerprints, name):
    rig.apply(name)
    parts = ("node files", "host resources", "containers", "container files", "container env", "container log",
             "container run options", "container processes")
    changed = {i + 1: [part for part, a, b in zip(parts, now, before, strict=True) if a != b]
               for i, (now, before) in enumerate(zip(fingerprints(rig), healthy_fingerprints, strict=True))}
    # a scenario that changes nothing is a broken one
    assert [i for i, what in changed.items() if what] == sorted(load_scenario(name)["nodes"]), changed


def test_stop_leaves_nothing_running_and_restarts(rig):
    """Runs last in this module: stops the session rack, checks, and starts it again for later tests."""
    workdir = str(rig.workdir)
    assert rig.pids_matching(workdir)  # sshd and dockerd command lines name the workdir
    started = time.monotonic()
    rig.stop()
    stop_s = time.monotonic() - started
    rig.stop()  # idempotent
    assert rig.pids_matching(workdir) == []
    assert not rig.workdir.exists()
    for node in rig.nodes:
        with pytest.raises(OSError):
            socket.create_connection((node.host, node.port), timeout=1).close()
    started = time.monotonic()
    rig.start()
    start_s = time.monotonic() - started
    print(f"rig stop {stop_s:.2f} s, start {start_s:.2f} s")
    assert ssh(rig, rig.nodes[0], "true").returncode == 0
