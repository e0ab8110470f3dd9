"""The watch's actions without a node: the webhook's Alertmanager payload and its sender against a real HTTP
server on 127.0.0.1 (each event once; a hanging or refusing receiver never blocks ``send``; credentials never
shown), silences, and which findings drain a node in Slurm (hardware FAILs only, never a stall)."""
import base64
import json
import socket
import time

import pytest

from k3doctor.fleet.slurm import SlurmError
from k3doctor.parsers.scontrol import parse_show_node
from k3doctor.watch.actions import Actions, Drainer, Silences, drains, parse_silence
from k3doctor.watch.render import live_line
from k3doctor.watch.webhook import Webhook, WebhookURLError, payload, shown_url, split_url
from tests.webhook_receiver import Receiver


def event(kind="start", code="KERNEL-RING-TIMEOUT", node="n1", where="gpu 0000:05:00.0", severity="fail", t=100.0):
    return {"time": t, "event": kind, "code": code, "node": node, "where": where, "severity": severity,
            "message": "GPU ring timeout", "section": "§10"}


def test_payload_is_alertmanagers_webhook_shape():
    firing = payload(event())
    assert (firing["version"], firing["status"], len(firing["alerts"])) == ("4", "firing", 1)
    alert = firing["alerts"][0]
    assert alert["labels"] == {"alertname": "KERNEL-RING-TIMEOUT", "node": "n1", "target": "gpu 0000:05:00.0",
                               "severity": "critical"}
    assert alert["annotations"]["summary"] == "GPU ring timeout"
    assert alert["annotations"]["fix"].startswith("k3doctor explain ")
    assert (alert["startsAt"], alert["endsAt"]) == ("1970-01-01T00:01:40.000Z", "0001-01-01T00:00:00Z")
    resolved = payload(event("clear", t=160.5), started_at=100.0)["alerts"][0]
    assert (resolved["status"], resolved["startsAt"], resolved["endsAt"]) == (
        "resolved", "1970-01-01T00:01:40.000Z", "1970-01-01T00:02:40.500Z")
    assert resolved["fingerprint"] == alert["fingerprint"]  # the receiver pairs the two


def test_credentials_go_in_the_request_never_in_what_is_shown():
    url, auth = split_url("https://oncall:s3cret@hooks.example:8443/k3?token=abc&x=1")
    assert url == "https://hooks.example:8443/k3?token=abc&x=1" and "s3cret" not in url
    assert base64.b64decode(auth.split()[1]) == b"oncall:s3cret"
    shown = shown_url("https://oncall:s3cret@hooks.example:8443/k3?token=abc&x=1")
    assert shown == "https://hooks.example:8443/k3?token=***&x=***"
    for bad in ("ftp://h/x", "http://", "hooks.example/x"):
        with pytest.raises(WebhookURLError):
            split_url(bad)


def test_each_event_reaches_a_real_receiver_exactly_once():
    receiver = Receiver()
    try:
        hook = Webhook(f"http://u:pw@127.0.0.1:{receiver.port}/alerts?token=t0k", timeout_s=2)
        hook.send(event("start"))
        hook.send(event("clear", t=130.0))
        said = hook.close(flush_s=5)
    finally:
        receiver.close()
    assert said == {"url": f"http://127.0.0.1:{receiver.port}/alerts?token=***", "sent": 2, "dropped": 0,
                    "last_error": None}
    assert [(p, a, b["status"]) for p, a, b in receiver.got] == [
        ("/alerts?token=t0k", "Basic " + base64.b64encode(b"u:pw").decode(), "firing"),
        ("/alerts?token=t0k", "Basic " + base64.b64encode(b"u:pw").decode(), "resolved")]
    assert receiver.got[1][2]["alerts"][0]["startsAt"] == receiver.got[0][2]["alerts"][0]["startsAt"]


@pytest.mark.parametrize("kind", ["hangs", "refuses"])
def test_a_dead_receiver_never_blocks_send_and_its_losses_are_counted(kind):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    if kind == "hangs":
        listener.listen(16)  # accepts (the kernel does) and never answers
    else:
        listener.close()  # nothing listens: refused
    try:
        hook = Webhook(f"http://u:secret@127.0.0.1:{port}/x?token=hidden", timeout_s=0.5, backoff_s=0.1)
        t0 = time.monotonic()
        for n in range(50):
            hook.send(event(where=f"gpu {n}"))
        assert time.monotonic() - t0 < 0.5  # the watch's thread only queues
        said = hook.close(flush_s=1)
    finally:
        listener.close()
    assert said["sent"] == 0 and said["dropped"] == 50, said
    assert said["last_error"] and "secret" not in json.dumps(said) and "hidden" not in json.dumps(said)


def test_a_full_queue_drops_and_counts():
    hook = Webhook("http://127.0.0.1:9/x", timeout_s=0.2, backoff_s=0.1, queue_max=2)
    for _ in range(10):
        hook.send(event())
    assert hook.full >= 7
    assert hook.close(flush_s=0.5)["dropped"] == 10


