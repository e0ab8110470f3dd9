"""Slurm health-check mode (``k3doctor node --slurm-drain``): drain this node when a check fails, resume
it on a later healthy run, but only a drain that k3doctor itself set.

What each verdict does to the node (what an admin who runs a fleet with it expects):

- DO NOT LAUNCH (a FAIL): drain with the reason ``k3doctor: <check> [gpuN]: <message> [CODE] (+N more)``,
  the first failure in report order (the root cause). A node already drained or down for another
  reason (a human's ``disk swap``, Slurm's ``Not responding``) keeps that reason: k3doctor reports the
  failure but never overwrites someone else's note. A node k3doctor drained before gets the new cause.
- READY TO LAUNCH (warnings allowed): undrain a node whose current reason starts with ``k3doctor:``
  (``state=undrain``: a node that is also DOWN stays down). Any other drain is never touched.
- INCONCLUSIVE (an ERROR, no FAIL): nothing changes, and one line says so. k3doctor's own inability to
  read (a hung tool, an unreadable output, a bug) must not take nodes out of service, and it is no
  proof that a node k3doctor drained earlier is healthy again.

Every Slurm call is an argv list (no shell) bounded by a timeout; its process group is killed at the
deadline. A missing, failing or hung ``scontrol`` is one ``ERROR`` line and the node is left as it is.
"""
from __future__ import annotations

import enum
import os
import re
import shutil
import signal
import socket
import subprocess
from dataclasses import dataclass

from k3doctor.deadline import Deadline
from k3doctor.parsers import ParseError
from k3doctor.parsers.scontrol import SlurmNode, parse_show_node
from k3doctor.parsers.squeue import NODE_NAME
from k3doctor.registry import remediation
from k3doctor.results import LaunchVerdict, Result, Status, overall
from k3doctor.transport.procs import wait_group_gone

PREFIX = "k3doctor:"  # every reason k3doctor sets starts with it; it resumes no other drain
REASON_MAX = 200  # characters: sinfo shows the start, scontrol all of it
SLURM_BUDGET_S = 10.0  # all scontrol calls of a run: with the checks' 40 s, inside HealthCheckProgram's 60 s
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
# What names a cause in a reason k3doctor wrote: "k3doctor: <check>[ gpuN]:" and the final " [CODE]"
# (messages carry figures that change from run to run: a changed figure is no new cause).
_CAUSE = re.compile(r"(?P<where>k3doctor: [^:]+):.*?(?P<code> \[[A-Z0-9-]+\])?(?: \(\+\d+ more\))?")
STEP = "slurm-drain"  # the report row of a Slurm call that failed

SLURM_CALL = remediation("SLURM-CALL-FAILED", "k3doctor could not read or change this node's state in Slurm", """
The node was left as it is in Slurm: not drained, not resumed. Check on the node, as the user the
health check runs as (root or SlurmUser: only they may drain):
  scontrol ping                        # slurmctld answers (SlurmctldHost, ports, munge)
  scontrol show node "$(hostname -s)"  # the node's name in Slurm (--slurm-node / $SLURMD_NODENAME)
  command -v scontrol; echo "$SLURM_CONF"
A hung scontrol (slurmctld overloaded or unreachable) is cut at --slurm-timeout; the next health
check tries again.""")


class SlurmError(Exception):
    """A Slurm call that could not be made, failed, or did not answer in time."""


class Action(enum.Enum):
    DRAIN = "drain"
    UNDRAIN = "undrain"
    NONE = "none"


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str | None = None  # the drain reason (DRAIN)
    note: str | None = None  # what to tell the admin (None: nothing worth a line)


def node_name(explicit: str | None = None) -> str:
    """The Slurm name of this node: ``explicit``, else ``$SLURMD_NODENAME`` (slurmd sets it for
    HealthCheckProgram), else the short hostname. Raises ValueError for anything but one node name."""
    name = explicit or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    if not NODE_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not one Slurm node name")
    return name


def ours(node: SlurmNode) -> bool:
    """Whether the node's current drain is k3doctor's own (the only kind it ever lifts)."""
    return node.drain_flag and (node.reason or "").startswith(PREFIX)


def drain_reason(results) -> str:
    """``k3doctor: <check> [gpuN]: <message> [CODE] (+N more)`` for the first FAIL, one line, capped."""
    failed = [r for r in results if r.status == Status.FAIL]
    first = failed[0]
    where = f" gpu{first.gpu}" if first.gpu is not None else ""
    more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
    return reason_line(f"{first.check}{where}: {first.message}", first.remediation, more)


def reason_line(text: str, code: str | None = None, more: str = "") -> str:
    """``k3doctor: <text> [CODE]<more>``: one line (control characters out), capped at REASON_MAX with the
    code kept (it names the cause; ``_cause`` compares it)."""
    code = f" [{code}]" if code else ""
    text = _CONTROL.sub(" ", f"{PREFIX} {text}")
    room = REASON_MAX - len(code) - len(more)
    if len(text) > room:
        text = text[:room - 3].rstrip() + "..."
    return text + code + more


