"""``--webhook URL``: one POST per finding start/clear, in Alertmanager's webhook payload shape (version "4").

Why that shape and not CloudEvents: it is what on-call tools already take without glue - PagerDuty, Opsgenie,
Grafana OnCall, Squadcast, incident.io and most chat bridges have an "Alertmanager" integration that reads
exactly this JSON (``status`` firing/resolved, ``alerts[]`` with ``labels``/``annotations``/``startsAt``/
``endsAt``) and de-duplicates on the labels - which is what a watch that says each condition once needs. A
CloudEvents receiver would need a mapping written per tool.

Never in the watch's way (reference §31.2: the watch must keep looking while a receiver is down): the loop only
puts an event on a bounded queue (full: the event is dropped and counted); one background thread POSTs each
under ``timeout_s``, retrying a failed POST a bounded number of times with a doubling backoff; what could not
be delivered is counted and said in the summary. The URL's credentials (``user:password@``, a token in the
query) go in the request only: everything said shows :func:`shown_url`.
"""
from __future__ import annotations

import base64
import hashlib
import json
import queue
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

QUEUE_MAX = 1000
ATTEMPTS, BACKOFF_FIRST_S, BACKOFF_MAX_S = 4, 1.0, 8.0
ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt of an alert still firing
SEVERITY = {"fail": "critical", "warn": "warning", "unknown": "warning"}


class WebhookURLError(ValueError):
    """Not an http(s) URL with a host: one line, exit 3."""


def split_url(url: str) -> tuple:
    """(the URL to request, without user info; the Authorization header or None). Raises WebhookURLError."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookURLError(f"--webhook {shown_url(url)}: expected an http:// or https:// URL with a host")
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        raise WebhookURLError(f"--webhook {shown_url(url)}: its port is not a port") from None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    auth = None
    if parts.username is not None:
        pair = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        auth = "Basic " + base64.b64encode(pair.encode()).decode()
    return urllib.parse.urlunsplit((parts.scheme, host + port, parts.path or "/", parts.query, "")), auth


def shown_url(url: str) -> str:
    """The URL as it may be printed: no user info, every query value ``***`` (tokens ride there)."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(an unparsable URL)"
    query = "&".join(f"{k}=***" for k, _ in urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    return urllib.parse.urlunsplit((parts.scheme, host + port, parts.path, query, ""))


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds % 1 * 1000):03d}Z"


def fix_for(event: dict) -> str:
    """What to do, for the receiver's annotation: a kernel-log row or a live rule row (k3doctor/rules/live.py)
    names its remediation (``k3doctor explain``); a triage row's finding is its remediation code."""
    from k3doctor.registry import REGISTRY
    from k3doctor.rules.live import BY_CODE
    from k3doctor.watch.hardware import RULE_BY_SIGNATURE

    rule = next((r for r in RULE_BY_SIGNATURE.values() if r.id == event["code"]), None)
    if rule is not None and rule.remediation:
        return f"k3doctor explain {rule.remediation} (reference {rule.section})"
    if event["code"] in BY_CODE:
        return f"k3doctor explain {BY_CODE[event['code']].remediation} (reference {event['section']})"
    if event["code"] in REGISTRY.remediations:  # a triage row's finding from the server log is named by its code
        return f"k3doctor explain {event['code']} (reference {event['section']})"
    return f"docs/on-call.md, Watch: {event['code']} (reference {event.get('section') or '§31.2'})"


