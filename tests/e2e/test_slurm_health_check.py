"""``k3doctor node --slurm-drain`` against a real slurmctld + slurmd (Debian's slurm-wlm, munge).

k3doctor runs unchanged on this machine; only the GPUs are fake: it runs in a mount namespace that sees a
rig fixture tree where sysfs, amd-smi and dmesg are (tests/slurm_cluster.py). Slurm is real: the drain
is read back with sinfo, the way an admin sees it.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from k3rig import scenario as scenarios
from k3rig.fixtures import DEFAULT_TRAYS, write_tree

from tests.slurm_cluster import NODE, SlurmCluster, k3doctor_argv, missing, on_fake_hardware

pytestmark = pytest.mark.e2e
CHECKS = "ualink-state,kernel-health"  # passive, sysfs and dmesg only: no Docker engine on this machine
FAULTY_NODE = 2  # card-unconfigured: ct14's card1 reads accel_state=unconfigured
UALINK_REASON = "k3doctor: ualink-state gpu1: card1 accel_state 'unconfigured'"


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    """ct14's fixture tree: healthy, with its card1 link untrained, with a dmesg that hangs."""
    base = tmp_path_factory.mktemp("slurm-trees")
    states = {name: scenarios.node_states(scenarios.load(name), DEFAULT_TRAYS)[FAULTY_NODE - 1]
              for name in ("healthy", "card-unconfigured")}
    states["dmesg-hang"] = dataclasses.replace(states["healthy"], tools={"dmesg": "hang"})
    for name, state in states.items():
        write_tree(base / name, state)
    return {name: base / name for name in states}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = missing()
    if why:
        pytest.skip(why)
    with SlurmCluster(tmp_path_factory.mktemp("slurm")) as started:
        yield started
    assert started.gone() == [], "Slurm daemons or k3doctor processes left running"


@pytest.fixture
def in_service(cluster):
    """The node idle and undrained before and after each test."""
    cluster.back_in_service()
    yield cluster
    cluster.back_in_service()


def node_check(cluster, tree: Path, *extra: str, env=None, timeout_s=120) -> subprocess.CompletedProcess:
    argv = k3doctor_argv("node", "--name", "ct14", "--only", CHECKS, "--slurm-drain", "--slurm-node", NODE, *extra)
    return subprocess.run(on_fake_hardware(tree, argv), env=env or cluster.env, capture_output=True, text=True,
                          timeout=timeout_s, cwd=Path(__file__).resolve().parents[2])


def slurm_lines(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("k3doctor: slurm:")]


def test_a_fail_drains_with_k3doctors_reason_and_a_later_pass_resumes(in_service, trees):
    failed = node_check(in_service, trees["card-unconfigured"])
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert slurm_lines(failed) == [f"k3doctor: slurm: drained {NODE}: {in_service.reason()}"]
    assert in_service.drain_state() == "drained"
    assert in_service.reason().startswith(UALINK_REASON) and in_service.reason().endswith("[UALINK-NOT-ACTIVE]")

    again = node_check(in_service, trees["card-unconfigured"])  # the next health check, same fault: quiet
    assert again.returncode == 1 and slurm_lines(again) == [] and in_service.drain_state() == "drained"

    healed = node_check(in_service, trees["healthy"])
    assert healed.returncode == 0, healed.stdout + healed.stderr
    assert slurm_lines(healed) == [f"k3doctor: slurm: resumed {NODE}: healthy again (its drain was k3doctor's)"]
    assert (in_service.drain_state(), in_service.reason()) == ("idle", "none")
    assert "READY TO LAUNCH" in healed.stdout


def test_a_humans_drain_is_never_resumed_nor_overwritten(in_service, trees):
    in_service.drain("disk swap")
    healthy = node_check(in_service, trees["healthy"])
    assert healthy.returncode == 0 and slurm_lines(healthy) == []
    assert (in_service.drain_state(), in_service.reason()) == ("drained", "disk swap")

    failed = node_check(in_service, trees["card-unconfigured"])
    assert failed.returncode == 1
    assert (in_service.drain_state(), in_service.reason()) == ("drained", "disk swap")
    [line] = slurm_lines(failed)
    assert "left as it is: already drained with reason 'disk swap' (not k3doctor's)" in line
    assert UALINK_REASON in line


def test_an_inconclusive_run_neither_drains_nor_resumes(in_service, trees):
    inconclusive = node_check(in_service, trees["dmesg-hang"], "--timeout", "2")
    assert inconclusive.returncode == 2, inconclusive.stdout + inconclusive.stderr
    assert in_service.drain_state() == "idle"
    [line] = slurm_lines(inconclusive)
    assert "left as it is: the run was inconclusive" in line

    in_service.drain(f"{UALINK_REASON} [UALINK-NOT-ACTIVE]")  # as an earlier run of k3doctor left it
    still = node_check(in_service, trees["dmesg-hang"], "--timeout", "2")
    assert still.returncode == 2 and in_service.drain_state() == "drained"
    assert "k3doctor's drain stays" in slurm_lines(still)[0]


