"""Docker API/SDK event and container-list dicts: who else is on the rack.

A foreign ``create`` appears long before any GPU counter moves, so "rack free" needs all
containers and recent events, not just VRAM (reference §3).  k3doctor reads the engine through
the Docker SDK (``/events``, ``/containers/json``); these functions turn its dicts into typed
values and raise ParseError for any dict a judge could misread — a non-string ``Action`` or
``Type`` would silently drop the event from "foreign create/start".
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from k3doctor.parsers import ParseError
from k3doctor.parsers.common import shown, to_float, to_int


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
    """One container of the engine's list; ``created`` is epoch seconds (None if not given)."""

    name: str
    state: str | None
    status: str
    image: str
    created: float | None
    id: str | None = None
    labels: dict = field(default_factory=dict)


@contextmanager
def _naming(what: str, d: dict):
    """A ParseError about one of ``d``'s fields, prefixed with ``d`` itself (its first 120 characters). Made
    only when raised: an engine's event list can hold thousands of entries, some of them tens of KB (an exec's
    whole command line), and their repr is not free."""
    try:
        yield
    except ParseError as exc:
        raise ParseError(f"{what} {shown(d, 120)}: {exc}") from None


def _text(value: Any, what: str, required: bool = True) -> str | None:
    """A string field as Docker sends it; absent/empty -> ParseError when required, else None."""
    if value is None or value == "":
        if required:
            raise ParseError(f"{what} is missing")
        return None
    if not isinstance(value, str):
        raise ParseError(f"{what} is not a string: {shown(value)}")
    return value


def _string_map(value: Any, what: str) -> dict:
    """Docker's attribute and label maps are string -> string (API ``map[string]string``)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ParseError(f"{what} is not an object: {shown(value)}")
    odd = next(((k, v) for k, v in value.items() if not isinstance(k, str) or not isinstance(v, str)), None)
    if odd:
        raise ParseError(f"{what}: {shown(odd[0])} -> {shown(odd[1])} is not a string pair")
    return dict(value)


def event_from_dict(d: Any) -> Event:
    """Event from a Docker API/SDK event dict (modern ``Type/Action/Actor`` or legacy ``status/id/from``)."""
    if not isinstance(d, dict):
        raise ParseError(f"docker event: expected an object, got {type(d).__name__}")
    with _naming("docker event", d):
        actor = d.get("Actor") or {}
        if not isinstance(actor, dict):
            raise ParseError("Actor is not an object")
        attributes = _string_map(actor.get("Attributes"), "Actor.Attributes")
        action = _text(d["Action"] if "Action" in d else d.get("status"), "Action")
        event_id = _text(actor["ID"] if "ID" in actor else d.get("id"), "Actor.ID")
        nanos = to_int(d.get("timeNano"), "timeNano")
        when = nanos / 1e9 if nanos is not None else to_float(d.get("time"), "time")
        if when is None:
            raise ParseError("no time")
        return Event(
            time=when,
            # pre-1.10 events had only status/id/from, all container events
            type=_text(d.get("Type"), "Type", required=False) or "container",
            action=action,
            id=event_id,
            name=attributes.get("name"),
            image=attributes.get("image") or _text(d.get("from"), "from", required=False),
            attributes=attributes,
        )


def container_from_api(d: Any) -> Container:
    """A Docker API/SDK container-list dict (``Names: ["/x"]``, ``Created`` epoch) as a Container."""
    if not isinstance(d, dict):
        raise ParseError(f"docker container list: expected an object, got {type(d).__name__}")
    with _naming("docker container list entry", d):
        names = d.get("Names")
        if not isinstance(names, list) or not names:
            raise ParseError("no Names")
        return Container(name=_text(names[0], "Names[0]").lstrip("/"),
                         state=_text(d.get("State"), "State", required=False),
                         status=_text(d.get("Status"), "Status", required=False) or "",
                         image=_text(d.get("Image"), "Image", required=False) or "",
                         created=to_float(d.get("Created"), "Created"),
                         id=_text(d.get("Id"), "Id", required=False),
                         labels=_string_map(d.get("Labels"), "Labels"))