def payload(event: dict, started_at: float | None = None) -> dict:
    """One start/clear event as Alertmanager's webhook body (one alert). ``started_at``: when the condition of a
    clear event started (its ``startsAt``; Alertmanager sends it on resolution too)."""
    firing = event["event"] == "start"
    labels = {"alertname": event["code"], "node": event["node"], "target": event["where"] or "node",
              "severity": SEVERITY[event["severity"]]}
    annotations = {"summary": event["message"], "fix": fix_for(event)}
    alert = {"status": "firing" if firing else "resolved", "labels": labels, "annotations": annotations,
             "startsAt": _stamp(event["time"] if firing or started_at is None else started_at),
             "endsAt": ZERO_TIME if firing else _stamp(event["time"]), "generatorURL": "",
             "fingerprint": hashlib.sha256(json.dumps(labels, sort_keys=True).encode()).hexdigest()[:16]}
    return {"version": "4", "groupKey": f'{{}}:{{alertname="{event["code"]}", node="{event["node"]}"}}',
            "truncatedAlerts": 0, "status": alert["status"], "receiver": "k3doctor-watch",
            "groupLabels": {"alertname": event["code"], "node": event["node"]}, "commonLabels": labels,
            "commonAnnotations": annotations, "externalURL": "", "alerts": [alert]}


class Webhook:
    """The sender: ``send`` never blocks; ``close`` waits at most ``flush_s`` for what is queued."""

    def __init__(self, url: str, *, timeout_s: float = 5.0, attempts: int = ATTEMPTS,
                 backoff_s: float = BACKOFF_FIRST_S, queue_max: int = QUEUE_MAX):
        self.url, self.auth = split_url(url)
        self.shown = shown_url(url)
        self.timeout_s, self.attempts, self.backoff_s = timeout_s, attempts, backoff_s
        self.sent = self.failed = 0  # counted by the sender thread only
        self.full = 0  # counted by the watch's thread only (no counter shared by two threads)
        self.last_error: str | None = None
        self._queue: queue.Queue = queue.Queue(maxsize=queue_max)
        self._stop = threading.Event()
        self._started: dict = {}  # condition key -> when it started (for a clear's startsAt)
        self._thread = threading.Thread(target=self._run, name="k3doctor-webhook", daemon=True)
        self._thread.start()

    def send(self, event: dict) -> None:
        key = f"{event['code']}|{event['node']}|{event['where']}"
        if event["event"] == "start":
            self._started[key] = event["time"]
        body = payload(event, self._started.pop(key, None) if event["event"] == "clear" else None)
        try:
            self._queue.put_nowait(json.dumps(body).encode())
        except queue.Full:
            self.full += 1
            self.last_error = f"queue full ({self._queue.maxsize} events waiting)"

    def _run(self) -> None:
        while True:
            body = self._queue.get()
            if body is None:
                return
            if self._deliver(body):
                self.sent += 1
            else:
                self.failed += 1
            self._queue.task_done()

    def _deliver(self, body: bytes) -> bool:
        wait = self.backoff_s
        for attempt in range(self.attempts):
            if attempt and self._stop.wait(wait):
                return False  # stopping: no more retries
            wait = min(wait * 2, BACKOFF_MAX_S)
            request = urllib.request.Request(self.url, data=body, method="POST",
                                             headers={"Content-Type": "application/json",
                                                      "User-Agent": "k3doctor-watch"})
            if self.auth:
                request.add_header("Authorization", self.auth)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                    answer.read(65536)
                return True
            except urllib.error.HTTPError as exc:
                self.last_error = f"HTTP {exc.code}"
                if 400 <= exc.code < 500 and exc.code not in (408, 429):
                    return False  # the receiver refuses this body: retrying sends the same
            except (urllib.error.URLError, OSError, ValueError) as exc:
                reason = getattr(exc, "reason", exc)
                self.last_error = type(reason).__name__ if not str(reason) else str(reason)[:120]
        return False

    def close(self, flush_s: float = 5.0) -> dict:
        """Let the queue drain (the event in flight included) for up to ``flush_s``, then stop; what is left
        counts as dropped."""
        deadline = time.monotonic() + flush_s
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.05)
        self._stop.set()
        left = 0
        while True:
            try:
                left += self._queue.get_nowait() is not None
            except queue.Empty:
                break
        self._queue.put(None)
        self._thread.join(max(0.0, deadline - time.monotonic()) + self.timeout_s + 1)
        return {"url": self.shown, "sent": self.sent, "dropped": self.full + self.failed + left,
                "last_error": self.last_error}
