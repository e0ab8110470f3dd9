"""Bad input is one line and exit 3; logins fail with the reason; saved files keep secrets on the node.

Issue 9 §3 and §4, through the real CLI: inventories and arguments a careless or hostile user
writes, a port that never says an SSH banner (a real silent socket), known_hosts with
``@revoked`` lines and a missing identity file against the rig's real sshd, and
``--save-readings`` of real containers holding tokens on the rig's real dockerd.
"""
import os
import socket
import stat
import subprocess
import threading
import time

import docker
import pytest
import yaml

from tests.conftest import private_rack
from tests.e2e.cli import k3, k3json

pytestmark = pytest.mark.e2e

LOCAL = "nodes:\n  - {name: here, transport: local}\n"
SECRET = "hf_DoNotLeakMe0123456789"


def one_line_exit_3(rc, out, err, needle):
    lines = err.strip().splitlines()
    assert (rc, out) == (3, ""), err
    assert "Traceback" not in err and "internal error" not in err
    assert needle in err and len(lines) <= 2, err  # "invalid inventory:" and the problem


@pytest.mark.parametrize("data,needle", [
    ("nodes:\n  - {name: caf\xe9, transport: local}\n".encode("latin-1"), ":2: not UTF-8: byte 0xe9"),
    (LOCAL.encode("utf-16"), ":1: the file is UTF-16; save it as UTF-8"),
    (b"nodes:\n  - {name: here, transport: !!python/object/apply:os.system [touch /tmp/k3-pwned]}\n",
     ":2: nodes[0].transport: YAML tag !!python/object/apply:os.system is not allowed"),
    (b"cluster: {image: !custom x}\n" + LOCAL.encode(), ":1: cluster.image: YAML tag !custom is not allowed"),
    (b"cluster:\n  checks:\n    ? [rack-free]\n    : {}\n" + LOCAL.encode(), ":3: cluster.checks: keys must be plain"),
    (b"cluster: " + b"[" * 3000 + b"]" * 3000 + b"\n" + LOCAL.encode(), ":1: nested too deeply"),
    (b"cluster:\n  checks: {rocjitsu-store: {prefix: null}}\n" + LOCAL.encode(),
     ":2: cluster.checks.rocjitsu-store.prefix: expected a string, got None"),
    (b"cluster:\n  checks: {rack-free: {window_min: .inf}}\n" + LOCAL.encode(),
     ":2: cluster.checks.rack-free.window_min: expected a finite number"),
    (b"ssh: {node_deadline_s: .inf, command_timeout_s: 1}\n" + LOCAL.encode(), ":1: ssh.node_deadline_s: expected a "
                                                                                "finite number"),
    (b"cluster: {container: k3ep16, container: -it}\n" + LOCAL.encode(), ":1: cluster.container: duplicate key"),
    (b"nodes:\n  - {name: \"he\\0re\", transport: local}\n", ":2: nodes[0].name: control character U+0000"),
    (b"nodes:\n  - {name: here, transport: local, container: --privileged}\n",
     ":2: nodes[0].container: expected a Docker container name"),
], ids=["latin-1", "utf-16", "python-tag", "custom-tag", "list-key", "deep", "prefix-null", "window-inf",
        "deadline-inf", "duplicate-key", "nul-in-name", "option-as-container"])
def test_an_inventory_no_one_should_write_is_one_line_exit_3(tmp_path, data, needle):
    path = tmp_path / "inv.yaml"
    path.write_bytes(data)
    one_line_exit_3(*k3("check", "--nodes", path), f"{path}{needle}")
    assert not os.path.exists("/tmp/k3-pwned")


