"""Save a run's raw readings and judge them again offline (``check --save-readings``, ``judge``).

On-call use: capture a rack's state once, then re-judge it with newer checks or other
parameters without touching the nodes again; attach the file to a bug report.
"""
from __future__ import annotations

import dataclasses
import json
import math

from k3doctor import localfiles, redaction
from k3doctor import readings as rd
from k3doctor.deadline import plausible_clock
from k3doctor.inventory.load import localhost_inventory, parse_inventory
from k3doctor.inventory.types import InventoryError
from k3doctor.parsers.common import shown
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


# A saved reading is validated as an inventory is: each field of exactly its declared type (``Exists: "yes"``,
# ``rc: 0.0`` or ``truncated: 1`` read as true/0 before), an error that says something, clocks that are times,
# one name per container. Types come from the reading classes' own annotations: a new field is checked too.
_TYPES = {"str": (str,), "int": (int,), "bool": (bool,), "float": (int, float), "list": (list,), "dict": (dict,),
          "None": (type(None),)}


def _checked(cls, fields: dict):
    """``cls(**fields)`` once every field has exactly the type ``cls`` declares; TypeError/ValueError else."""
    for f in dataclasses.fields(cls):
        if f.name not in fields:
            continue
        value, allowed = fields[f.name], tuple(t for part in f.type.split("|") for t in _TYPES[part.strip()])
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            raise TypeError(f"{cls.__name__}.{f.name} must be {f.type}, got {value!r:.60}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{cls.__name__}.{f.name} must be a finite number, got {value!r}")
        if f.name == "error" and value == "":
            raise ValueError(f"{cls.__name__}.error is empty: an error says what went wrong (or is null)")
    reading = cls(**fields)
    if isinstance(reading, rd.DockerReading):
        _check_docker(reading)
    return reading


def _check_docker(reading) -> None:
    """The engine's clock is a time, every entry a mapping, and no container name is held twice."""
    if not plausible_clock(reading.now):
        raise ValueError(f"DockerReading.now {reading.now!r} is not a time (finite, not in the future)")
    if not all(isinstance(x, dict) for x in (*reading.containers, *reading.events)):
        raise TypeError("DockerReading: every container and event must be a mapping")
    names = [n for c in reading.containers if isinstance(c.get("Names"), list) for n in c["Names"]]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"DockerReading: container name(s) {twice} held by two containers: no engine allows that")


def _decode_reading(data: dict):
    fields = dict(data)
    kind = fields.pop("kind")
    if kind == "Exists":
        if set(fields) != {"value"} or not isinstance(fields["value"], bool):
            raise TypeError(f"Exists must be {{\"value\": true|false}}, got {fields!r:.60}")
        return fields["value"]
    if kind == "Glob":
        return {p: _checked(rd.FileReading, v) for p, v in fields["value"].items()}
    return _checked(_READINGS[kind], fields)


def _unique_keys(pairs: list) -> dict:
    """``object_pairs_hook``: a JSON object with a key twice is damaged (json keeps the last silently)."""
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate key {next(k for k in keys if keys.count(k) > 1)!r} in a JSON object")
    return dict(pairs)


def strict_json(text: str):
    """JSON as saved readings and node documents are read: no duplicate keys, no NaN/Infinity."""
    def constant(name):
        raise ValueError(f"{name} is not a JSON number")
    return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=constant)


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


def _check_shape(doc: dict) -> None:
    """The file's top level has the shape :func:`dump` writes, checked once here: a list where a mapping
    belongs (``"unreachable": ["here"]``) would otherwise reach every check as an AttributeError, not as
    one "damaged readings file" line."""
    strings = (lambda v: isinstance(v, str))
    shapes = (("inventory", str, None, "text"), ("overrides", list, strings, "a list of NAME=VALUE strings"),
              ("unreachable", dict, strings, "a mapping of node name to why it was not read"),
              ("nodes", dict, lambda v: isinstance(v, list), "a mapping of node name to a list of readings"))
    for key, kind, each, words in shapes:
        if key in ("inventory", "nodes") and key not in doc:
            raise SnapshotError(f"damaged readings file: no {key}")
        value = doc.get(key, kind())
        items = value.values() if isinstance(value, dict) else value
        if not isinstance(value, kind) or (each and not all(each(v) for v in items)):
            raise SnapshotError(f"damaged readings file: {key} must be {words}, got {shown(value)}")


def load(text: str) -> tuple:
    """(inventory text, overrides, {node: {spec: reading}}, {node: why unreachable})."""
    try:
        doc = strict_json(text)
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            schema = doc.get("schema") if isinstance(doc, dict) else None
            raise SnapshotError(f"not a k3doctor readings file (schema {schema!r}, want {SCHEMA})")
        _check_shape(doc)
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
        inv_text, overrides, saved, unreachable = load(localfiles.read_text(path))
        return saved_inventory(inv_text, saved, path), overrides, saved, unreachable
    except OSError as exc:  # its own words ("No such file or directory"), not Python's "[Errno 2] ... 'path'"
        raise SnapshotError(exc.strerror or str(exc)) from None
    except (InventoryError, UnicodeDecodeError) as exc:
        raise SnapshotError(str(exc)) from None
