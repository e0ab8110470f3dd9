"""Commands that need one fact of the node's Docker engine (EngineFactCommand): the fact from the API,
then the command run for real through the local transport (a real sh, the real /proc) with the fact as
its last argument. The engine here is a stand-in for the Docker SDK's APIClient that counts what it is
asked; the rig's e2e test (tests/e2e/test_engine_facts.py) reads real engines over real SSH."""
import os
import secrets
import shlex
import shutil
import subprocess
import time

import docker
import psutil
import pytest

from k3doctor import testing
from k3doctor.deadline import Deadline
from k3doctor.gather import snapshot
from k3doctor.gather.node_script import gather, gather_shell, gather_with_facts
from k3doctor.views.container import parse_rank_envs, rank_envs
from k3doctor.views.host import docker_root_free_space, spaces
from k3doctor.readings import (
    CONTAINER_PID,
    DOCKER_ROOT_DIR,
    Command,
    CommandReading,
    ContainerInspect,
    ContainerReading,
    Docker,
    DockerReading,
    EngineFactCommand,
    Unavailable,
    sh_with_fact,
)
from k3doctor.transport.local import LocalTransport

NOW = "2026-12-02T03:00:00Z"
DOCKER_CLI = """#!/bin/sh
echo "$*" >> "$K3_DOCKER_CLI_LOG"
echo "a docker CLI was started" >&2; exit 1
"""


class Api:
    """The engine as the SDK's APIClient answers: ``info()``, ``inspect_container``, ``containers``,
    ``events``; ``calls`` is what it was asked, in order; ``down`` makes every call fail as the SDK does."""

    def __init__(self, root="/var/lib/docker", containers=None, down=None):
        self.root, self.by_name, self.down, self.calls = root, containers or {}, down, []

    def _ask(self, what):
        self.calls.append(what)
        if self.down:
            raise docker.errors.DockerException(self.down)

    def info(self):
        self._ask("info")
        return {"SystemTime": NOW, "DockerRootDir": self.root} if self.root is not None else {"SystemTime": NOW}

    def inspect_container(self, name):
        self._ask(f"inspect {name}")
        if name not in self.by_name:
            raise docker.errors.NotFound(f"404 Client Error: Not Found (\"No such container: {name}\")")
        running, pid = self.by_name[name]
        return {"Name": f"/{name}", "Id": "c0ffee", "Image": "sha256:1", "Config": {"Image": "img", "Env": []},
                "State": {"Running": running, "Status": "running" if running else "exited", "Pid": pid},
                "HostConfig": {}, "Mounts": []}

    def containers(self, all=False):
        self._ask("containers")
        return []

    def events(self, since, until, decode):
        self._ask("events")
        return iter(())


class Engine(LocalTransport):
    """This machine, with ``api`` as its Docker engine."""

    def __init__(self, api):
        super().__init__("here")
        self.api_stub = api

    def docker(self, deadline):
        api = self.api_stub

        class Client:
            def __init__(self):
                self.api = api

            def close(self):
                api.calls.append("close")

        return Client()


