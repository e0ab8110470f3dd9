"""Each fault once, the cause first: findings that only follow from another finding say so and step aside.

``needs=`` (k3doctor/judging/prerequisites.py) keeps a check from being evaluated where its prerequisite failed on
the same node. Some consequences cross checks, scopes and nodes instead: an unconfigured UALink card
(ualink-state) has no fabric domain (fabric-domain) and its peers' imports to it time out (kernel-health
puts the remote AccId on the card that owns it, reference §6, §8); a KV budget that is negative because
another job holds GPU memory (§19); an all_reduce that hangs as a whole because one node cannot take
part (§20); an environment variable env-versions fails on one node, which launch-config then also finds
differing between the nodes (§16, §29); VRAM held with no process on a GPU (rack-free), which peer-outliers
then also finds far above its peers (§3, §29). :data:`EXPLAINS` says which finding explains which, as data;
:func:`explained` applies it to the results of a run after judging: each consequence becomes a SKIP "follows
from <check> on <where>" that keeps its own message and code in its evidence, so the verdict line names the cause.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from k3doctor.results import Result, Status

_UNCONFIGURED_CARD = ("UALINK-NOT-ACTIVE", "UALINK-STUCK-UNCONFIGURED", "UALINK-CARD-INVALID", "UALINK-MISSING")
_ONE_NODE_STOPS_ALL = ("ALLREDUCE-NODE-FAULT", "ALLREDUCE-FABRIC")
_ENV_VERSIONED = ("env-versions", ("ENV-RCCL-FABRIC", "ENV-INERT-VERSIONED", "ENV-AITER-LOG-VALUE", "ENV-TMPDIR",
                                   "ENV-MORI", "ENV-HIP-ALLOC", "ENV-RCCL-TUNING"))
_ENV_DRIFT = ("launch-config", ("LAUNCH-DRIFT",))


@dataclass(frozen=True)
class Explains:
    """A ``cause`` finding (check, remediation codes) explains ``consequence`` findings found ``where``:
    ``gpu`` the same node and GPU, ``node`` the same node, ``cluster`` the check's cluster row (node None);
    ``same``: evidence keys both carry with one value (the variable both name)."""

    cause: tuple
    consequence: tuple
    where: str
    same: tuple = ()


EXPLAINS = (
    Explains(("ualink-state", _UNCONFIGURED_CARD), ("fabric-domain", ("FABRIC-NOT-CONFIGURED",
                                                                      "FABRIC-DOMAIN-MISMATCH")), "gpu"),
    Explains(("ualink-state", _UNCONFIGURED_CARD), ("kernel-health", ("FABRIC-IMPORT-FAILED",)), "gpu"),
    Explains(("triage-kv", ("TRIAGE-KV-COLLISION",)), ("triage-kv", ("TRIAGE-KV-NEGATIVE", "TRIAGE-KV-CANNOT-FIT",
                                                                      "TRIAGE-KV-RAISE-UTIL")), "gpu"),
    Explains(("allreduce-probe", _ONE_NODE_STOPS_ALL), ("allreduce-probe", _ONE_NODE_STOPS_ALL), "cluster"),
    # the odd node's own drift, or (no majority: two nodes, or half and half) the cluster's row
    Explains(_ENV_VERSIONED, _ENV_DRIFT, "node", same=("variable",)),
    Explains(_ENV_VERSIONED, _ENV_DRIFT, "cluster", same=("variable",)),
    Explains(("rack-free", ("RACK-ORPHANED-VRAM",)), ("peer-outliers", ("PEER-VRAM-OUTLIER",)), "gpu"),
    # §25: the aggregate LMCache size handed to each rank is the cause; the host RAM it overcommits follows from it
    Explains(("launch-config", ("RECIPE-DRAM-PER-RANK",)), ("launch-config", ("RECIPE-PINNED-HOST-MEMORY",)), "node"),
)
_COUNTS = (Status.FAIL, Status.WARN)  # what may step aside: a finding, never an ERROR (something unread)


def _is(result: Result, spec: tuple) -> bool:
    check, codes = spec
    return result.check == check and result.remediation in codes


def _place(result: Result) -> str:
    if result.node is None:
        return "the cluster"
    return result.node if result.gpu is None else f"{result.node} gpu{result.gpu}"


def _matches(rule: Explains, cause: Result, other: Result) -> bool:
    if any(key not in cause.evidence or key not in other.evidence or cause.evidence[key] != other.evidence[key]
           for key in rule.same):
        return False
    if rule.where == "cluster":
        return other.node is None and cause.node is not None
    if other.node != cause.node or other.node is None:
        return False
    return rule.where == "node" or other.gpu == cause.gpu


def explained(results: list) -> list:
    """``results`` with every consequence of a cause in :data:`EXPLAINS` turned into a SKIP that names the
    cause; order kept. Causes are the original FAILs: one pass, so no chain or cycle is followed."""
    causes = [(rule, r) for rule in EXPLAINS for r in results if r.status == Status.FAIL and _is(r, rule.cause)]
    if not causes:
        return results
    out = []
    for r in results:
        cause = next((c for rule, c in causes if c is not r and r.status in _COUNTS and _is(r, rule.consequence)
                      and _matches(rule, c, r)), None)
        if cause is None:
            out.append(r)
            continue
        where = f"{cause.check} on {_place(cause)}"
        out.append(dataclasses.replace(
            r, status=Status.SKIP, remediation=None, message=f"follows from {where}: {r.message}",
            evidence={**r.evidence, "follows_from": where, "own_finding": f"{r.status.value} {r.remediation}"}))
    return out
