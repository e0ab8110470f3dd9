"""A triage bundle: everything triage read, secrets redacted, re-judgeable offline (``k3doctor judge``).

Texts arrive here already redacted (``triage.redacted``: what the report shows is what the bundle keeps).
Layout of the ``.tar.gz``: ``manifest.json`` (schema, layout, node clock, unreadable sources), ``logs/<name>``
(each node's server log as read), ``stacks/<node>`` (py-spy dumps), ``readings.json`` (the kernel-health
readings, as ``--save-readings`` keeps them), ``report.json``. Reading never extracts
to disk: members are read in memory, only regular files under those names, each size-capped.
"""
from __future__ import annotations

import io
import json
import re
import tarfile
import time

from k3doctor import localfiles
from k3doctor.deadline import plausible_clock
from k3doctor.outputs.files import write_file
from k3doctor.triage import MAX_LOG_BYTES, MAX_SOURCES, MAX_TOTAL_LOG_BYTES

SCHEMA = "k3doctor.triage-bundle/1"
# A bundle holds what one triage read: its logs (and stack dumps) under triage's own caps, plus the
# manifest, the report and the saved readings. A few kB of gzip can unpack to gigabytes, so the caps
# apply to what is unpacked: per member, in all, and in members (each is a dict entry and a text).
MAX_MEMBER_BYTES = MAX_LOG_BYTES
MAX_TOTAL_BYTES = MAX_TOTAL_LOG_BYTES + (64 << 20)
MAX_MEMBERS = 2 * MAX_SOURCES + 3
_NAME = re.compile(r"^(logs|stacks)/([A-Za-z0-9][A-Za-z0-9._-]{0,127})$")


class BundleError(Exception):
    """Not a k3doctor triage bundle, or a damaged one."""


def write(path: str, *, texts: dict, dumps: dict, manifest: dict, report_json: str,
          readings: str | None = None) -> None:
    """Mode 0600 (the bundle may still hold host names and paths), replaced atomically or written through a
    device or pipe as every ``-o`` is (``outputs.files.write_file``)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        def add(name: str, text: str):
            data = text.encode("utf-8", "replace")
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
            tar.addfile(info, io.BytesIO(data))

        add("manifest.json", json.dumps({"schema": SCHEMA, **manifest}, indent=2))
        for name, text in texts.items():  # redacted where they were read (triage.redacted)
            add(f"logs/{_safe(name)}", text)
        for name, text in dumps.items():
            add(f"stacks/{_safe(name)}", text)
        add("report.json", report_json)
        if readings is not None:  # the checks' saved readings (kernel log), redacted by their specs
            add("readings.json", readings)
    write_file(path, buffer.getvalue(), private=True)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:128] or "_"


def read(path: str) -> tuple:
    """(manifest, {name: log text}, {node: stack text}, saved readings text or None); BundleError otherwise."""
    try:
        why = localfiles.not_regular(path)  # a FIFO would block the read below for ever
        if why:
            raise BundleError(f"{path}: not a triage bundle (it {why})")
        tar = tarfile.open(path, mode="r:gz")
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise BundleError(f"{path}: not a triage bundle ({exc})") from None
    manifest, texts, dumps, readings = None, {}, {}, None
    with tar:
        try:
            count = total = 0
            for member in tar:
                count, total = count + 1, total + max(0, member.size)
                if not member.isfile() or member.size > MAX_MEMBER_BYTES:
                    raise BundleError(f"{path}: unexpected member {member.name!r}")
                if count > MAX_MEMBERS or total > MAX_TOTAL_BYTES:
                    raise BundleError(f"{path}: more than {MAX_MEMBERS} members or {MAX_TOTAL_BYTES >> 20} MiB "
                                      "unpacked: not a bundle k3doctor writes")
                data = tar.extractfile(member).read(MAX_MEMBER_BYTES).decode("utf-8", "replace")
                if member.name == "manifest.json":
                    manifest = json.loads(data)
                elif member.name == "readings.json":
                    readings = data
                elif m := _NAME.match(member.name):
                    (texts if m.group(1) == "logs" else dumps)[m.group(2)] = data
        except RecursionError:
            raise BundleError(f"{path}: damaged bundle (a member nested too deeply)") from None
        except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
            raise BundleError(f"{path}: damaged bundle ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise BundleError(f"{path}: no {SCHEMA} manifest")
    now = manifest.get("now")  # the nodes' clocks when the logs were read: {node: epoch s}, one number, or null
    clocks = now.values() if isinstance(now, dict) else [] if now is None else [now]
    if not all(plausible_clock(c) for c in clocks):
        raise BundleError(f"{path}: the manifest's clock {now!r} is not a time (finite, not in the future)")
    return manifest, texts, dumps, readings


MAX_GPUS_PER_NODE = 64  # far above any node's GPUs (8 on an MI455 node); a larger layout is a damaged manifest


def layout_of(manifest: dict, path: str) -> tuple:
    """(Layout keyword arguments, node clock or None, {source: why unreadable}) of a manifest, each field checked
    like an inventory's (exact types, node names by the inventory's rule, a finite clock); BundleError names
    the first damaged one - never a judge that crashes or misjudges on it later."""
    from k3doctor.inventory.schema import node_name_problem
    from k3doctor.inventory.types import STEPPINGS

    def bad(field: str, expected: str):
        raise BundleError(f"{path}: damaged manifest: {field} must be {expected}")

    layout = manifest.get("layout")
    if not isinstance(layout, dict):
        bad("layout", "a mapping")
    nodes = layout.get("nodes")
    if not isinstance(nodes, list) or len(set(map(str, nodes))) != len(nodes):
        bad("layout.nodes", "a list of distinct node names")
    for name in nodes:
        if node_name_problem(name):
            bad("layout.nodes", f"node names ({node_name_problem(name)})")
    per_node = layout.get("per_node")
    if not _integer(per_node) or not 1 <= per_node <= MAX_GPUS_PER_NODE:
        bad("layout.per_node", f"a whole number of GPUs per node in [1, {MAX_GPUS_PER_NODE}]")
    if layout.get("stepping") is not None and layout["stepping"] not in STEPPINGS:
        bad("layout.stepping", f"one of {', '.join(STEPPINGS)} or null")
    board = layout.get("board_gib")
    if board is not None and not (_integer(board) and 0 < board <= 1 << 20):
        bad("layout.board_gib", "a positive whole number of GiB or null")
    now = manifest.get("now")  # its clocks were checked when the bundle was read (read())
    problems = manifest.get("problems") or {}
    if not isinstance(problems, dict) or not all(isinstance(v, str) for v in problems.values()):
        bad("problems", "a mapping of sources to text")
    return ({"nodes": tuple(nodes), "per_node": per_node, "stepping": layout.get("stepping"), "board_gib": board},
            now, dict(problems))


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
