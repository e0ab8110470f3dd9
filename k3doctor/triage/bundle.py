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
import os
import re
import tarfile
import tempfile
import time

from k3doctor.deadline import plausible_clock
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
    """Atomically (temp file + rename), mode 0600: the bundle may still hold host names and paths."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".k3doctor-bundle-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
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
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:128] or "_"


def read(path: str) -> tuple:
    """(manifest, {name: log text}, {node: stack text}, saved readings text or None); BundleError otherwise."""
    try:
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
        except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
            raise BundleError(f"{path}: damaged bundle ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise BundleError(f"{path}: no {SCHEMA} manifest")
    now = manifest.get("now")  # the nodes' clocks when the logs were read: {node: epoch s}, one number, or null
    clocks = now.values() if isinstance(now, dict) else [] if now is None else [now]
    if not all(plausible_clock(c) for c in clocks):
        raise BundleError(f"{path}: the manifest's clock {now!r} is not a time (finite, not in the future)")
    return manifest, texts, dumps, readings