def test_silence_parses_code_node_and_until():
    now = 1_800_000_000.0
    assert parse_silence("ENGINE-STALLED", now).until is None
    s = parse_silence("KERNEL-RING-TIMEOUT@n001.ct1:2h", now)
    assert (s.code, s.node, s.until) == ("KERNEL-RING-TIMEOUT", "n001.ct1", now + 7200)
    assert parse_silence("RAS-CE-RISING:2027-02-01T06:00", now).until == 1801461600.0  # UTC without an offset
    assert parse_silence("RAS-CE-RISING:2030-01-01T00:00:00+01:00", now).until == 1893452400.0
    for bad in ("engine-stalled", "X@:1h", "X:soon", "X:2020-01-01T00:00", "X@a b"):
        with pytest.raises(ValueError, match="--silence"):
            parse_silence(bad, now)


def test_silenced_events_are_not_emitted_nor_acted_on_and_are_counted():
    silences = Silences([parse_silence("KERNEL-RING-TIMEOUT@n1", 0), parse_silence("ENGINE-STALLED:10s", 0)])
    actions = Actions(silences)
    kept = actions.process([event(), event(node="n2"), event(code="ENGINE-STALLED", t=5.0),
                            event(code="ENGINE-STALLED", node="n3", t=11.0)])
    assert [(e["code"], e["node"]) for e in kept] == [("KERNEL-RING-TIMEOUT", "n2"), ("ENGINE-STALLED", "n3")]
    # the clear of a silenced start is silenced with it, even once the silence is over
    kept = actions.process([event("clear", code="ENGINE-STALLED", t=50.0), event("clear", node="n2")])
    assert [(e["event"], e["node"]) for e in kept] == [("clear", "n2")]
    assert actions.close() == ([], {"silenced": 3})


@pytest.mark.parametrize("found, drained", [
    (event(), True),
    (event(code="RAS-UE-RISING", where="card2"), True),
    (event("clear"), False),
    (event(code="KERNEL-RING-TIMEOUT-SOFT", severity="warn"), False),
    (event(code="RAS-CE-RISING", severity="warn"), False),
    (event(code="ENGINE-STALLED", where="dp_rank 2"), False),
    (event(code="ENGINE-DOWN", where="engine"), False),
    (event(code="ENGINE-PROCESS-GONE", where="engine"), False),
    (event(code="NODE-UNREAD", where="node", severity="unknown"), False),
])
def test_only_a_new_hardware_fail_drains(found, drained):
    assert drains(found) is drained


class FakeScontrol:
    """Slurm's answers (the external boundary: the e2e suite's slurmctld is in test_slurm_health_check.py)."""

    calls: list = []
    show = "NodeName={name} CoresPerSocket=1\n   State=IDLE ThreadsPerCore=1"
    fail = False

    def show_node(self, name):
        if FakeScontrol.fail:
            raise SlurmError("`scontrol show node` did not answer within the 10 s Slurm budget")
        return parse_show_node(FakeScontrol.show.format(name=name) + "\n", name)

    def drain(self, name, reason):
        FakeScontrol.calls.append((name, reason))


@pytest.mark.parametrize("show, fail, code", [
    ("NodeName={name} CoresPerSocket=1\n   State=IDLE ThreadsPerCore=1", False, "SLURM-DRAINED"),
    ("NodeName={name} CoresPerSocket=1\n   State=IDLE+DRAIN ThreadsPerCore=1\n"
     "   Reason=disk swap [root@2026-12-01T10:00:00]", False, "SLURM-LEFT-AS-IS"),
    ("", True, "SLURM-CALL-FAILED"),
    ("NodeName={name} CoresPerSocket=1\n   State=IDLE+DRAIN ThreadsPerCore=1\n"
     "   Reason=k3doctor: card2: card2 umc: uncorrectable errors 0 -> 1 [RAS-UE-RISING] [root@2026-12-01T10:00:00]",
     False, None),
])
def test_the_drain_is_said_as_an_event(show, fail, code):
    FakeScontrol.calls, FakeScontrol.show, FakeScontrol.fail = [], show, fail
    actions = Actions(drainer=Drainer(FakeScontrol))
    out = actions.process([event(), event(code="ENGINE-STALLED", where="dp_rank 1")])
    said, summary = actions.close()
    actions_said = [e for e in out + said if e["event"] == "action"]
    assert [(e["code"], e["node"]) for e in actions_said] == ([(code, "n1")] if code else [])
    if code is None:  # drained by k3doctor already: its first cause stays, nothing to say
        assert FakeScontrol.calls == [] and summary["drained"] == 0
        return
    if code == "SLURM-DRAINED":
        assert FakeScontrol.calls == [("n1", "k3doctor: gpu 0000:05:00.0: GPU ring timeout [KERNEL-RING-TIMEOUT]")]
        assert summary["drained"] == 1
    else:
        assert FakeScontrol.calls == [] and summary["drained"] == 0
    assert live_line(actions_said[0]).split()[1] == "action"

