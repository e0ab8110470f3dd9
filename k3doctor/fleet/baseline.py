"""Baselines: a healthy rack's per-node readings recorded once (``baseline record``), for drift checks later
(``check --baseline``). The file is YAML, ``schema: k3doctor.baseline/1``, ``nodes: {node: {check: data}}``."""
from __future__ import annotations

import time
from dataclasses import dataclass

import yaml

from k3doctor import localfiles
from k3doctor.inventory import safeyaml
from k3doctor.judging.runner import RunOptions, RunReport, run_checks, select_checks
from k3doctor.registry import REGISTRY
from k3doctor.results import Status

SCHEMA = "k3doctor.baseline/1"


class BaselineError(ValueError):
    """A baseline file that cannot be used: one line, exit 3."""


def read(path: str) -> dict:
    """node -> check -> recorded data, from a baseline file."""
    try:
        data = safeyaml.load(safeyaml.decode(localfiles.read_bytes(path), path), path)
    except OSError as exc:
        raise BaselineError(f"cannot read baseline {path}: {exc.strerror}") from None
    except safeyaml.YAMLInputError as exc:
        raise BaselineError(f"cannot read baseline {exc.problems[0]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict) or \
            not all(isinstance(entry, dict) for entry in data["nodes"].values()):
        raise BaselineError(f"{path} is not a k3doctor baseline (`nodes:` must map node -> check -> data)")
    return data["nodes"]


@dataclass
class Recording:
    """One ``baseline record`` run: the file's text, what could not be recorded, and what failed."""

    text: str
    report: RunReport
    checks: list
    unrecorded: list  # "node/check" whose entry says why it is missing

    @property
    def failed(self) -> list:
        return [r for r in self.report.results if r.status == Status.FAIL]

    @property
    def exit_code(self) -> int:
        """1: the rack is not healthy (nothing to trust); 2: some node or entry not recorded; 0: all kept."""
        return 1 if self.failed else 2 if self.report.unreachable or self.unrecorded else 0


def record(inv, *, tier: str = "fast", accept_unknown_hosts=False, progress=None) -> Recording:
    """Run the checks that keep baselines (and the prerequisites an active probe needs) in record mode."""
    keepers = tuple(c.name for c in select_checks(REGISTRY, tier=tier) if c.keeps_baseline)
    checks = select_checks(REGISTRY, only=keepers)
    report = run_checks(inv, checks, RunOptions(record=True, accept_unknown_hosts=accept_unknown_hosts,
                                                progress=progress))
    doc = {"schema": SCHEMA, "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "inventory": inv.path, "nodes": report.records}
    unrecorded = [f"{node}/{chk}" for node, entries in report.records.items()
                  for chk, entry in entries.items() if isinstance(entry, dict) and "unrecorded" in entry]
    return Recording(yaml.safe_dump(doc, sort_keys=False), report, checks, unrecorded)