def decide(verdict: LaunchVerdict, results, node: SlurmNode) -> Decision:
    """What to do to ``node`` after a run with this verdict (pure; see the module docstring)."""
    if verdict == LaunchVerdict.DO_NOT_LAUNCH:
        reason = drain_reason(results)
        if others_hold(node):
            return Decision(Action.NONE, note=f"{node.name} left as it is: already {others_hold(node)} with reason "
                                              f"{node.reason!r} (not k3doctor's); the failure is: {reason}")
        if ours(node) and _cause(node.reason) == _cause(reason):
            return Decision(Action.NONE)  # drained for this cause already: nothing new to say
        return Decision(Action.DRAIN, reason=reason)
    if verdict == LaunchVerdict.READY:
        return Decision(Action.UNDRAIN) if ours(node) else Decision(Action.NONE)
    kept = f"; k3doctor's drain stays ({node.reason})" if ours(node) else ""
    return Decision(Action.NONE, note=f"{node.name} left as it is: the run was inconclusive, which is no reason "
                                      f"to drain it nor proof that it is healthy{kept}")


def _cause(reason: str) -> tuple:
    match = _CAUSE.fullmatch(reason)
    return (match["where"], match["code"]) if match else (reason,)


def others_hold(node: SlurmNode) -> str | None:
    """How the node is held out of service with someone else's reason (a human's, Slurm's): k3doctor never
    overwrites it. None: not held, or held by k3doctor."""
    held = _held(node)
    return held if held and node.reason and not node.reason.startswith(PREFIX) else None


def _held(node: SlurmNode) -> str | None:
    """How the node is out of service (None: it is not; a reason left on it then holds nothing)."""
    return ("down" if node.state == "DOWN" else "drained" if node.drain_flag else
            "failing" if "FAIL" in node.flags else None)


class Scontrol:
    """``scontrol`` calls, argv lists that all end within ``budget_s`` together (a call still running at
    the deadline is killed with its process group)."""

    def __init__(self, program: str = "scontrol", budget_s: float = SLURM_BUDGET_S):
        self.program = program
        self.budget_s = budget_s
        self.deadline = Deadline(budget_s, SLURM_BUDGET_S)

    def show_node(self, name: str) -> SlurmNode:
        out = self._call("show", "node", name)
        try:
            return parse_show_node(out, name)
        except ParseError as exc:
            raise SlurmError(f"cannot read the state of {name}: {exc.reason}") from None

    def drain(self, name: str, reason: str) -> None:
        self._call("update", f"nodename={name}", "state=drain", f"reason={reason}")

    def undrain(self, name: str) -> None:
        self._call("update", f"nodename={name}", "state=undrain")

    def _call(self, *args: str) -> str:
        path = shutil.which(self.program)
        shown = " ".join((self.program, *args[:2]))
        if path is None:
            raise SlurmError(f"{self.program} not found (PATH={os.environ.get('PATH', os.defpath)})")
        try:
            proc = subprocess.Popen([path, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise SlurmError(f"cannot run {path}: {exc.strerror}") from None
        try:
            out, err = proc.communicate(timeout=self.deadline.remaining())
        except subprocess.TimeoutExpired:
            raise SlurmError(f"`{shown}` did not answer within the {self.budget_s:g} s Slurm budget") from None
        finally:
            _end(proc)
        if proc.returncode != 0:
            said = (err or out).decode("utf-8", "replace").strip().splitlines()
            raise SlurmError(f"`{shown}` failed (exit {proc.returncode}): {said[0][:200] if said else 'no message'}")
        return out.decode("utf-8", "replace")


def _end(proc: subprocess.Popen) -> None:
    """A call still running (deadline, Ctrl-C): its whole process group killed and reaped; pipes closed."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        wait_group_gone(proc.pid)
    for pipe in (proc.stdout, proc.stderr):
        if pipe:
            pipe.close()


def apply(name: str, report_node: str | None, results, scontrol: Scontrol) -> tuple[list[str], list[Result]]:
    """Drain/undrain ``name`` after a run: what was done (lines for stderr), and an ERROR result for the
    report if Slurm could not be read or told (said once, there; the run is then at best inconclusive)."""
    verdict = overall(results)
    try:
        decision = decide(verdict, results, scontrol.show_node(name))
        if decision.action == Action.DRAIN:
            scontrol.drain(name, decision.reason)
            return [f"slurm: drained {name}: {decision.reason}"], []
        if decision.action == Action.UNDRAIN:
            scontrol.undrain(name)
            return [f"slurm: resumed {name}: healthy again (its drain was k3doctor's)"], []
    except SlurmError as exc:
        return [], [Result(check=STEP, node=report_node, status=Status.ERROR, remediation=SLURM_CALL,
                           message=f"{exc}; Slurm node {name} left as it is")]
    return ([f"slurm: {decision.note}"] if decision.note else []), []
