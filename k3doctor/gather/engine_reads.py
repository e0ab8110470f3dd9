"""A node's Docker engine through the Docker SDK, on the node's own connection (k3doctor/transport/docker_api.py).

One client a node for every engine reading: the containers and recent events (rack-free), our container's
inspect and launch script (launch-config), the facts other readings' commands need (the engine's root
dir, a container's PID: ``EngineFactCommand``) and the exec that takes a container's readings
(``InContainer``: gather.py writes its script). Each reading is bounded by the node's deadline and every
failure is an ``Unavailable`` naming its cause; ``info()`` and each inspect are asked once a node.
"""
from __future__ import annotations

import re
import socket
import ssl
import threading
import time

from k3doctor.deadline import Deadline, seconds
from k3doctor.views.container import hf_cache_dir, host_path, launch_from_script, record_from_inspect
from k3doctor.readings import (
    CONTAINER_HF_CACHE,
    CONTAINER_PID,
    DOCKER_ROOT_DIR,
    CommandReading,
    ContainerInspect,
    ContainerReading,
    Docker,
    DockerReading,
    EngineFactCommand,
    Unavailable,
)
from k3doctor.transport.base import TransportError


def _engine_read(transport, deadline: Deadline | None, what: str, read) -> object:
    """One SDK reading of the node's engine, bounded by the node's deadline: the transport kills the API
    channel on the node at the deadline and closes it here, so an engine that never answers (or trickles a
    byte now and then) ends the read then. Every failure is Unavailable, naming the cause."""
    deadline = deadline or Deadline(120.0)
    if deadline.expired and getattr(transport, "failure", None) is None:  # a failure already met reads as itself
        return Unavailable(f"Docker engine on {transport.node} not read: the node deadline was reached first")
    client = None
    try:
        client = transport.docker(deadline)
        return read(client.api)
    except TransportError as exc:
        return Unavailable(str(exc))
    except Exception as exc:  # docker SDK raises many types; all mean "could not read the engine"
        said = getattr(client, "channel_errors", lambda: "")()  # the node's `docker` names the cause
        detail = said or _short(exc)
        if deadline.expired:
            return Unavailable(f"Docker engine on {transport.node} did not answer within the node deadline "
                               f"of {deadline.budget_s:g}s (engine hung or overloaded?): {detail}")
        return Unavailable(f"Docker engine on {transport.node}{what} not readable: {detail}")
    finally:
        if client is not None:
            client.close()


def gather_docker(transport, spec: Docker, deadline: Deadline | None = None) -> object:
    """Containers (all, never filtered by name) and the engine's recent events, via the SDK."""
    def read(api):
        now = _engine_now(api.info().get("SystemTime", ""))
        containers = api.containers(all=True)
        since = seconds(spec.events_since_s, 1800.0)
        events = list(api.events(since=now - since, until=now, decode=True))
        return DockerReading(containers=containers, events=events, now=now)

    return _engine_read(transport, deadline, "", read)


def gather_container(transport, spec: ContainerInspect, deadline: Deadline | None = None,
                     script_from=None) -> object:
    """Our container's inspect (and launch script) via the SDK, redacted before it is kept anywhere.
    ``script_from()``: the launch script as read inside the container (``cat``, with the container's other
    readings), asked once the inspect is in; used where it is whole and clean, else the script is read through
    the engine's archive API (a stopped container, a file its user cannot read, a script past the exec's share
    of the output cap, an exec still running near the deadline)."""
    import docker

    def read(api):
        try:
            attrs = api.inspect_container(spec.container)
        except docker.errors.NotFound:
            return ContainerReading(None)
        launch = None
        if spec.launch_script:
            launch = {"path": spec.launch_script, "launch": None, "error": None, "cut": False}
            try:
                inside = _clean_text(script_from()) if script_from else None
                text, launch["cut"] = inside or _archived_text(api, spec.container, spec.launch_script)
                launch["launch"] = None if launch["cut"] else launch_from_script(text)
            except docker.errors.NotFound:
                launch["error"] = "no such file in the container"
        return ContainerReading(record_from_inspect(attrs, set(spec.keep)), launch)

    return _engine_read(transport, deadline, f": container {spec.container}", read)


