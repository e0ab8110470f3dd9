"""``squeue --noheader --nodelist=localhost --states=all --format=%A|%u|%T|%b|%j``: the Slurm jobs on a node.

MI355X AgentX nodes run the server under Slurm with pyxis/enroot (reference §30): ``docker ps`` does not show the
job, so rack-free asks Slurm which jobs hold the node (§30: "rack-free uses `squeue` + KFD"). The format is k3doctor's
own (squeue(1)): ``%A`` the job id (one per array element, as ``$SLURM_JOB_ID`` reads), ``%u`` the user, ``%T`` the
state in full, ``%b`` the generic resources per node (``gres/gpu:8``, ``N/A``), ``%j`` the name - last, since a
job's name may hold the separator. A line of another shape, an id that is not a number or a state that is not
Slurm's word is a ParseError: a misread line must never read as "no job here".
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from k3doctor.parsers import ParseError

FORMAT = "%A|%u|%T|%b|%j"
# One Slurm node name (never a hostlist such as ct[1-4], never an option); squeue(1) maps "localhost" to the host name.
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_STATE = re.compile(r"[A-Z][A-Z_]*")
# Job states in which the job holds its nodes (slurm/slurm.h job_states, in full as %T prints them): pending jobs
# hold nothing yet; finished ones (COMPLETED, CANCELLED, FAILED, TIMEOUT, ...) nothing any more. COMPLETING runs
# its epilog with processes that may still hold the GPUs, a SUSPENDED job keeps its memory.
HOLDS_NODE = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT",
                        "RESIZING"})


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    user: str
    state: str
    gres: str | None  # None: the job asked for no generic resources per node (squeue prints N/A)
    name: str

    @property
    def holds_node(self) -> bool:
        return self.state in HOLDS_NODE


def parse_jobs(text: str) -> list[SlurmJob]:
    """Every job line of the output; an empty output is no job on the node (squeue prints no header here)."""
    if text and not text.endswith("\n"):
        raise ParseError("squeue output cut short (no final newline)")
    jobs = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split("|", 4)
        if len(fields) != 5:
            raise ParseError(f"squeue line {number} is not {FORMAT!r}: {line[:80]!r}")
        job_id, user, state, gres, name = fields
        if not job_id.isdigit() or not user.strip() or not _STATE.fullmatch(state):
            raise ParseError(f"squeue line {number} has no job id, user and state of Slurm's form: {line[:80]!r}")
        jobs.append(SlurmJob(job_id=job_id, user=user, state=state,
                             gres=None if gres in ("", "N/A", "(null)") else gres, name=name))
    return jobs
