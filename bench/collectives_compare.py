"""Print nccl-tests beside the probe: size | nccl-tests busbw | probe busbw | ratio, per collective.

Usage: python3 bench/collectives_compare.py ALL_REDUCE_PERF.txt ALLTOALL_PERF.txt PROBE.json [...]
The nccl-tests logs are parsed with k3doctor.parsers.nccl_tests; the probe figures are the
`allreduce-probe` evidence of a `k3doctor check --format json` report. all_reduce is
compared with nccl-tests' in-place column (torch's all_reduce is in place), all-to-all with
the out-of-place one (all_to_all_single writes a separate buffer).
"""
from __future__ import annotations

import json
import sys

from k3doctor.parsers.nccl_tests import parse_perf
from k3doctor.probes.collective_figures import human, side_by_side


def reference(path: str, in_place: bool) -> dict:
    with open(path) as fh:
        result = parse_perf(fh.read())
    out = {}
    for row in result.rows:
        half = row.in_place if in_place else row.out_of_place
        if half.time_us is not None:
            out[row.size] = (half.time_us, half.busbw)
    return out


def probe_evidence(path: str) -> dict:
    with open(path) as fh:
        doc = json.load(fh)
    [ev] = [r["evidence"] for r in doc["results"] if r["check"] == "allreduce-probe" and r["node"] is None]
    return ev


def table(title: str, ref: dict, rows: list) -> str:
    lines = [f"### {title}", "| size | nccl-tests busbw GB/s | probe busbw GB/s | ratio | nccl-tests us | probe us "
             "| probe host-timed us |", "|---:|---:|---:|---:|---:|---:|---:|"]
    host = {r["bytes"]: r for r in rows}
    for size, ref_us, ref_bw, bw, ratio in side_by_side(ref, rows):
        r = host[size]
        lines.append(f"| {human(size)} | {ref_bw:.2f} | {bw:.2f} | {ratio:.3f} | {ref_us:.1f} | {r['time_us']:.1f} | "
                     f"{r.get('host_time_us', r['time_us']):.1f} |")
    return "\n".join(lines)


def main(argv: list) -> int:
    if len(argv) < 4:
        sys.stderr.write(__doc__)
        return 2
    ar, a2a = reference(argv[1], in_place=True), reference(argv[2], in_place=False)
    for path in argv[3:]:
        ev = probe_evidence(path)
        what = f"{path}: world {ev['world']}, {ev['backend']}, timer {ev.get('timer')}"
        print(table(f"all_reduce - {what}", ar, ev.get("sizes", [])))
        print(table(f"all-to-all - {what}", a2a, ev.get("alltoall", [])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