@pytest.mark.parametrize("scontrol", ["hangs", "missing"])
def test_a_hung_or_missing_scontrol_ends_by_its_deadline_with_one_line(in_service, trees, tmp_path, scontrol):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sleeper = bin_dir / "k3doctor-test-scontrol-sleep"  # its command line names this test: no leftovers
    shutil.copy("/bin/sleep", sleeper)
    if scontrol == "hangs":  # first on PATH
        (bin_dir / "scontrol").write_text(f"#!/bin/sh\n{sleeper} 300 &\nexec {sleeper} 301\n")
        (bin_dir / "scontrol").chmod(0o755)
        path = f"{bin_dir}:{os.environ.get('PATH', os.defpath)}"
    else:  # this machine's tools, all but scontrol
        for directory in ("/usr/sbin", "/usr/bin"):
            for tool in os.listdir(directory):
                if tool != "scontrol" and not (bin_dir / tool).exists():
                    os.symlink(f"{directory}/{tool}", bin_dir / tool)
        path = str(bin_dir)
    env = {**in_service.env, "PATH": path}
    started = time.monotonic()
    proc = node_check(in_service, trees["card-unconfigured"], "--slurm-timeout", "2", env=env)
    took = time.monotonic() - started
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the FAIL stands; Slurm could not be told
    why = ("`scontrol show node` did not answer within the 2 s Slurm budget" if scontrol == "hangs"
           else "scontrol not found")
    lines = [line for line in proc.stdout.splitlines() if "slurm-drain" in line]
    assert lines == [f"ERROR slurm-drain ct14: {why}{'' if scontrol == 'hangs' else f' (PATH={path})'}; "
                     f"Slurm node {NODE} left as it is  [SLURM-CALL-FAILED]"], proc.stdout
    assert slurm_lines(proc) == [] and "Traceback" not in proc.stderr
    assert took < 60  # Slurm kills a HealthCheckProgram at 60 s; a hang costs --slurm-timeout, not that
    assert in_service.drain_state() == "idle"
    assert [p for p in os.listdir("/proc") if p.isdigit() and _names(p, str(sleeper))] == []


def test_slurmds_own_health_check_drains_and_resumes_the_node(trees, tmp_path):
    """slurm.conf's HealthCheckProgram is a wrapper like the manual's (docs/use.md; PATH set, then exec k3doctor node
    --slurm-drain --format npd; here also onto the fake hardware): slurmd itself runs it (no PATH, only
    $SLURMD_NODENAME, so no --slurm-node), and k3doctor drains the node on the fault and resumes it once
    the hardware is healthy."""
    why = missing()
    if why:
        pytest.skip(why)
    current = tmp_path / "hardware"  # which fixture tree the node has now
    current.symlink_to(trees["card-unconfigured"])
    wrapper = tmp_path / "k3doctor-health"
    node = k3doctor_argv("node", "--name", "ct14", "--only", CHECKS, "--slurm-drain", "--format", "npd")
    wrapper.write_text("#!/bin/sh\n"
                       "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
                       f"SLURM_CONF={shlex.quote(str(tmp_path / 'slurm' / 'slurm.conf'))}\n"
                       "export PATH SLURM_CONF\n"
                       f"exec {shlex.join(on_fake_hardware(current, node))}\n")
    wrapper.chmod(0o755)
    with SlurmCluster(tmp_path / "slurm", health_check=str(wrapper), health_interval_s=3,
                      ready=("idle", "drained")) as cluster:
        cluster.wait_for(lambda: cluster.drain_state() == "drained", "the health check's drain", timeout_s=90)
        assert cluster.reason().startswith(UALINK_REASON)
        current.unlink()
        current.symlink_to(trees["healthy"])
        cluster.wait_for(lambda: cluster.drain_state() == "idle", "the health check's resume", timeout_s=90)
        assert cluster.reason() == "none"
    assert cluster.gone() == []


def _names(pid: str, text: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return text.encode() in fh.read()
    except OSError:
        return False


def test_rack_free_names_a_foreign_slurm_job_on_the_node_and_takes_its_own_job_as_ours(in_service, trees):
    """§30: rack-free uses `squeue` + KFD. A real job on the real node (its process a plain `sleep`: no GPU,
    no container, nothing `docker ps` or KFD would show) is a FAIL naming it; run inside that job
    ($SLURM_JOB_ID), k3doctor takes it as its own allocation; as a health check (--slurm-drain) it leaves
    Slurm's own allocations alone."""
    job = in_service.run("sbatch", "--parsable", "--output=/dev/null", "-J", "agentx|c8", "--wrap",
                         "sleep 600").stdout.strip()
    base = ("node", "--name", "ct14", "--only", "rack-free", "--set", f"rack-free.slurm_node={NODE}",
            "--format", "json")
    try:
        in_service.wait_for(lambda: in_service.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING",
                            f"job {job} running")
        for extra, env, expected in (((), {}, [("FAIL", f"Slurm job {job} (agentx|c8) of root is RUNNING on this "
                                                        "node: the node is allocated to someone else (§30)")]),
                                     ((), {"SLURM_JOB_ID": job}, []),
                                     (("--slurm-drain", "--slurm-node", NODE), {}, [])):
            proc = subprocess.run(on_fake_hardware(trees["healthy"], k3doctor_argv(*base, *extra)),
                                  env={**in_service.env, **env}, capture_output=True, text=True, timeout=120,
                                  cwd=Path(__file__).resolve().parents[2])
            results = json.loads(proc.stdout)["results"]
            said = [(r["status"], r["message"]) for r in results if r["status"] in ("FAIL", "ERROR")
                    and "Slurm" in r["message"]]
            assert said == expected, results  # no Docker engine on this machine: that ERROR is not Slurm's
        assert in_service.drain_state() != "drained"
    finally:
        in_service.run("scancel", job)
        in_service.wait_for(lambda: in_service.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "",
                            f"job {job} gone")
