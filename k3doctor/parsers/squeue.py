"""``squeue --noheader --all --nodelist=NODE --states=all --format=%A|%i|%u|%T|%b|%j``: the Slurm jobs on a node.

MI355X AgentX nodes run the server under Slurm with pyxis/enroot (reference §30): ``docker ps`` does not show the
job, so rack-free asks Slurm which jobs hold the node (§30: "rack-free uses `squeue` + KFD"). The format is k3doctor's
own (squeue(1)): ``%A`` the job id (one per array element, as ``$SLURM_JOB_ID`` reads it), ``%i`` the id as people
see it (``1234_7`` for an array element), ``%u`` the user, ``%T`` the state in full, ``%b`` the generic resources
per node (``gres/gpu:8``, ``N/A``), ``%j`` the name - last, since a job's name may hold the separator. A line of
another shape, an id that is not a number or a state Slurm does not print is a ParseError: a misread line, or a
state of a newer Slurm whose meaning is unknown, must never read as "no job here".
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from k3doctor.parsers import ParseError

FORMAT = "%A|%i|%u|%T|%b|%j"
# One Slurm node name (never a hostlist such as ct[1-4], never an option); squeue(1) maps "localhost" to the host name.
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_FIELDS = FORMAT.count("|") + 1
_JOB_ID = re.compile(r"[0-9]+")
# Every state squeue prints in full (job_state_string(), src/common/slurm_protocol_defs.c): a flag state (COMPLETING,
# CONFIGURING, ...) is printed instead of the base state it qualifies. Those in which the job holds its nodes: a
# pending job holds nothing yet, a finished or requeued one nothing any more; COMPLETING runs its epilog with
# processes that may still hold the GPUs, a SUSPENDED or STOPPED job keeps its memory.
HOLDS_NODE = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT",
                        "RESIZING"})
HOLDS_NOTHING = frozenset({"PENDING", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                           "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
                           "SPECIAL_EXIT", "REVOKED", "RESV_DEL_HOLD"})


@dataclass(frozen=True)
class SlurmJob:
    """One job squeue listed for the node; ``shown``: its id as Slurm's users see it (an array element's
    ``1234_7``), ``job_id``: the one number ``$SLURM_JOB_ID`` holds inside it."""

    job_id: str
    shown: str
    user: str
    state: str
    gres: str | None  # None: the job asked for no generic resources per node (squeue prints N/A)
    name: str

    @property
    def holds_node(self) -> bool:
        return self.state in HOLDS_NODE


def parse_jobs(text: str) -> list[SlurmJob]:
    """Every job line of the output; an empty output is no job on the node (squeue prints no header here).
    Lines end at newlines only: a job name may hold any other character."""
    if text and not text.endswith("\n"):
        raise ParseError("squeue output cut short (no final newline)")
    jobs = []
    for number, line in enumerate(text.split("\n")[:-1], 1):
        fields = line.split("|", _FIELDS - 1)
        if len(fields) != _FIELDS:
            raise ParseError(f"squeue line {number} is not {FORMAT!r}: {line[:80]!r}")
        job_id, shown, user, state, gres, name = fields
        if not _JOB_ID.fullmatch(job_id) or not shown.strip() or not user.strip():
            raise ParseError(f"squeue line {number} has no job id and user of Slurm's form: {line[:80]!r}")
        if state not in HOLDS_NODE | HOLDS_NOTHING:
            raise ParseError(f"squeue line {number}: job state {state[:40]!r} is none squeue prints (a newer Slurm?): "
                             "whether the job holds the node is unknown")
        jobs.append(SlurmJob(job_id=job_id, shown=shown, user=user, state=state,
                             gres=None if gres in ("", "N/A", "(null)") else gres, name=name))
    return jobs