def gather_engine_fact(transport, spec: EngineFactCommand, deadline: Deadline | None = None) -> object:
    """The engine fact ``spec`` needs, as the text of its last argument, through the SDK (asked once per node
    with the other engine readings, see _AskedOnce); Unavailable naming why the engine cannot give it."""
    what = f": container {spec.container}" if spec.container else ""
    return _engine_read(transport, deadline, what, lambda api: _FACTS[spec.fact](api, spec, transport.node))


def _docker_root_dir(api, spec: EngineFactCommand, node: str) -> object:
    root = api.info().get("DockerRootDir")
    if not isinstance(root, str) or not root.startswith("/"):
        return Unavailable(f"Docker engine on {node} reports no usable DockerRootDir ({root!r})")
    return root


def _container_pid(api, spec: EngineFactCommand, node: str) -> object:
    """State.Pid as the engine has it: 0 for a container that is not running (its command decides)."""
    import docker

    try:
        state = api.inspect_container(spec.container).get("State") or {}
    except docker.errors.NotFound as exc:
        return Unavailable(f"container {spec.container} does not exist on {node} ({_short(exc)})")
    pid = state.get("Pid")
    if type(pid) is not int or pid < 0:
        return Unavailable(f"Docker engine on {node}: container {spec.container} has no usable State.Pid ({pid!r})")
    return str(pid)


def _hf_cache_source(api, spec: EngineFactCommand, node: str) -> object:
    """The host path behind the container's HF cache (its Env and Mounts): the drafter is read there on the node
    before the container runs; a cache no mount holds is Unavailable saying so (its own layer is not read)."""
    import docker

    try:
        attrs = api.inspect_container(spec.container)
    except docker.errors.NotFound as exc:
        return Unavailable(f"container {spec.container} does not exist on {node} ({_short(exc)})")
    config = attrs.get("Config") or {}
    cache = hf_cache_dir(dict(e.split("=", 1) for e in config.get("Env") or () if "=" in e))
    if cache is None:
        return Unavailable(f"container {spec.container} names no HF cache (HF_HUB_CACHE / HF_HOME)")
    host = host_path(cache, [(m.get("Source"), m.get("Destination")) for m in attrs.get("Mounts") or ()])
    if host is None:
        return Unavailable(f"no mount of container {spec.container} holds its HF cache {cache}")
    return host


_FACTS = {DOCKER_ROOT_DIR: _docker_root_dir, CONTAINER_PID: _container_pid, CONTAINER_HF_CACHE: _hf_cache_source}


def gather_exec(transport, container: str, cmd: list, timeout_s: float, cap_bytes: int,
                deadline: Deadline | None = None, stdin: bytes = b"") -> object:
    """``cmd`` run in ``container`` through the API as ``docker exec`` runs it (create, start, inspect: no
    docker CLI on the node): (exit status, stdout bytes, stderr text, cut). At most ``cap_bytes`` of either
    stream are taken (then ``cut``, status None). The output is read for ``timeout_s`` at most (the command's
    own bound; status 124 when it ran out, as ``timeout`` says it), never past the node's deadline. A
    container that does not exist or is not running is the engine's own answer, as the CLI prints it (1).
    ``stdin``: the command's whole input, then its end (``docker exec -i``); none: no stdin at all."""
    import docker

    def read(api):
        try:
            exec_id = api.exec_create(container, cmd, stdout=True, stderr=True, stdin=bool(stdin))["Id"]
        except docker.errors.APIError as exc:  # 404 no such container, 409 not running
            if exc.response is None or exc.response.status_code not in (404, 409):
                raise
            return 1, b"", f"Error response from daemon: {exc.explanation or exc}\n", False
        sock = api.exec_start(exec_id, socket=True)
        ran_out = threading.Event()

        def stop_reading():
            ran_out.set()
            _wake_and_close(sock)

        bound = min(timeout_s, deadline.remaining()) if deadline else timeout_s
        timer = threading.Timer(max(0.0, bound), stop_reading)
        timer.daemon = True
        timer.start()
        out, err, cut = bytearray(), bytearray(), False
        try:
            if stdin:
                _send_input(sock, stdin)
            for stream, data in _exec_frames(_response_file(sock)):
                (out if stream == STDOUT else err).extend(data)
                if len(out) > cap_bytes or len(err) > cap_bytes:
                    cut = True
                    break
        finally:
            timer.cancel()
            _wake_and_close(sock)
        rc = None if cut else 124 if ran_out.is_set() else api.exec_inspect(exec_id).get("ExitCode")
        return rc, bytes(out[:cap_bytes]), err[:cap_bytes].decode("utf-8", "replace"), cut

    return _engine_read(transport, deadline, f": container {container}", read)