@pytest.fixture(autouse=True)
def no_docker_cli(tmp_path, monkeypatch):
    """A `docker` first on PATH that logs its arguments: the tests assert it never runs."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "docker").write_text(DOCKER_CLI)
    (bin_ / "docker").chmod(0o755)
    log = tmp_path / "docker-cli.log"
    monkeypatch.setenv("PATH", f"{bin_}:{os.environ['PATH']}")
    monkeypatch.setenv("K3_DOCKER_CLI_LOG", str(log))
    yield
    assert not log.exists(), f"the docker CLI was started: {log.read_text()}"


def run(api, specs, deadline_s=20.0, command_timeout_s=10.0):
    transport = Engine(api)
    return gather(transport, specs, command_timeout_s=command_timeout_s, deadline_s=deadline_s), transport


KEEP = ("NCCL_MNNVL_ENABLE",)


# ------------------------------------------------------------------------------------------- fact -> script

def test_the_docker_root_comes_from_the_engine_and_reaches_stat_as_an_argument(tmp_path):
    marker = f"k3pwned-{secrets.token_hex(4)}"  # where the shell runs: this process's directory
    root = tmp_path / f"it's $(touch {marker}) `touch {marker}` root"
    root.mkdir()
    spec = docker_root_free_space()
    got, transport = run(Api(root=str(root)), [spec])
    [space] = spaces(got[spec], 1)
    assert space.path == str(root) and space.fs is not None and space.fs.total_bytes > 0
    assert not os.path.exists(marker)  # a value, never script text
    assert shlex.split(got[spec].command)[-2:] == ["k3doctor", str(root)]
    assert transport.round_trips == 1  # the fact's command: one exec (the stand-in engine takes none)


def test_a_docker_root_missing_on_this_host_reads_absent_as_before(tmp_path):
    spec = docker_root_free_space()
    got, _ = run(Api(root=str(tmp_path / "elsewhere")), [spec])
    [space] = spaces(got[spec], 1)
    assert (space.path, space.fs) == (str(tmp_path / "elsewhere"), None)


def test_engine_readings_share_one_info_and_one_inspect_per_container_and_one_exec():
    api = Api(containers={"k3ep16": (True, os.getpid()), "other": (False, 0)})
    specs = [Docker(), docker_root_free_space(), ContainerInspect("k3ep16"), rank_envs("k3ep16", KEEP),
             rank_envs("other", KEEP), Command(("echo", "shell"))]
    got, transport = run(api, specs)
    assert sorted(api.calls) == sorted(["info", "containers", "events", "inspect k3ep16", "inspect other", "close"])
    assert isinstance(got[specs[0]], DockerReading) and isinstance(got[specs[2]], ContainerReading)
    assert got[specs[2]].record["running"] is True
    assert all(isinstance(got[s], CommandReading) and got[s].ok for s in specs[1:2] + specs[3:])
    assert parse_rank_envs(got[specs[4]].stdout) is None  # not running: State.Pid 0
    assert transport.round_trips == 2  # the node's script, and one exec for every fact's command


def test_a_container_that_is_not_running_reads_as_notrunning_as_before():
    spec = rank_envs("k3ep16", KEEP)
    got, _ = run(Api(containers={"k3ep16": (False, 0)}), [spec])
    assert (got[spec].rc, got[spec].stdout) == (0, "@notrunning\n")
    assert parse_rank_envs(got[spec].output()) is None


def test_the_ranks_in_the_containers_mount_namespace_are_found_with_only_kept_values(tmp_path):
    """A process titled like an ATOM rank in this test's mount namespace (the container's PID given is
    this process: same namespace), with a kept variable and a secret one."""
    rank = tmp_path / "ATOM::DP4TP0"
    shutil.copy(shutil.which("sleep"), rank)
    token = f"{60 + secrets.randbelow(10**6) / 10**7:.7f}"
    env = {"PATH": os.environ["PATH"], "NCCL_MNNVL_ENABLE": "1", "HF_TOKEN": "k3SECRET"}
    proc = subprocess.Popen([str(rank), token], env=env)
    try:
        spec = rank_envs("k3ep16", KEEP)
        got, _ = run(Api(containers={"k3ep16": (True, os.getpid())}), [spec])
        ranks = parse_rank_envs(got[spec].output())
    finally:
        proc.kill()
        proc.wait()
    [mine] = [r for r in ranks if r.pid == proc.pid]
    assert (mine.title, mine.rank) == ("ATOM::DP4TP0", 4)
    assert mine.env["NCCL_MNNVL_ENABLE"] == "1" and mine.env["HF_TOKEN"] is None
    assert "k3SECRET" not in got[spec].stdout


# ------------------------------------------------------------------------------------------------ failures

def test_a_missing_container_is_unavailable_naming_it_and_runs_nothing():
    spec = rank_envs("k3ep16", KEEP)
    got, transport = run(Api(), [spec])
    assert isinstance(got[spec], Unavailable)
    assert got[spec].reason.startswith("container k3ep16 does not exist on here (404 Client Error")
    assert transport.round_trips == 0


def test_an_engine_that_is_down_is_unavailable_with_its_own_words_for_every_engine_reading():
    api = Api(down="Error while fetching server API version: Cannot connect to the Docker daemon")
    specs = [docker_root_free_space(), ContainerInspect("k3ep16"), rank_envs("k3ep16", KEEP)]
    got, transport = run(api, specs)
    reasons = [got[s].reason for s in specs]
    assert reasons == ["Docker engine on here not readable: Error while fetching server API version: "
                       "Cannot connect to the Docker daemon"] + [
                       "Docker engine on here: container k3ep16 not readable: Error while fetching server API "
                       "version: Cannot connect to the Docker daemon"] * 2
    assert api.calls.count("inspect k3ep16") == 1 and transport.round_trips == 0  # asked once, nothing run


def test_an_engine_that_cannot_be_reached_is_tried_once_per_node():
    tries = []

    class Unreachable(Engine):
        def docker(self, deadline):
            tries.append(1)
            raise docker.errors.DockerException("docker system dial-stdio: connect: connection refused")

    specs = [Docker(), docker_root_free_space(), ContainerInspect("k3ep16"), rank_envs("k3ep16", KEEP)]
    transport = Unreachable(Api())
    got = gather(transport, specs, command_timeout_s=10, deadline_s=20)
    assert len(tries) == 1 and transport.round_trips == 0
    assert all("connection refused" in got[s].reason for s in specs)


def test_readings_after_an_engine_that_hung_to_the_deadline_name_the_hang_not_just_the_deadline():
    class Hung(Engine):
        def docker(self, deadline):
            while not deadline.expired:
                time.sleep(0.05)
            raise docker.errors.DockerException("Read timed out (the node deadline closed the API channel)")

    specs = [Docker(), docker_root_free_space(), rank_envs("k3ep16", KEEP)]
    got = gather(Hung(Api()), specs, command_timeout_s=10, deadline_s=1)
    assert [got[s].reason.split(" (engine hung")[0] for s in specs] == [
        "Docker engine on here did not answer within the node deadline of 1s"] * 3


@pytest.mark.parametrize("root", [None, "", "var/lib/docker", 42])
def test_an_absurd_docker_root_is_unavailable_never_statted(root):
    spec = docker_root_free_space()
    got, transport = run(Api(root=root), [spec])
    assert isinstance(got[spec], Unavailable) and "no usable DockerRootDir" in got[spec].reason
    assert transport.round_trips == 0


@pytest.mark.parametrize("pid", [None, -1, "4242", True, 1.5])
def test_an_absurd_container_pid_is_unavailable_never_read_as_not_running(pid):
    spec = rank_envs("k3ep16", KEEP)
    got, transport = run(Api(containers={"k3ep16": (True, pid)}), [spec])
    assert isinstance(got[spec], Unavailable) and "no usable State.Pid" in got[spec].reason
    assert transport.round_trips == 0


def test_a_fact_command_is_bounded_by_the_node_deadline_and_leaves_nothing():
    token = f"{300 + secrets.randbelow(10**6) / 10**7:.7f}"
    spec = sh_with_fact(f"sleep {token}; echo never", DOCKER_ROOT_DIR)
    got, _ = run(Api(), [spec], deadline_s=2, command_timeout_s=60)
    assert isinstance(got[spec], Unavailable) and "node deadline of 2s reached" in got[spec].reason
    left = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", token]]
    assert psutil.wait_procs(left, timeout=5)[1] == []


def test_no_fact_command_runs_once_the_node_deadline_has_passed():
    spec = docker_root_free_space()
    deadline = Deadline(0.1)
    time.sleep(0.2)
    transport = Engine(Api())
    got = gather_with_facts(transport, {spec: "/var/lib/docker"}, command_timeout_s=10, deadline=deadline)
    assert "not run: the node deadline was reached first" in got[spec].reason and transport.round_trips == 0


# ---------------------------------------------------------------------------------------------- the kind

def test_a_fact_command_never_runs_without_its_fact():
    with pytest.raises(TypeError, match="runs with its engine fact"):
        gather_shell(LocalTransport("here"), [docker_root_free_space()], command_timeout_s=5, deadline_s=10)


@pytest.mark.parametrize("fact, container, says", [
    ("Config.Env", None, "unknown engine fact"), (CONTAINER_PID, None, "needs a container"),
    (DOCKER_ROOT_DIR, "k3ep16", "is not a container's")])
def test_a_fact_is_one_the_gatherer_knows(fact, container, says):
    with pytest.raises(ValueError, match=says):
        EngineFactCommand(("sh", "-c", "true", "k3doctor"), fact=fact, container=container)


def test_saved_readings_keep_the_kind_and_a_check_test_gives_it_as_text():
    spec = rank_envs("k3ep16", KEEP)
    reading = CommandReading(" ".join(spec.argv), 0, "@notrunning\n", "")
    [(back, again)] = snapshot.decode_readings(snapshot.encode_readings({spec: reading})).items()
    assert (back, again) == (spec, reading) and type(back) is EngineFactCommand
    given = testing.as_reading(spec, "@notrunning\n")
    assert isinstance(given, CommandReading) and given.output() == "@notrunning\n"
