from k3doctor.outputs.registry import output
from k3doctor.outputs.report import findings, where


@output("oneline", "one line per finding (pagers)")
def render(report, checks, verbose):
    return "".join(f"{r.status.value} {r.check} {where(r)}: {r.message}\n" for r in findings(report.results))