STDOUT = 1  # the stream byte of an exec's multiplexed output (2: stderr)


def _response_file(sock):
    """The buffered file the engine's answer to the exec's start was read from. Its stream is read from
    there, not from ``sock``: the first output of a quick command can come in the same packet as the
    answer's headers, and then sits in that file's buffer (reading ``sock`` itself would lose it)."""
    return sock._response.raw._fp.fp  # the SDK keeps the response on the socket it hands out


def _exec_frames(fp):
    """(stream, bytes) of an exec's multiplexed output: an 8-byte header (stream, 3 zero bytes, big-endian
    length) before each block; ends at the end of the stream (or a cut-off block, kept as far as it came)."""
    while True:
        head = _read_exactly(fp, 8)
        if len(head) < 8:
            return
        size = int.from_bytes(head[4:8], "big")
        data = _read_exactly(fp, size)
        yield head[0], data
        if len(data) < size:
            return


def _read_exactly(fp, size: int) -> bytes:
    parts, got = [], 0
    while got < size:
        try:
            data = fp.read(size - got)
        except (OSError, EOFError, ValueError):  # closed under the read (the exec's bound, the node deadline)
            break
        if not data:
            break
        parts.append(data)
        got += len(data)
    return b"".join(parts)


def _send_input(sock, data: bytes) -> None:
    """``data`` as an exec's stdin, then its end where the stream can say so: an SSH channel sends EOF (sshd
    shuts the engine socket's writing side; ``docker system dial-stdio`` does the same), a plain socket (a
    local or TCP engine; the SDK hands out the latter as a ``SocketIO``) shuts its writing side. A TLS stream
    cannot be half-closed without ending TLS: its stdin stays open, which the reader does not wait for (it
    reads its source's length). A stream closed under the write (the exec's bound) ends the reading, no more."""
    raw = getattr(sock, "_sock", sock)
    try:
        raw.sendall(data)
        if hasattr(raw, "shutdown_write"):
            raw.shutdown_write()
        elif not isinstance(raw, ssl.SSLSocket):
            raw.shutdown(socket.SHUT_WR)
    except (OSError, EOFError):
        pass


def _wake_and_close(sock) -> None:
    """Close an exec's stream so that a read blocked on it returns: an SSH channel wakes its reader when
    closed; a plain socket (a local or TCP engine) only once it is shut down."""
    raw = getattr(sock, "_sock", sock)
    if isinstance(raw, socket.socket):
        try:
            raw.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    sock.close()


LAUNCH_SCRIPT_CAP_BYTES = 1 << 20  # a launch script is a few KB; more is not read (nor judged)
ARCHIVE_CHUNK_BYTES = 64 << 10  # what one read of the archive takes (the SDK's default is 2 MiB)


