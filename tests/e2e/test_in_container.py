"""Every reading of one container in one exec through the node's Docker API (no docker CLI on the node), over
the rig's real sshd and dockerd: each reading keeps its own exit status, output, timeout and cap."""
import socket
import threading
import time

import docker
import pytest
from k3rig.container import LAUNCH_SCRIPT

from k3doctor.deadline import Deadline
from k3doctor.gather.engine_reads import SharedEngine, gather_exec
from k3doctor.gather.node_script import NODE_READER, _in_container_readings, gather
from k3doctor.inventory.load import load_inventory
from k3doctor.judging.runner import RunOptions, make_transport
from k3doctor.readings import Command, ContainerInspect, in_container
from k3doctor.transport.local import LocalTransport
from tests.conftest import private_rack
from tests.e2e.faults import docker_cli_recorded

pytestmark = pytest.mark.e2e

LEFT_BEHIND = "ls -d /tmp/k3doctor.* /dev/shm/k3doctor.* 2>/dev/null | wc -l"  # scratch dirs in the container


@pytest.fixture(scope="module")
def own_rack(tmp_path_factory):
    """One node of its own: what these tests do leaves events in its engine (a created container, some
    sixty execs) that the shared rack's rack-free check would then report or lose its history to."""
    yield from private_rack(tmp_path_factory, "in-container", nodes=1)


@pytest.fixture
def node(own_rack):
    inv = load_inventory(str(own_rack.inventory_path))
    transport = make_transport(inv.nodes[0], inv, RunOptions())
    transport.connect()
    yield own_rack.nodes[0], transport
    transport.close()


def left_behind(rig_node) -> bytes:
    """How many k3doctor scratch directories our container holds (looked at from this side, not by k3doctor)."""
    engine = docker.DockerClient(base_url=f"unix://{rig_node.docker_socket}")
    try:
        return engine.containers.get("k3ep16").exec_run(["sh", "-c", LEFT_BEHIND]).output
    finally:
        engine.close()


def read(transport, specs, command_timeout_s=10):
    return gather(transport, specs, command_timeout_s=command_timeout_s, deadline_s=60)


def test_a_containers_readings_share_one_exec_through_the_api_and_keep_their_own_outcomes(node):
    rig_node, transport = node
    stat = in_container("k3ep16", "stat", "-c", "%s %n", "--", "/bin/busybox", "/nope")
    count = in_container("k3ep16", "sh", "-c", "ls -A /bin | wc -l")
    failing = in_container("k3ep16", "sh", "-c", "echo out; echo err >&2; exit 3")
    between = Command(("echo", "on the node"))
    with docker_cli_recorded(rig_node) as cli:
        got = read(transport, [stat, between, count, failing])
        started = cli()
    assert started == []  # no `docker exec` (nor any docker CLI) started on the node
    assert got[stat].rc == 1 and got[stat].stdout.endswith(" /bin/busybox\n") and "/nope" in got[stat].stderr
    assert int(got[count].output()) >= 8
    assert (got[failing].rc, got[failing].stdout, got[failing].stderr) == (3, "out\n", "err\n")
    assert got[failing].command == "docker exec k3ep16 sh -c 'echo out; echo err >&2; exit 3'"
    assert got[between].output() == "on the node\n"
    assert left_behind(rig_node) == b"0\n"  # its temporary directory is gone


def test_each_container_gets_its_own_exec_and_a_missing_or_stopped_one_reads_as_the_engines_answer(node):
    rig_node, transport = node
    engine = docker.DockerClient(base_url=f"unix://{rig_node.docker_socket}")
    stopped = engine.containers.create("rocm/fw-bringup:gfx1250-atom-20260918-ep8", ["true"], name="k3-stopped")
    try:
        ours, gone, idle = (in_container(c, "echo", c) for c in ("k3ep16", "gone", "k3-stopped"))
        got = read(transport, [ours, gone, in_container("gone", "true"), idle])
    finally:
        stopped.remove(force=True)
        engine.close()
    assert got[ours].output() == "k3ep16\n"
    for spec in (gone, in_container("gone", "true")):
        assert (got[spec].rc, got[spec].stderr.strip()) == (1, "Error response from daemon: No such container: gone")
    assert got[idle].rc == 1 and "is not running" in got[idle].stderr


def test_a_hung_reading_times_out_alone_and_the_next_one_is_still_read(node):
    _, transport = node
    hung, after = in_container("k3ep16", "sleep", "30"), in_container("k3ep16", "echo", "after")
    got = read(transport, [hung, after], command_timeout_s=1)
    assert got[hung].timed_out and got[hung].rc == 124
    assert got[after].output() == "after\n"
    assert left_behind(node[0]) == b"0\n"


