"""Root cause first: checks that need a prerequisite which failed on a node are not evaluated there.

A node without amdgpu would otherwise report one fault many times (no UALink sysfs, no fabric
ids, rocm-smi unreadable, no HBM size...). A check declares what it needs (``@check(needs=...)``);
a prerequisite's FAIL/ERROR findings (only its ``blocking`` codes, when it names any) stop its
dependants on that node, or on that GPU when the finding names one, and each dependant says once
"not evaluated: <prerequisite> failed" (SKIP) instead of its own consequence of the same fault.
"""
from __future__ import annotations

from k3doctor.readings import Withheld
from k3doctor.results import Result, Status, skip


def blocking_findings(chk, results) -> list:
    """The results of ``chk`` on one node that stop the checks needing it."""
    return [r for r in results if r.status in (Status.FAIL, Status.ERROR)
            and (not chk.blocking or r.remediation in chk.blocking)]


def not_evaluated(prerequisite: str, finding, **kw):
    """The one SKIP a dependant gives where ``prerequisite`` failed, naming the finding it rests on."""
    return skip(f"not evaluated: {prerequisite} failed", evidence={prerequisite: finding.message}, **kw)


class Gate:
    """What of one check's prerequisites failed on one node, and what that withholds from it.

    ``failed`` maps each prerequisite judged on the node to its blocking results there."""

    def __init__(self, chk, failed: dict):
        self.whole = None  # (prerequisite, finding) that stops the whole check on this node
        self.withheld = {}  # reading name -> (prerequisite, finding)
        self.gpus = {}  # gpu -> (prerequisite, finding): the whole check is not evaluated for that GPU
        for prerequisite, readings in chk.needs.items():
            for finding in failed.get(prerequisite, ()):
                cause = (prerequisite, finding)
                if finding.gpu is not None:
                    if readings is None:
                        self.gpus.setdefault(finding.gpu, cause)
                elif readings is None:
                    self.whole = self.whole or cause
                else:
                    for name in readings:
                        self.withheld.setdefault(name, cause)

    def skipped(self) -> list:
        """The check's verdict on a node where it is not evaluated at all (else [])."""
        return [not_evaluated(*self.whole)] if self.whole else []

    def readings(self, results: dict) -> dict:
        """The check's readings with those whose prerequisite failed replaced by a Withheld."""
        return {name: Withheld(f"not evaluated: {self.withheld[name][0]} failed") if name in self.withheld
                else reading for name, reading in results.items()}

    def per_gpu(self, verdicts: list) -> list:
        """Verdicts about a GPU whose prerequisite failed become one SKIP for that GPU."""
        if not self.gpus:
            return verdicts
        kept = [v for v in verdicts if v.gpu not in self.gpus]
        return kept + [not_evaluated(*cause, gpu=gpu) for gpu, cause in sorted(self.gpus.items())]


def busy_rack(chk, results: list):
    """The one SKIP of an invasive probe that must not start (None: it may): one of its ``exclusive`` checks
    FAILed on some node - a foreign container or GPU process, the rack is in use. Loading the fabric and the
    GPUs under another job would disturb it and measure it, not the rack."""
    busy = [r for r in results if r.check in chk.exclusive and r.status == Status.FAIL]
    if not busy:
        return None
    nodes = ", ".join(dict.fromkeys(r.node or "cluster" for r in busy))
    return Result(chk.name, None, Status.SKIP, f"not started: the rack is in use ({busy[0].check} failed on "
                  f"{nodes}: {busy[0].message})", evidence={r.node or "cluster": r.message for r in busy})
