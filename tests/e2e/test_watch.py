"""``k3doctor watch`` over real sshd (light nodes) and the rig's ATOM engine fake (k3rig.atom_engine), with faults
landing while it watches (k3rig.live_faults): each named on its node and GPU/rank within its detection time, old
lines not replayed, a lost node UNKNOWN, nothing left on the nodes after SIGTERM (reference §31.2)."""
from __future__ import annotations

import base64
import http.client
import json
import queue
import signal
import socket
import ssl
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import psutil
import pytest
import yaml
from k3rig import server_log
from k3rig.light import LightRack
from k3rig.live_faults import append_kernel_line, bump_ras, cut_sshd
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import rig_unavailable
from tests.e2e.cli import k3, k3json
from tests.slurm_cluster import NODE as SLURM_NODE
from tests.slurm_cluster import SlurmCluster, missing
from tests.webhook_receiver import Receiver

pytestmark = pytest.mark.e2e
INTERVAL, STALL = "1", "5"
BDF = "0000:05:00.0"


@pytest.fixture(scope="module")
def rack(tmp_path_factory):
    reason = rig_unavailable()
    if reason:
        pytest.skip(reason)
    with LightRack(tmp_path_factory.mktemp("watch"), nodes=2, dead=1) as light:
        yield light


@pytest.fixture(scope="module")
def engines(rack, tmp_path_factory):
    """An engine fake per live node (4 DP ranks on the first, 2 on the second), each steered by its control file."""
    folder = tmp_path_factory.mktemp("engines")
    procs, out = [], {}
    for (name, _, _), ranks in zip(rack.hosts, (4, 2), strict=True):
        control = folder / f"{name}.json"
        control.write_text("{}")
        proc = subprocess.Popen([sys.executable, "-m", "k3rig.model_server", "--ranks", str(ranks), "--control",
                                 str(control), "--lifetime", "900"], stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        out[name] = (int(proc.stdout.readline()), control)
    yield out
    for proc in procs:
        proc.kill()
        proc.wait()


def tree(rack, name) -> Path:
    tray = next(t for n, _, t in rack.hosts if n == name)
    return rack.workdir / f"tray{tray}" / "tree"


def inventory(rack, tmp_path, names) -> Path:
    doc = yaml.safe_load(rack.inventory_path.read_text())
    doc["nodes"] = [n for n in doc["nodes"] if n["name"] in names]
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def ports(engines) -> list:
    """The engines' ports, and their processes (the rig's nodes share the host's PIDs: the default pattern
    would see other tests' ranks come and go)."""
    return [w for name, (port, _) in engines.items() for w in ("--metrics-port", f"{name}={port}")] + [
        "--engine-process", "k3rig[.]model_server --ranks"]


def test_once_follows_the_npd_plugin_contract(rack, engines, tmp_path):
    """exit 0 with nothing new (the first run takes the baseline), 1 once a new RAS ue is counted, 2 with a node
    that cannot be read; one message line each."""
    first, second = (n for n, _, _ in rack.hosts)
    inv, state = inventory(rack, tmp_path, {first, second}), tmp_path / "state.json"
    once = ("watch", "--nodes", inv, "--once", "--state", state, *ports(engines))
    for _ in range(2):
        rc, out, err = k3(*once, timeout=60)
        assert (rc, err) == (0, ""), out
        assert out.startswith("ok: 2/2 node(s) read") and out.count("\n") == 1
    bump_ras(tree(rack, first), card=1, ue=1)
    rc, out, _ = k3(*once, timeout=60)
    assert rc == 1 and out.count("\n") == 1, out
    assert out.startswith(f"FAIL {first} card1 RAS-UE-RISING: card1 umc: uncorrectable errors 0 -> 1"), out
    dead = rack.dead_hosts[0][0]
    rc, out, _ = k3("watch", "--nodes", inventory(rack, tmp_path, {first, dead}), "--once", "--state",
                    tmp_path / "other.json", timeout=60)
    assert rc == 2 and out.startswith(f"UNKNOWN {dead} node NODE-UNREAD: not read: unreachable"), out


class Watching:
    """A `k3doctor watch --format jsonl` in the background; its events as they come."""

    def __init__(self, *args, env=None):
        self.proc = subprocess.Popen([sys.executable, "-m", "k3doctor.cli", "watch", *map(str, args)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.lines, self.events = queue.Queue(), []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line)

    def drain(self) -> list:
        while not self.lines.empty():
            self.events.append(json.loads(self.lines.get()))  # every line parses: jsonl
        return self.events

    def wait_for(self, code, node, where, within_s: float, kind: str = "start") -> float:
        """Seconds until a ``kind`` event of (code, node, where) came; fails after ``within_s``."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < within_s:
            if any(e["event"] == kind and (e["code"], e["node"], e["where"]) == (code, node, where)
                   for e in self.drain()):
                return time.monotonic() - t0
            time.sleep(0.1)
        pytest.fail(f"no {kind} {code} on {node} {where} within {within_s}s: {self.drain()}")

    def started(self, prom: Path) -> None:
        """Wait for the first round (connections, baseline): its --prom-file written."""
        deadline = time.monotonic() + 20
        while not prom.exists() and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert prom.exists(), self.proc.stderr.read() if self.proc.poll() is not None else "no first round in 20s"

    def stop(self) -> tuple:
        """SIGTERM; (exit status, every event, stderr)."""
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=40)
        time.sleep(0.5)
        return rc, self.drain(), self.proc.stderr.read()


def test_webhook_gets_each_event_once_and_a_hung_receiver_never_slows_the_watch(rack, engines, tmp_path):
    """Two watches of the rack at once: one posts to a real receiver (the stall's start and clear, once each, in
    Alertmanager's shape, its basic auth sent), the other to a receiver that accepts and never answers - it
    names the stall and its clear just as promptly, counts its losses in the summary and prints no secret."""
    first, second = (n for n, _, _ in rack.hosts)
    inv = inventory(rack, tmp_path, {first, second})
    receiver, hung = Receiver(), socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)
    good_prom, hung_prom = tmp_path / "good.prom", tmp_path / "hung.prom"
    common = ("--nodes", inv, "--interval", INTERVAL, "--stall", STALL, "--format", "jsonl", *ports(engines))
    good = Watching(*common, "--prom-file", good_prom,
                    "--webhook", f"http://oncall:pa55@127.0.0.1:{receiver.port}/hook?token=t0k")
    slow = Watching(*common, "--prom-file", hung_prom,
                    "--webhook", f"http://oncall:s3cret@127.0.0.1:{hung.getsockname()[1]}/hook?token=hidden")
    try:
        good.started(good_prom)
        slow.started(hung_prom)
        engines[first][1].write_text(json.dumps({"stall": [1]}))
        for watch in (good, slow):
            watch.wait_for("ENGINE-STALLED", first, "dp_rank 1", within_s=float(STALL) + 5)
        engines[first][1].write_text("{}")
        for watch in (good, slow):
            watch.wait_for("ENGINE-STALLED", first, "dp_rank 1", within_s=5, kind="clear")
        time.sleep(1)
    finally:
        engines[first][1].write_text("{}")
        (rc, events, err), (slow_rc, slow_events, slow_err) = good.stop(), slow.stop()
        receiver.close()
        hung.close()
    assert (rc, err, slow_rc) == (0, "", 0), (err, slow_err)
    auth = "Basic " + base64.b64encode(b"oncall:pa55").decode()
    assert [(path, who, body["version"], body["status"], body["alerts"][0]["labels"]["alertname"],
             body["alerts"][0]["labels"]["target"]) for path, who, body in receiver.got] == [
        ("/hook?token=t0k", auth, "4", "firing", "ENGINE-STALLED", "dp_rank 1"),
        ("/hook?token=t0k", auth, "4", "resolved", "ENGINE-STALLED", "dp_rank 1")]
    summary, slow_summary = events[-1], slow_events[-1]
    assert summary["webhook"] == {"url": f"http://127.0.0.1:{receiver.port}/hook?token=***", "sent": 2,
                                  "dropped": 0, "last_error": None}
    assert (slow_summary["webhook"]["sent"], slow_summary["webhook"]["dropped"]) == (0, 2), slow_summary
    # the hung receiver cost the watch no interval: both watches read the node about as often
    assert slow_summary["intervals"] >= summary["intervals"] - 2, (slow_summary, summary)
    said = json.dumps(slow_events) + slow_err
    assert "s3cret" not in said and "hidden" not in said and "pa55" not in json.dumps(events)


@pytest.fixture
def own_rack(engines, tmp_path_factory):
    """Light nodes of this test only (the module's engines serve them by name): whatever happens to them here
    cannot reach the module's rack and the tests after this one."""
    with LightRack(tmp_path_factory.mktemp("drain-rack"), nodes=2) as light:
        yield light


def test_drain_drains_exactly_the_node_with_a_hardware_fail_on_a_real_slurmctld(own_rack, engines,
                                                                                   tmp_path_factory):
    """--drain on the suite's real slurmctld + slurmd, whose one node is the first light node's name here: a new
    kernel-log FAIL drains it once, with k3doctor's reason, said as an action event; a stalled rank on the other
    node drains nothing (and a second FAIL on the drained node keeps the first cause)."""
    why = missing()
    if why:
        pytest.skip(why)
    rack = own_rack
    first, second = (n for n, _, _ in rack.hosts)
    assert {first, second} == set(engines)
    folder = tmp_path_factory.mktemp("drain")
    doc = yaml.safe_load(inventory(rack, folder, {first, second}).read_text())
    for node in doc["nodes"]:
        node["name"] = SLURM_NODE if node["name"] == first else node["name"]
    inv = folder / "slurm-inventory.yaml"
    inv.write_text(yaml.safe_dump(doc))
    port_args = ["--metrics-port", f"{SLURM_NODE}={engines[first][0]}", "--metrics-port",
                 f"{second}={engines[second][0]}", "--engine-process", "k3rig[.]model_server --ranks"]
    with SlurmCluster(folder / "slurm") as cluster:
        prom = folder / "watch.prom"
        watch = Watching("--nodes", inv, "--interval", INTERVAL, "--stall", STALL, "--format", "jsonl",
                         "--prom-file", prom, "--drain", *port_args, env=cluster.env)
        try:
            watch.started(prom)
            engines[second][1].write_text(json.dumps({"stall": [0]}))
            watch.wait_for("ENGINE-STALLED", second, "dp_rank 0", within_s=float(STALL) + 5)
            assert cluster.drain_state() == "idle"
            append_kernel_line(tree(rack, first), f"amdgpu {BDF}: amdgpu: ring gfx_0.0.0 timeout, signaled seq=10, "
                                                  "emitted seq=12")
            watch.wait_for("SLURM-DRAINED", SLURM_NODE, f"gpu {BDF}", within_s=15, kind="action")
            assert cluster.drain_state() == "drained"
            reason = cluster.reason()
            append_kernel_line(tree(rack, first), f"amdgpu {BDF}: amdgpu: GPU reset begin!")
            watch.wait_for("KERNEL-GPU-RESET", SLURM_NODE, f"gpu {BDF}", within_s=6)
            time.sleep(2)
        finally:
            engines[second][1].write_text("{}")
            rc, events, err = watch.stop()
        assert cluster.reason() == reason, "a later FAIL overwrote the first cause"
        assert reason.startswith(f"k3doctor: gpu {BDF}: GPU ring timeout") and reason.endswith(
            "[KERNEL-RING-TIMEOUT]"), reason
        cluster.back_in_service()
    assert (rc, err) == (1, ""), err
    acted = [(e["code"], e["node"]) for e in events if e["event"] == "action"]
    assert acted == [("SLURM-DRAINED", SLURM_NODE)], acted
    assert events[-1]["drained"] == 1
    assert cluster.gone() == []


def test_a_node_whose_sshd_stops_is_unknown_never_healthy_and_healthy_again_when_it_returns(own_rack, engines,
                                                                                              tmp_path):
    """The second node's sshd (and the watch's session on it) cut mid-watch: UNKNOWN, said once, no health
    asserted for it meanwhile; its sshd started again: the watch reconnects (its backoff) and clears it, and a
    kernel-log fault landing after the return is named - the baseline kept across the loss, nothing replayed."""
    rack = own_rack
    first, second = (n for n, _, _ in rack.hosts)
    inv, prom = inventory(rack, tmp_path, {first, second}), tmp_path / "watch.prom"
    append_kernel_line(tree(rack, second), f"amdgpu {BDF}: amdgpu: MES failed to respond to msg=REMOVE_QUEUE")
    watch = Watching("--nodes", inv, "--interval", INTERVAL, "--stall", STALL, "--format", "jsonl",
                     "--prom-file", prom, *ports(engines))
    try:
        watch.started(prom)
        assert cut_sshd(rack.listener_pids(), f"sshd-{second}.conf") >= 2  # the listener and the watch's session
        watch.wait_for("NODE-UNREAD", second, "node", within_s=6)
        time.sleep(4)  # a few intervals lost: the reconnects back off (1 s, 2 s, 4 s...)
        families = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
        assert {s.labels["node"]: s.value for s in families["k3doctor_watch_up"].samples} == {first: 1, second: 0}
        healthy = {s.labels["node"] for s in families["k3doctor_watch_health"].samples if s.value == 1}
        assert healthy == {first}, "a node not read was said healthy"
        rack.start_sshd(second)
        back = watch.wait_for("NODE-UNREAD", second, "node", within_s=20, kind="clear")
        append_kernel_line(tree(rack, second), f"amdgpu {BDF}: amdgpu: ring gfx_0.0.0 timeout, signaled seq=3, "
                                               "emitted seq=5")
        watch.wait_for("KERNEL-RING-TIMEOUT", second, f"gpu {BDF}", within_s=6)
    finally:
        rc, events, err = watch.stop()
    assert back <= 16, back  # within the backoff's step after 4-5 s down (1+2+4+8)
    said = [(e["event"], e["code"], e["node"]) for e in events if e["event"] in ("start", "clear")]
    assert said == [("start", "NODE-UNREAD", second), ("clear", "NODE-UNREAD", second),
                    ("start", "KERNEL-RING-TIMEOUT", second)], said
    assert (rc, err) == (1, ""), err
    families = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    assert {s.labels["node"]: s.value for s in families["k3doctor_watch_up"].samples} == {first: 1, second: 1}


def test_a_stall_is_captured_first_into_a_triage_bundle_that_names_the_rank(rack, tmp_path):
    """--bundle-dir: rank 2 of an engine with real ModelRunner processes (k3rig.model_runner: py-spy reads them)
    stalls; the watch captures py-spy stacks of the node's ranks, the server log's last lines and its metrics
    history into a triage bundle, once for the stall (a second rank stalling beside it takes none), and says
    the triage verdict - rank 2 stopped in a mori dispatch - as an action event; `k3doctor judge` on the
    bundle says the same offline."""
    first = rack.hosts[0][0]
    control, log = tmp_path / "control.json", tmp_path / "atom.log"
    control.write_text("{}")
    lines = server_log.node_logs(n_nodes=1)[0]  # a healthy start of its 4 ranks, as ATOM logs it
    log.write_text(server_log.stamped(lines))
    engine = subprocess.Popen([sys.executable, "-m", "k3rig.model_server", "--ranks", "4", "--control", str(control),
                               "--lifetime", "300", "--runners"], stdout=subprocess.PIPE, text=True)
    port = int(engine.stdout.readline())
    bundles, prom = tmp_path / "bundles", tmp_path / "watch.prom"
    bundles.mkdir()
    watch = Watching("--nodes", inventory(rack, tmp_path, {first}), "--interval", INTERVAL, "--stall", STALL,
                     "--format", "jsonl", "--prom-file", prom, "--metrics-port", f"{first}={port}",
                     "--engine-process", f"k3rig[.]model_server --ranks 4 --control {control}",
                     "--bundle-dir", bundles, "--server-log", f"{first}={log}")
    try:
        watch.started(prom)
        control.write_text(json.dumps({"stall": [2]}))
        watch.wait_for("ENGINE-STALLED", first, "dp_rank 2", within_s=float(STALL) + 5)
        watch.wait_for("EVIDENCE-CAPTURED", first, "dp_rank 2", within_s=30, kind="action")
        control.write_text(json.dumps({"stall": [2, 3]}))
        watch.wait_for("ENGINE-STALLED", first, "dp_rank 3", within_s=float(STALL) + 5)
        time.sleep(3)
    finally:
        control.write_text("{}")
        rc, events, err = watch.stop()
        engine.kill()
        engine.wait()
    captured = [e for e in events if e["event"] == "action"]
    assert len(captured) == 1 and events[-1]["bundles"] == 1, captured  # once per stall of the node
    said = captured[0]["message"]
    assert f"4 rank stack(s), {len(lines)} log line(s)" in said, said
    assert "rank 2 (n001-ct1) stopped in mori-dispatch: dispatch <- main" in said, said
    assert (rc, err) == (1, ""), err
    path = next(bundles.iterdir())
    assert said.startswith(f"triage bundle {path} (") and oct(path.stat().st_mode & 0o777) == "0o600"
    with tarfile.open(path) as tar:
        members = {m.name: tar.extractfile(m).read().decode() for m in tar}
    assert set(members) == {"manifest.json", f"logs/{first}", f"stacks/{first}", "report.json"}, set(members)
    assert lines[-1] in members[f"logs/{first}"]
    assert members[f"stacks/{first}"].count("ATOM::DP") == 4
    history = json.loads(members["manifest.json"])["watch"]["metrics_history"]
    assert len(history) >= float(STALL) and set(history[-1]["ranks"]) == {"0", "1", "2", "3"}, history[-1]
    rc, offline = k3json("judge", path)
    bad = [(r["check"], r["node"], r["gpu"], r["status"], r["remediation"]) for r in offline["results"]
           if r["status"] != "PASS"]
    assert rc == 1 and bad == [("triage-stacks", first, 2, "FAIL", "TRIAGE-COLLECTIVE-HANG")], offline["results"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_listen_serves_the_exposition_over_https_with_basic_auth_as_node_exporter_does(rack, engines, tmp_path):
    """--listen with a node_exporter web-config (a self-signed certificate made here, a bcrypt user): a real
    HTTPS client that trusts that certificate reads /metrics with the right password - prometheus_client parses
    it, the stall is there as it happens - and gets 401 with a wrong one or none; plain HTTP gets no answer."""
    first = rack.hosts[0][0]
    cert, key = tmp_path / "watch.crt", tmp_path / "watch.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-days", "1", "-subj", "/CN=k3doctor-watch", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    config = tmp_path / "web.yml"
    config.write_text(yaml.safe_dump({"tls_server_config": {"cert_file": cert.name, "key_file": key.name},
                                      "basic_auth_users": {"prometheus": bcrypt.hashpw(b"s3cret", bcrypt.gensalt(10))
                                                           .decode()}}))
    port, prom = free_port(), tmp_path / "watch.prom"
    url, trusted = f"https://127.0.0.1:{port}/metrics", ssl.create_default_context(cafile=str(cert))

    def scrape(user: str | None, password: str = "") -> tuple:
        request = urllib.request.Request(url)
        if user:
            request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
        try:
            with urllib.request.urlopen(request, context=trusted, timeout=10) as answer:
                return answer.status, answer.headers["Content-Type"], answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get("WWW-Authenticate"), ""

    watch = Watching("--nodes", inventory(rack, tmp_path, {first}), "--interval", INTERVAL, "--stall", STALL,
                     "--format", "jsonl", "--prom-file", prom, *ports({first: engines[first]}), "--listen",
                     f"127.0.0.1:{port}", "--web-config", config)
    try:
        watch.started(prom)
        status, ctype, text = scrape("prometheus", "s3cret")
        assert (status, ctype) == (200, "text/plain; version=0.0.4; charset=utf-8"), text
        families = {f.name: f for f in text_string_to_metric_families(text)}
        assert [(s.labels["node"], s.value) for s in families["k3doctor_watch_health"].samples] == [(first, 1)]
        engines[first][1].write_text(json.dumps({"stall": [1]}))
        watch.wait_for("ENGINE-STALLED", first, "dp_rank 1", within_s=float(STALL) + 5)
        time.sleep(1.5)
        families = {f.name: f for f in text_string_to_metric_families(scrape("prometheus", "s3cret")[2])}
        assert {(s.labels["target"], s.labels["reason"], s.value) for s in families["k3doctor_watch_health"].samples
                } == {("dp_rank 1", "ENGINE-STALLED", 0)}
        for who in (("prometheus", "wrong"), ("nobody", "s3cret"), (None,)):
            assert scrape(*who) == (401, 'Basic realm="k3doctor watch"', ""), who
        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert scrape("prometheus", "s3cret")[0] == 200  # a bad client cost the server nothing
        engines[first][1].write_text("{}")
        watch.wait_for("ENGINE-STALLED", first, "dp_rank 1", within_s=5, kind="clear")
    finally:
        engines[first][1].write_text("{}")
        rc, events, err = watch.stop()
    assert (rc, err) == (0, ""), err
    assert [(e["event"], e["code"]) for e in events if e["event"] != "summary"] == [
        ("start", "ENGINE-STALLED"), ("clear", "ENGINE-STALLED")]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2)  # the listener closed with the watch


def test_watch_names_each_fault_once_on_its_node_and_rank(rack, engines, tmp_path):
    first, second = (n for n, _, _ in rack.hosts)
    inv = inventory(rack, tmp_path, {first, second})
    # before the watch: a BLOCK line that must not be replayed
    append_kernel_line(tree(rack, first), f"amdgpu {BDF}: amdgpu: MES failed to respond to msg=REMOVE_QUEUE")
    prom = tmp_path / "watch.prom"
    watch = Watching("--nodes", inv, "--interval", INTERVAL, "--stall", STALL, "--format", "jsonl",
                     "--prom-file", prom, *ports(engines))
    try:
        deadline = time.monotonic() + 20
        while not prom.exists() and watch.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)  # the first round (connections, baseline) written
        time.sleep(2.5)  # two more intervals of a healthy, serving cluster: no event at all
        assert watch.proc.poll() is None, watch.proc.stderr.read()
        assert watch.drain() == []
        families = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
        assert {s.labels["node"]: s.value for s in families["k3doctor_watch_health"].samples} == {first: 1, second: 1}
        assert {s.value for s in families["k3doctor_watch_serving"].samples} == {1}

        append_kernel_line(tree(rack, first), f"amdgpu {BDF}: amdgpu: ring gfx_0.0.0 timeout, signaled seq=10, "
                                              "emitted seq=12")
        watch.wait_for("KERNEL-RING-TIMEOUT", first, f"gpu {BDF}", within_s=6)
        bump_ras(tree(rack, second), card=2, ue=1)
        watch.wait_for("RAS-UE-RISING", second, "card2", within_s=6)
        engines[first][1].write_text(json.dumps({"stall": [2]}))
        took = watch.wait_for("ENGINE-STALLED", first, "dp_rank 2", within_s=float(STALL) + 4)
        assert took >= float(STALL) - 1  # not before the threshold: counters must stay frozen that long

        config = f"sshd-{second}.conf"
        assert cut_sshd(rack.listener_pids(), config) >= 1
        watch.wait_for("NODE-UNREAD", second, "node", within_s=6)
        engines[first][1].write_text(json.dumps({"die": True}))
        watch.wait_for("ENGINE-DOWN", first, "engine", within_s=4)
        watch.wait_for("ENGINE-PROCESS-GONE", first, "engine", within_s=4)
        time.sleep(1.5)
    finally:
        watch.proc.send_signal(signal.SIGTERM)
        rc = watch.proc.wait(timeout=30)
    time.sleep(0.5)
    events = watch.drain()
    starts = [(e["code"], e["node"], e["where"]) for e in events if e["event"] == "start"]
    assert sorted(starts) == sorted([("KERNEL-RING-TIMEOUT", first, f"gpu {BDF}"), ("RAS-UE-RISING", second, "card2"),
                                     ("ENGINE-STALLED", first, "dp_rank 2"), ("NODE-UNREAD", second, "node"),
                                     ("ENGINE-DOWN", first, "engine"), ("ENGINE-PROCESS-GONE", first, "engine")]), starts
    # a lost node's faults are held, never cleared; a dead engine's stall is over (it is down instead)
    clears = [(e["code"], e["node"], e["where"]) for e in events if e["event"] == "clear"]
    assert clears == [("ENGINE-STALLED", first, "dp_rank 2")], clears
    summary = events[-1]
    assert summary["event"] == "summary" and summary["why"].startswith("stopped by signal 15"), summary
    assert rc == 1  # a problem active when it ended
    assert watch.proc.stderr.read() == ""  # the lost node said once, as an event: no warning, no traceback
    families = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    unhealthy = {(s.labels["node"], s.labels["target"], s.labels["reason"])
                 for s in families["k3doctor_watch_health"].samples if s.value == 0}
    assert (first, "engine", "ENGINE-DOWN") in unhealthy and (second, "card2", "RAS-UE-RISING") in unhealthy
    assert {s.labels["node"]: s.value for s in families["k3doctor_watch_up"].samples} == {first: 1, second: 0}
    assert {s.labels["node"] for s in families["k3doctor_watch_last_success_timestamp_seconds"].samples} == {
        first, second}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # nothing of the watch stays on the nodes
        left = set(rack.pids()) - set(rack.listener_pids()) - {rack.namespace_pid(n) for n in (first, second)}
        if not left:
            break
        time.sleep(0.2)
    assert not left, [Path(f"/proc/{p}/cmdline").read_text().replace("\0", " ") for p in left]


def test_demo_watch_names_the_stalled_rank_and_leaves_nothing():
    """`k3doctor demo --watch`: its own rack and engines; the stalled rank named once, on its node; all torn down."""
    reason = rig_unavailable()
    if reason:
        pytest.skip(reason)
    rc, out, err = k3("demo", "--watch", timeout=120)
    assert rc == 1, (out, err)  # the stall is active when the demo's watch ends
    said = out.splitlines()[1:-1]
    assert len(said) == 1, out
    assert "FAIL    n001-ct1 dp_rank 2  ENGINE-STALLED: dp_rank 2: 4 request(s) running" in said[0], out
    assert out.splitlines()[-1].startswith("k3doctor watch: ended after") and "Traceback" not in err, err
    left = [p for p in psutil.process_iter(["cmdline"]) if "k3doctor-demo-" in " ".join(p.info["cmdline"] or ())]
    assert left == [], left