def _clean_text(reading: object, cap_bytes: int = LAUNCH_SCRIPT_CAP_BYTES) -> tuple | None:
    """(text, False) of a file read whole by ``cat`` (exit 0, nothing on stderr, not cut, within the cap),
    else None."""
    if not isinstance(reading, CommandReading) or reading.rc != 0 or reading.stderr or reading.truncated \
            or reading.timed_out or len(reading.stdout.encode()) > cap_bytes:
        return None
    return reading.stdout, False


def _archived_text(api, container: str, path: str, cap_bytes: int = LAUNCH_SCRIPT_CAP_BYTES) -> tuple:
    """(text, cut) of a file of a container through the archive API (a tar of one member); at most
    ``cap_bytes`` of it cross the connection, and ``cut`` says the file is longer than that."""
    import io
    import tarfile

    stream, _ = api.get_archive(container, path, chunk_size=ARCHIVE_CHUNK_BYTES)
    chunks, got = [], 0
    for chunk in stream:  # the tar headers (a PAX one too), then the file: stop once the cap is in
        chunks.append(chunk)
        got += len(chunk)
        if got > cap_bytes + ARCHIVE_CHUNK_BYTES:
            break
    stream.close()
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks)), mode="r|") as tar:
        member = tar.next()
        if member is None or not member.isfile():
            raise ValueError(f"{path} is not a regular file")
        data = tar.extractfile(member).read(cap_bytes)
    return data.decode("utf-8", "replace"), member.size > cap_bytes


def _engine_now(stamp: str) -> float:
    """The engine's clock (RFC 3339, nanoseconds), so the events window is right even when clocks are skewed."""
    from datetime import datetime

    match = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", stamp)
    if not match:
        return time.time()
    head, frac, zone = match.groups()
    micro = (frac or ".0")[:7]
    return datetime.fromisoformat(f"{head}{micro}{'+00:00' if zone == 'Z' else zone}").timestamp()


def _short(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


class SharedEngine:
    """One Docker SDK client (one channel on the node's connection) for every engine reading of a node,
    bounded by the node's deadline; an engine that could not be reached is not tried again for the next
    reading (each try starts the node's ``docker system dial-stdio``)."""

    def __init__(self, transport, deadline: Deadline):
        self.node, self._transport, self._deadline, self._client = transport.node, transport, deadline, None
        self._api = self.failure = None
        self._lock = threading.Lock()  # a container's exec reads beside the other readings: one client still

    def docker(self, deadline: Deadline | None = None):
        with self._lock:
            if self.failure is not None:
                raise self.failure
            if self._client is None:
                try:
                    self._client = self._transport.docker(self._deadline)
                except Exception as exc:  # noqa: BLE001 -- every reading of the node reads as this failure
                    self.failure = exc
                    raise
                self._api = _AskedOnce(self._client.api)
            return _Borrowed(self._client, self._api)

    def close(self):
        if self._client is not None:
            self._client.close()


class _AskedOnce:
    """The engine's API as one node's readings share it: ``info()`` and each container's inspect are asked
    once, by whichever reading needs them first; the others get the same answer (or the same failure)."""

    SHARED = ("info", "inspect_container")

    def __init__(self, api):
        self._api, self._asked = api, {}

    def __getattr__(self, name):
        call = getattr(self._api, name)
        if name not in self.SHARED:
            return call

        def once(*args, **kw):
            key = (name, args, tuple(sorted(kw.items())))
            if key not in self._asked:
                try:
                    self._asked[key] = (call(*args, **kw), None)
                except Exception as exc:  # noqa: BLE001 -- whoever asks next gets this failure too
                    self._asked[key] = (None, exc)
            answer, failure = self._asked[key]
            if failure is not None:
                raise failure
            return answer

        return once


class _Borrowed:
    """The shared client as one reading sees it: closing it is the engine's job, not the reading's."""

    def __init__(self, client, api):
        self.api = api
        self.channel_errors = getattr(client, "channel_errors", lambda: "")

    def close(self):
        pass