@pytest.mark.parametrize("way", ["ssh", "local socket"])
def test_an_exec_is_read_no_longer_than_its_bound(node, monkeypatch, way):
    rig_node, transport = node
    if way == "local socket":  # `k3doctor node` on the node itself: the engine's unix socket, no SSH
        monkeypatch.setenv("DOCKER_HOST", f"unix://{rig_node.docker_socket}")
        transport = LocalTransport("here")
    engine = SharedEngine(transport, Deadline(60))
    started = time.monotonic()
    try:
        rc, out, err, cut = gather_exec(engine, "k3ep16", ["sh", "-c", "echo one; exec sleep 30"], 2, 4096)
    finally:
        engine.close()
    assert (rc, out, cut) == (124, b"one\n", False)  # as `timeout` says it
    assert time.monotonic() - started < 10


class TcpEngine:
    """The engine's unix socket offered on a loopback TCP port (a ``DOCKER_HOST=tcp://`` engine): each
    connection relayed both ways, the end of one direction passed on as a half-close, as a TCP engine sees it."""

    def __init__(self, unix_path: str):
        self.unix_path = str(unix_path)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            engine.connect(self.unix_path)
            for source, sink in ((client, engine), (engine, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source, sink):
        try:
            while data := source.recv(65536):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close(self):
        self.listener.close()


@pytest.mark.parametrize("way", ["ssh", "local socket", "tcp"])
def test_an_execs_stdin_is_given_whole_and_then_ended(node, monkeypatch, way):
    """``wc -c`` counts to the end of its input: it prints only once the end of the exec's stdin reached it."""
    rig_node, transport = node
    relay = TcpEngine(rig_node.docker_socket) if way == "tcp" else None
    if way != "ssh":  # `k3doctor node` on the node itself: its engine's unix socket, or a TCP engine
        monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{relay.port}" if relay else
                           f"unix://{rig_node.docker_socket}")
        transport = LocalTransport("here")
    if relay:
        monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    engine = SharedEngine(transport, Deadline(60))
    data = b"hello " + b"x" * 200_000  # more than a pipe and a socket buffer hold
    try:
        rc, out, err, cut = gather_exec(engine, "k3ep16", ["sh", "-c", "head -c 6; wc -c"], 10, 4096, stdin=data)
    finally:
        engine.close()
        if relay:
            relay.close()
    assert (rc, out, err, cut) == (0, b"hello 200000\n", "", False)


def test_the_readers_source_goes_on_stdin_and_stays_out_of_the_engines_events(node):
    """An engine keeps each exec's command line in its events, which rack-free reads again on the next run
    (as does any `docker events`): the reader's 16 KB are not put there."""
    rig_node, transport = node
    spec = in_container("k3ep16", "echo", "read by the reader")
    since = time.time() - 1
    got = read(transport, [spec])
    engine = docker.DockerClient(base_url=f"unix://{rig_node.docker_socket}")
    try:
        events = list(engine.api.events(since=since, until=time.time() + 1, decode=True,
                                        filters={"event": "exec_create"}))
    finally:
        engine.close()
    ours = [e["Action"] for e in events if "k3doctor-in-container" in e["Action"]]
    assert got[spec].output() == "read by the reader\n"
    assert len(ours) == 1 and "python3 -I -S -c" in ours[0]
    assert NODE_READER.splitlines()[0] not in ours[0] and len(ours[0]) < 12_000


def test_a_launch_script_is_read_with_the_containers_readings_not_through_the_archive(node):
    """The archive API has dockerd run itself again as `docker-tar` (~80 ms of the node's CPU); the exec that
    takes the container's readings reads the script with them."""
    rig_node, transport = node
    inspect = ContainerInspect("k3ep16", launch_script=LAUNCH_SCRIPT)
    beside = in_container("k3ep16", "echo", "beside")
    since = time.time() - 1
    got = read(transport, [inspect, beside])
    engine = docker.DockerClient(base_url=f"unix://{rig_node.docker_socket}")
    try:
        actions = [e["Action"] for e in engine.api.events(since=since, until=time.time() + 1, decode=True)]
    finally:
        engine.close()
    assert got[beside].output() == "beside\n"
    assert got[inspect].script["error"] is None and "atom.entrypoints.openai_server" in got[inspect].script["launch"]
    assert "archive-path" not in actions and sum(a.startswith("exec_create") for a in actions) == 1, actions


def test_output_past_the_cap_is_cut_in_the_container_and_never_judged(node):
    _, transport = node
    spec = in_container("k3ep16", "sh", "-c", "yes 0123456789 | head -c 100000")
    deadline = Deadline(60)
    engine = SharedEngine(transport, deadline)
    try:
        got = _in_container_readings(engine, [spec], command_timeout_s=10, cap_bytes=4096, deadline=deadline)
    finally:
        engine.close()
    assert got[spec].truncated and 0 < len(got[spec].stdout) < 4096  # its share of the exec's one cap
    assert set(got[spec].stdout) <= set("0123456789\n")


def test_a_quick_commands_output_is_never_lost(node):
    """Its first output can come in the same packet as the engine's answer to the start (then it sits in
    the answer's buffer): before that was read from there, about one quick exec in thirty came back empty."""
    _, transport = node
    engine = SharedEngine(transport, Deadline(60))
    try:
        outputs = [gather_exec(engine, "k3ep16", ["echo", "hi"], 10, 4096)[1] for _ in range(60)]
    finally:
        engine.close()
    assert outputs == [b"hi\n"] * 60