def test_one_nodes_bad_override_stops_the_run_before_any_node_is_touched(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text("nodes:\n  - {name: a, transport: local}\n  - name: b\n    transport: local\n"
                    "    checks: {rocjitsu-store: {prefix: null}}\n")
    one_line_exit_3(*k3("check", "--nodes", path), f"{path}:5: nodes[1].checks.rocjitsu-store.prefix")


@pytest.mark.parametrize("args,needle", [
    (("--set", "patch-integrity.required=maybe"), "required takes one of auto, yes, no"),
    (("--set", "ualink-state.half_station=x"), "half_station takes one of fail, warn"),
    (("--pairs", "x;y"), "'x' is not two different node names"),
    (("--pairs", "here,nowhere"), "unknown node(s) nowhere"),
    (("--timeout", "inf", "--node-deadline", "inf"), "'--timeout': 'inf' is not a number of seconds"),
    (("--node-deadline", "nan"), "'--node-deadline': 'nan' is not a number of seconds"),
    (("--connect-timeout", "1e9"), "'--connect-timeout': '1e9' is not a number of seconds in [0.1, 86400]"),
    (("--set", "rack-free.window_min=.inf"), "expected a finite number"),
    (("--set", "rack-free.window_min=100000"), "window_min takes a number in [0, 1440]"),
    (("--set", "allreduce-probe.sweep_s=1.0e+400"), "is not a valid value"),
    (("--set", "patch-integrity.files={'-n': 7499}"), "files takes a mapping of absolute paths"),
    (("--set", "allreduce-probe.iters=2.5"), "iters takes a whole number >= 1"),
    (("--set", "allreduce-probe.deadline_s=20"), "deadline_s takes a number in [25, 86400]"),
    (("--set", "ualoe-fabric.reference_gbps={read: fast}"), "reference_gbps takes a mapping of read, write, bidir"),
])
def test_parameters_and_time_settings_are_validated_before_the_run(tmp_path, args, needle):
    path = tmp_path / "inv.yaml"
    path.write_text(LOCAL + "  - {name: there, transport: local}\n")
    started = time.monotonic()
    one_line_exit_3(*k3("check", "--nodes", path, *args), needle)
    assert time.monotonic() - started < 30  # nothing ran


def test_an_unset_password_variable_is_an_error_before_the_run(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text("nodes:\n  - {name: a, host: 127.0.0.1, password_env: K3DOCTOR_TEST_UNSET_PW}\n")
    os.environ.pop("K3DOCTOR_TEST_UNSET_PW", None)
    one_line_exit_3(*k3("check", "--nodes", path),
                    f"{path}:2: nodes: a.password_env: environment variable K3DOCTOR_TEST_UNSET_PW is not set")


@pytest.fixture
def silent_port():
    """A real TCP port that accepts connections and never says a word (a hung sshd)."""
    server = socket.create_server(("127.0.0.1", 0))
    held, stop = [], threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_port_without_ssh_banner_is_one_clear_error_and_no_traceback(tmp_path, silent_port):
    path = tmp_path / "inv.yaml"
    path.write_text(f"nodes:\n  - {{name: hung, host: 127.0.0.1, port: {silent_port}}}\n" + LOCAL[7:])
    rc, out, err = k3("check", "--nodes", path, "--only", "shm-clean", "--connect-timeout", "2", "--format", "json")
    by_node = {r["node"]: r for r in yaml.safe_load(out)["results"]}
    assert rc == 2 and by_node["hung"]["status"] == "ERROR"
    assert f"no SSH handshake from root@127.0.0.1:{silent_port} within 2s" in by_node["hung"]["message"]
    assert by_node["here"]["status"] == "PASS"
    assert err == ""  # paramiko's thread traceback ("Exception (client): Error reading SSH protocol banner") is gone


def test_a_missing_identity_file_says_so(rig, tmp_path):
    rig.apply("healthy")
    inv = yaml.safe_load(rig.inventory_path.read_text())
    inv["nodes"][1]["identity_file"] = str(tmp_path / "no_such_key")
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(inv))
    rc, doc = k3json("check", "--nodes", path, "--only", "amdgpu-driver")
    got = {r["node"]: r for r in doc["results"]}
    assert rc == 2 and got["ct14"]["status"] == "ERROR"
    assert f"identity file {tmp_path / 'no_such_key'} for root@{rig.nodes[1].host}" in got["ct14"]["message"]
    assert "does not exist" in got["ct14"]["message"]
    assert {got[n]["status"] for n in ("ct13", "ct16", "ct17")} == {"PASS"}


def test_revoked_known_hosts_lines_are_honoured_and_do_not_spoil_the_file(rig, tmp_path):
    rig.apply("healthy")
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other], check=True)
    unrelated = " ".join(other.with_suffix(".pub").read_text().split()[:2])
    lines = rig.known_hosts.read_text().splitlines()
    ct14 = next(ln for ln in lines if ln.startswith(f"[{rig.nodes[1].host}]"))
    known = tmp_path / "known_hosts"
    inv = yaml.safe_load(rig.inventory_path.read_text())
    inv["ssh"]["known_hosts"] = str(known)
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(inv))

    known.write_text("\n".join([f"@revoked * {unrelated}", "@cert-authority *.example ssh-ed25519 AAAA", *lines])
                     + "\n")
    rc, doc = k3json("check", "--nodes", path, "--only", "amdgpu-driver")
    assert rc == 0, doc["results"]  # one revoked key elsewhere leaves every other key usable

    known.write_text("\n".join([f"@revoked * {' '.join(ct14.split()[1:3])}", *lines]) + "\n")
    for extra in ((), ("--accept-unknown-hosts",)):  # a revoked key is never accepted, even by opt-in
        rc, doc = k3json("check", "--nodes", path, "--only", "amdgpu-driver", *extra)
        got = {r["node"]: r for r in doc["results"]}
        assert rc == 2 and got["ct14"]["status"] == "ERROR"
        assert "is marked @revoked in known_hosts" in got["ct14"]["message"]
        assert {got[n]["status"] for n in ("ct13", "ct16", "ct17")} == {"PASS"}


