"""Verdicts and results: the one vocabulary every layer (checks, runner, reports) speaks."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Status(enum.Enum):
    """Outcome of one check on one node (or GPU, or the cluster).

    ERROR means "could not evaluate" (unreachable, auth refused, timeout, unparseable
    output): it is never shown as PASS and makes the run inconclusive. WAIVED is a FAIL or WARN that an
    unexpired waiver accepts (k3doctor/judging/waivers.py): shown everywhere, counted in no verdict.
    """

    PASS = "PASS"
    SKIP = "SKIP"
    WAIVED = "WAIVED"
    WARN = "WARN"
    ERROR = "ERROR"
    FAIL = "FAIL"

    @property
    def severity(self) -> float:
        """Order used to pick the worst result of a table cell (and Prometheus' status value)."""
        return _SEVERITY[self]


# WAIVED sits between SKIP and WARN: a cell shows an accepted fault over a PASS, a live WARN over it; 1.5 keeps
# every other status' value (Prometheus series, alerts on >= 2 or >= 3) as it was, below every threshold.
_SEVERITY = {Status.PASS: 0, Status.SKIP: 1, Status.WAIVED: 1.5, Status.WARN: 2, Status.ERROR: 3, Status.FAIL: 4}


@dataclass(frozen=True)
class SweepPoint:
    """A collective's bus bandwidth at one message size, as a probe measured it (its whole-run result)."""

    collective: str  # all_reduce, all_to_all
    bytes: int
    busbw_gbs: float
    run: str = ""


def human_bytes(size: int) -> str:
    """A message size as people read it: 1 MiB, 256 KiB, 3 B."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


@dataclass(frozen=True)
class PairRate:
    """One node pair's fabric figures (GB/s per direction), on both nodes' results."""

    pair: str
    exporter: str
    importer: str
    gbps: tuple = ()  # ((direction, GB/s), ...)


@dataclass(frozen=True)
class CardId:
    """A GPU the node has, with its UALink AccId where one is set: the rack map's cards."""

    gpu: int
    acc_id: int | None = None


FIGURES = {cls.__name__: cls for cls in (SweepPoint, PairRate, CardId)}


def figure_to_dict(figure) -> dict:
    return {"kind": type(figure).__name__, **{k: list(map(list, v)) if k == "gbps" else v
                                               for k, v in figure.__dict__.items()}}


def figure_from_dict(data: dict):
    """A figure of a JSON document (a node's `k3doctor node --json`); ValueError when it is not one."""
    if not isinstance(data, dict) or data.get("kind") not in FIGURES:
        raise ValueError(f"not a figure: {str(data)[:80]}")
    fields = {k: v for k, v in data.items() if k != "kind"}
    if "gbps" in fields:
        fields["gbps"] = tuple((str(d), float(v)) for d, v in fields["gbps"])
    return FIGURES[data["kind"]](**fields)


@dataclass
class Verdict:
    """What a judge returns: the runner adds check and node."""

    status: Status
    message: str
    gpu: int | None = None
    evidence: dict = field(default_factory=dict)
    remediation: str | None = None
    node: str | None = None  # set by cluster-scope judges that name an odd node
    figures: list = field(default_factory=list)  # typed figures outputs show (SweepPoint, PairRate, CardId)


# One severity vocabulary (issue 34): every word a rule says how bad a finding is, mapped here once to the result
# status it becomes, for every rule table (recipe rules, kernel-log / triage / launch rows). A recipe rule says
# BLOCK / WARN / INFO / PASS: BLOCK is the launch's word for a FAIL, and `recipe diff` prints these words (a
# machine contract, kept as they are); rule rows say the results' own words in lower case (fail / warn / error)
# or info. INFO is worth knowing and never a finding: None.
SEVERITY_STATUS = {"BLOCK": Status.FAIL, "FAIL": Status.FAIL, "ERROR": Status.ERROR, "WARN": Status.WARN,
                   "INFO": None, "PASS": Status.PASS}
COUNTED = (Status.FAIL, Status.WARN)  # what a rule's finding must become to count against a launch


def status_of(severity: str) -> Status | None:
    """The result status a rule's severity word becomes (None: INFO, no finding); KeyError for a word no rule says."""
    return SEVERITY_STATUS[severity.upper()]


def verdict(severity: str, message: str, **kw) -> Verdict:
    """A rule's finding as a Verdict of the status its severity word maps to (ValueError for INFO: no finding)."""
    status = status_of(severity)
    if status is None:
        raise ValueError(f"severity {severity}: worth knowing, no verdict")
    return Verdict(status, message, **kw)


def counts(severity: str) -> bool:
    """Whether a rule finding of this severity counts against the launch (FAIL or WARN once mapped)."""
    return status_of(severity) in COUNTED


def passed(message: str, **kw) -> Verdict:
    return Verdict(Status.PASS, message, **kw)


def warn(message: str, **kw) -> Verdict:
    return Verdict(Status.WARN, message, **kw)


def fail(message: str, **kw) -> Verdict:
    return Verdict(Status.FAIL, message, **kw)


def skip(message: str, **kw) -> Verdict:
    return Verdict(Status.SKIP, message, **kw)


def error(message: str, **kw) -> Verdict:
    return Verdict(Status.ERROR, message, **kw)


@dataclass
class Result:
    """One row of a report: a verdict placed on a check and a node."""

    check: str
    node: str | None
    status: Status
    message: str
    gpu: int | None = None
    evidence: dict = field(default_factory=dict)
    remediation: str | None = None
    figures: list = field(default_factory=list)  # what a check measured or found, typed, for the outputs
    waiver: dict | None = None  # the waiver that accepts it (WAIVED) or that expired (FAIL/WARN again)

    def to_dict(self) -> dict:
        out = {
            "check": self.check,
            "node": self.node,
            "gpu": self.gpu,
            "status": self.status.value,
            "message": self.message,
            "evidence": self.evidence,
            "remediation": self.remediation,
        }
        if self.figures:
            out["figures"] = [figure_to_dict(f) for f in self.figures]
        if self.waiver:
            out["waiver"] = self.waiver
        return out


@dataclass(frozen=True)
class Unread:
    """Why a node could not be read at all: one cause for the whole node, none of its checks ran there.

    ``cause``: an id (``NODE-...``) alerts and test histories key on; ``title``: the cause in a few words (the
    verdict line's); ``summary``: the cause in words that name no node, what nodes with the same cause share
    (the human formats show them as one line); ``message``: this node's own words; ``fix``: what to do."""

    cause: str
    title: str
    summary: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict:
        return {"cause": self.cause, "title": self.title, "message": self.message, "fix": self.fix}


class LaunchVerdict(enum.Enum):
    """Launch verdict of a whole run, with its process exit code."""

    READY = ("READY TO LAUNCH", 0)
    DO_NOT_LAUNCH = ("DO NOT LAUNCH", 1)
    INCONCLUSIVE = ("INCONCLUSIVE", 2)

    @property
    def text(self) -> str:
        return self.value[0]

    @property
    def exit_code(self) -> int:
        return self.value[1]


def overall(results) -> LaunchVerdict:
    """FAIL anywhere beats ERROR: a known fault is more useful than an unknown. A WAIVED finding was
    evaluated (it counts as verified) but decides nothing."""
    statuses = {r.status for r in results}
    if Status.FAIL in statuses:
        return LaunchVerdict.DO_NOT_LAUNCH
    if Status.ERROR in statuses or not statuses & {Status.PASS, Status.WARN, Status.WAIVED}:
        return LaunchVerdict.INCONCLUSIVE  # an error, or nothing was actually verified (all skipped)
    return LaunchVerdict.READY


def worst(statuses) -> Status | None:
    statuses = list(statuses)
    return max(statuses, key=lambda s: s.severity) if statuses else None
