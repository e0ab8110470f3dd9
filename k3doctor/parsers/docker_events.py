"""``docker events`` and ``docker ps --format json``: who else is on the rack.

A foreign ``create`` appears long before any GPU counter moves, so "rack free" needs all
containers and recent events, not just VRAM (reference §3).  The product reads events through
the Docker SDK, which yields the same dicts as ``--format '{{json .}}'``; :func:`event_from_dict`
is the core and the line parsers are thin wrappers.  Empty output is a valid answer here
(no events, no containers) — callers must still check the command's exit status (§28).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime

from k3doctor.parsers import ParseError
from k3doctor.parsers._common import to_float, to_int

_TEXT_EVENT = re.compile(r"^(?P<ts>\S+) (?P<type>\S+) (?P<action>.+?) (?P<id>\S+)(?: \((?P<attrs>.*)\))?$")
_ATTR_SPLIT = re.compile(r", (?=[\w./-]+=)")  # event attributes: "k=v, k=v"
_LABEL_SPLIT = re.compile(r",(?=[\w./-]+=)")  # ps Labels: "k=v,k=v" (values may hold commas)
_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")
_PS_CREATED = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) ([+-]\d{4})")


@dataclass(frozen=True)
class Event:
    """One Docker event; ``time`` is epoch seconds; ``attributes`` values are strings as Docker sends them."""

    time: float
    type: str
    action: str
    id: str
    name: str | None
    image: str | None
    attributes: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int | None:
        """``die`` events carry ``exitCode`` as a string ("137")."""
        return to_int(self.attributes.get("exitCode"), f"docker event {self.id}: exitCode")


@dataclass(frozen=True)
class Container:
    """One ``docker ps -a --format json`` row; ``created`` is epoch seconds (None if unparseable)."""

    name: str
    state: str | None
    status: str
    image: str
    created: float | None
    id: str | None = None
    labels: dict = field(default_factory=dict)


def event_from_dict(d: dict) -> Event:
    """Event from a Docker API/SDK event dict (modern ``Type/Action/Actor`` or legacy ``status/id/from``)."""
    if not isinstance(d, dict):
        raise ParseError(f"docker event: expected an object, got {type(d).__name__}")
    actor = d.get("Actor") or {}
    raw_attributes = actor.get("Attributes") or {} if isinstance(actor, dict) else None
    if not isinstance(raw_attributes, dict):
        raise ParseError(f"docker event: malformed Actor in {d!r:.120}")
    attributes = {str(k): str(v) for k, v in raw_attributes.items()}
    action = d.get("Action") or d.get("status")
    event_id = actor.get("ID") or d.get("id")
    if not action or not event_id:
        raise ParseError(f"docker event: no action/id in {d!r:.120}")
    nanos = to_int(d.get("timeNano"), "docker event timeNano")
    when = nanos / 1e9 if nanos is not None else to_float(d.get("time"), "docker event time")
    if when is None:
        raise ParseError(f"docker event: no time in {d!r:.120}")
    return Event(
        time=when,
        type=d.get("Type") or "container",  # pre-1.10 events had only status/id/from, all container events
        action=action,
        id=event_id,
        name=attributes.get("name"),
        image=attributes.get("image") or d.get("from"),
        attributes=attributes,
    )


def _json_lines(text: str, what: str) -> list:
    if not isinstance(text, str):
        raise ParseError(f"{what}: expected text, got {type(text).__name__}")
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ParseError(f"{what}: line {number} is not JSON ({exc}): {line!r:.80}") from None
    return rows


def parse_events_jsonl(text: str) -> list:
    """``docker events --format '{{json .}}'`` (one object per line) -> ``list[Event]``."""
    return [event_from_dict(d) for d in _json_lines(text, "docker events")]


def _rfc3339(stamp: str) -> float:
    """RFC3339Nano -> epoch seconds (``datetime.fromisoformat`` on 3.9 takes neither ns nor ``Z``)."""
    match = _RFC3339.match(stamp)
    if not match:
        raise ParseError(f"docker events: bad timestamp {stamp!r}")
    base, fraction, zone = match.groups()
    parsed = datetime.fromisoformat(base + ("+00:00" if zone == "Z" else zone))
    return parsed.timestamp() + float("0." + (fraction or "0"))


def parse_events_text(text: str) -> list:
    """Default ``docker events`` format ``<ts> <type> <action> <id> (k=v, ...)`` -> ``list[Event]``."""
    if not isinstance(text, str):
        raise ParseError(f"docker events: expected text, got {type(text).__name__}")
    events = []
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _TEXT_EVENT.match(line.strip())
        if not match:
            raise ParseError(f"docker events: unrecognised line {line!r:.80}")
        attrs = match.group("attrs")
        pairs = [item.partition("=") for item in _ATTR_SPLIT.split(attrs)] if attrs else []
        if any(sep != "=" for _, sep, _ in pairs):
            raise ParseError(f"docker events: bad attributes in {line!r:.80}")
        events.append(event_from_dict({
            "Type": match.group("type"),
            "Action": match.group("action"),
            "Actor": {"ID": match.group("id"), "Attributes": {k: v for k, _, v in pairs}},
            "time": _rfc3339(match.group("ts")),
        }))
    return events


def _ps_created(value: str) -> float | None:
    """``"2026-08-04 18:35:29 +0900 JST"`` -> epoch seconds; the zone name is ignored."""
    match = _PS_CREATED.match(value)
    if not match:
        return None
    return datetime.strptime(" ".join(match.groups()), "%Y-%m-%d %H:%M:%S %z").timestamp()


def parse_ps_jsonl(text: str) -> list:
    """``docker ps [-a] --format json`` (one object per line) -> ``list[Container]``."""
    containers = []
    for row in _json_lines(text, "docker ps"):
        if not isinstance(row, dict) or not isinstance(row.get("Names"), str) or not isinstance(row.get("Status"), str):
            raise ParseError(f"docker ps: row without Names/Status: {row!r:.120}")
        labels = [item.partition("=") for item in _LABEL_SPLIT.split(str(row.get("Labels") or "")) if item]
        containers.append(Container(
            name=row["Names"],
            state=row.get("State") or None,
            status=row["Status"],
            image=str(row.get("Image", "")),
            created=_ps_created(str(row.get("CreatedAt", ""))),
            id=row.get("ID"),
            labels={k: v for k, _, v in labels},
        ))
    return containers