@pytest.fixture
def tokens_on_ct13(tmp_path_factory):
    """A rack of its own (someone else's container stays in the engine's events for 30 min, so on the
    shared rack it would make ct13 busy for the modules after this one) whose ct13 has our container with
    a token in its environment, and someone else's with tokens in its command line, labels and environment."""
    for rig in private_rack(tmp_path_factory, "tokens"):
        yield from _with_tokens(rig)


def _with_tokens(rig):
    client = docker.DockerClient(base_url=f"unix://{rig.nodes[0].docker_socket}", timeout=60)
    from k3rig.engine import CONTAINER, CONTAINER_RUN, IMAGE

    ours = client.containers.get(CONTAINER)
    env = [e for e in ours.attrs["Config"]["Env"] or []] + [f"HF_TOKEN={SECRET}"]
    ours.remove(force=True)
    client.containers.run(IMAGE, name=CONTAINER, detach=True, environment=env, **CONTAINER_RUN)
    client.containers.run(IMAGE, ["sleep", "infinity", f"--api-key={SECRET}"], name="alice-bench", detach=True,
                          network_mode="none", environment={"OPENAI_API_KEY": SECRET},
                          labels={"owner": "alice", "token": SECRET})
    yield rig
    client.close()


def test_saved_readings_hold_no_tokens_and_are_private_and_judge_the_same(tmp_path, tokens_on_ct13):
    rig = tokens_on_ct13
    saved, report = tmp_path / "state.json", tmp_path / "report.json"
    report.write_text("old report, world-readable\n")
    os.chmod(report, 0o644)
    rc, out, err = k3("check", "--nodes", rig.inventory_path, "--only", "rack-free,rocjitsu-store",
                      "--save-readings", saved, "--keep-identifiers", "--format", "json", "-o", report)
    live = yaml.safe_load(report.read_text())
    assert rc == 1, err  # alice-bench makes ct13 busy
    assert any(r["check"] == "rack-free" and r["node"] == "ct13" and r["status"] == "FAIL" and
               "alice-bench" in r["message"] for r in live["results"])
    text = saved.read_text()
    assert SECRET not in text
    assert "HF_TOKEN" not in text and "OPENAI_API_KEY" not in text  # ours: only the A0 trio leaves the container
    assert "alice-bench" in text and "/app/rjprefix" in text
    for path in (saved, report):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    rc_again, again = k3json("judge", saved, "--only", "rack-free,rocjitsu-store")
    assert rc_again == rc
    assert [(r["check"], r["node"], r["gpu"], r["status"], r["message"]) for r in again["results"]] == \
        [(r["check"], r["node"], r["gpu"], r["status"], r["message"]) for r in live["results"]]


def test_a_baseline_file_is_created_private(rig, tmp_path):
    rig.apply("healthy")
    out = tmp_path / "baseline.yaml"
    rc, _, err = k3("baseline", "record", "--nodes", rig.inventory_path, "-o", out)
    assert rc == 0, err
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


@pytest.mark.parametrize("command,data,needle", [
    ("--baseline", "nodes: {a: caf\xe9}\n".encode("latin-1"), ":1: not UTF-8: byte 0xe9"),
    ("--baseline", b"nodes: {a: !!python/name:os.system x}\n", ":1: nodes.a: YAML tag !!python/name:os.system"),
    ("--baseline", b"nodes: {a: {}, a: {}}\n", ":1: nodes.a: duplicate key"),
    ("judge", b"[" * 100000 + b"]" * 100000, ": damaged readings file: nested too deeply"),
], ids=["baseline-latin-1", "baseline-tag", "baseline-duplicate-key", "readings-deep"])  # short ids: the test id
# goes into the environment of every subprocess (PYTEST_CURRENT_TEST)
def test_baseline_and_readings_files_are_read_as_carefully(tmp_path, command, data, needle):
    path = tmp_path / "file"
    path.write_bytes(data)
    args = ("judge", path) if command == "judge" else ("check", "--baseline", path)
    one_line_exit_3(*k3(*args), f"{path}{needle}")
