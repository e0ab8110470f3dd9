"""Save a run's raw readings and judge them again offline (``check --save-readings``, ``judge``).

On-call use: capture a rack's state once, then re-judge it with newer checks or other
parameters without touching the nodes again; attach the file to a bug report.
"""
from __future__ import annotations

import dataclasses
import json

from k3doctor import readings as rd
from k3doctor import redaction
from k3doctor.inventory.load import InventoryError, localhost_inventory, parse_inventory
from k3doctor.registry import REGISTRY

SCHEMA = "k3doctor.readings/1"
_SPECS = {cls.__name__: cls for cls in (rd.File, rd.Exists, rd.Glob, rd.Command, rd.InContainer,
                                        rd.EngineFactCommand, rd.Docker, rd.ContainerInspect)}
_READINGS = {cls.__name__: cls for cls in (rd.FileReading, rd.CommandReading, rd.DockerReading, rd.Unavailable,
                                           rd.ContainerReading)}


class SnapshotError(Exception):
    pass


def _encode_spec(spec) -> dict:
    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    if fields.get("saved") is not None:
        fields["saved"] = {"kind": type(spec.saved).__name__, **dataclasses.asdict(spec.saved)}
    return {"kind": type(spec).__name__, **fields}


def _decode_spec(data: dict):
    fields = dict(data)
    cls = _SPECS[fields.pop("kind")]
    if issubclass(cls, rd.Command):
        fields["argv"] = tuple(fields["argv"])
    if isinstance(fields.get("saved"), dict):
        saved = dict(fields["saved"])
        fields["saved"] = redaction.KINDS[saved.pop("kind")](**saved)
    return cls(**fields)


def saved_copy(spec, reading):
    """A reading as it may leave this machine: only what ``spec.saved`` keeps (secrets stay on the node)."""
    if getattr(spec, "saved", None) is None or isinstance(reading, rd.Unavailable):
        return reading
    return spec.saved.redact(reading)


def _encode_reading(value):
    if isinstance(value, bool):
        return {"kind": "Exists", "value": value}
    if isinstance(value, dict):  # a glob: path -> FileReading
        return {"kind": "Glob", "value": {p: dataclasses.asdict(v) for p, v in value.items()}}
    return {"kind": type(value).__name__, **dataclasses.asdict(value)}


def _decode_reading(data: dict):
    fields = dict(data)
    kind = fields.pop("kind")
    if kind == "Exists":
        return fields["value"]
    if kind == "Glob":
        return {p: rd.FileReading(**v) for p, v in fields["value"].items()}
    return _READINGS[kind](**fields)


def encode_readings(got: dict) -> list:
    """One node's ``{spec: reading}`` as JSON-ready entries, each reading as its spec lets it be saved."""
    return [{"spec": _encode_spec(s), "reading": _encode_reading(saved_copy(s, v))} for s, v in got.items()]


def decode_readings(entries: list) -> dict:
    """:func:`encode_readings` back (raises KeyError, TypeError, ValueError on damaged entries)."""
    return {_decode_spec(e["spec"]): _decode_reading(e["reading"]) for e in entries}


def dump(report, inventory_text: str, overrides=()) -> str:
    """JSON of every node's readings (as far as each spec lets them be saved) plus the inventory and
    ``--set`` overrides they were taken with."""
    nodes = {node: encode_readings(got) for node, got in report.readings.items()}
    return json.dumps({"schema": SCHEMA, "inventory": inventory_text, "overrides": list(overrides),
                       "unreachable": report.unreachable, "nodes": nodes}, default=str)


def load(text: str) -> tuple:
    """(inventory text, overrides, {node: {spec: reading}}, {node: why unreachable})."""
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            schema = doc.get("schema") if isinstance(doc, dict) else None
            raise SnapshotError(f"not a k3doctor readings file (schema {schema!r}, want {SCHEMA})")
        if not isinstance(doc["inventory"], str) or not isinstance(doc.get("overrides", []), list):
            raise SnapshotError("damaged readings file: inventory must be text, overrides a list")
        nodes = {node: decode_readings(entries) for node, entries in doc["nodes"].items()}
        return doc["inventory"], doc.get("overrides", []), nodes, doc.get("unreachable", {})
    except RecursionError:
        raise SnapshotError("damaged readings file: nested too deeply") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        if isinstance(exc, SnapshotError):
            raise
        raise SnapshotError(f"damaged readings file: {type(exc).__name__}: {exc}") from None


def saved_inventory(inv_text: str, saved: dict, source: str):
    """The inventory readings were saved with (validated against the registered checks' parameters); a
    localhost run saved none: this machine under the saved name. InventoryError on a bad one."""
    if inv_text:
        return parse_inventory(inv_text, f"{source} (saved inventory)", REGISTRY)
    inv = localhost_inventory()
    inv.nodes[0].name = next(iter(saved), inv.nodes[0].name)
    return inv


def load_file(path: str) -> tuple:
    """(inventory, its --set values, {node: {spec: reading}}, {node: why unread}) of a --save-readings file;
    SnapshotError (also for an unreadable file or a bad saved inventory) says why not."""
    try:
        with open(path, encoding="utf-8") as fh:
            inv_text, overrides, saved, unreachable = load(fh.read())
        return saved_inventory(inv_text, saved, path), overrides, saved, unreachable
    except (InventoryError, OSError, UnicodeDecodeError) as exc:
        raise SnapshotError(str(exc)) from None
