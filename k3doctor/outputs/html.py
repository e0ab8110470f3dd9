"""``--format html``: one self-contained page people look at (write it with ``-o report.html``).

Verdict on top, then the rack map (nodes x GPUs, each card coloured by its worst result and
labelled with its UALink AccId, the fabric pairs the deep tier measured as edges with their
GB/s), the all_reduce busbw per message size, the checks x nodes table, and the findings with
their remediation text. No network: CSS and SVG are inline, fonts are the system's, there is
no script. Node output is hostile (terminal escapes, NUL, ``<script>``): every string that came
from a node goes through :func:`text` (control characters shown as ``\\xNN``, then HTML-escaped).
"""
from __future__ import annotations

import html
import json
import math
import time

from k3doctor import __version__
from k3doctor.outputs.figures import accel_ids, busbw_points, cards, fabric_pairs
from k3doctor.outputs.registry import output
from k3doctor.outputs import unread
from k3doctor.outputs.report import CLUSTER_COLUMN, findings, where
from k3doctor.outputs.text import terminal_safe
from k3doctor.registry import REGISTRY
from k3doctor.results import LaunchVerdict, Status, human_bytes, overall, worst

FILL = {Status.PASS: "#2e7d32", Status.SKIP: "#9e9e9e", Status.WARN: "#f2a900", Status.ERROR: "#7b1fa2",
        Status.FAIL: "#d32f2f"}
INK = {Status.WARN: "#1a1a1a"}  # dark text on amber; white on every other fill
NO_RESULT = "#e6e6e6"  # a card no result speaks about (e.g. an unreachable node's)
VERDICT_FILL = {LaunchVerdict.READY: FILL[Status.PASS], LaunchVerdict.DO_NOT_LAUNCH: FILL[Status.FAIL],
                LaunchVerdict.INCONCLUSIVE: FILL[Status.ERROR]}
SERIES = {"all_reduce": "#1565c0", "all_to_all": "#e65100"}
EVIDENCE_CHARS = 4000  # per finding: enough to see what was read, not a 4 MiB reading

CARD_W, CARD_H, GAP, NODE_W, ROW_H, TOP = 112, 58, 8, 124, 72, 8
PLOT_W, PLOT_H, MARGIN_L, MARGIN_B, MARGIN_T, MARGIN_R = 620, 260, 64, 42, 16, 150

CSS = """
:root { color-scheme: light; }
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; margin: 0;
       color: #1a1a1a; background: #f6f7f9; }
main, .wrap { max-width: 1180px; margin: 0 auto; padding: 0 20px; }
main { padding-bottom: 40px; }
header.verdict { color: #fff; padding: 18px 0; }
header.verdict h1 { margin: 0; font-size: 30px; letter-spacing: .5px; }
header.verdict p { margin: 6px 0 0; font-size: 15px; }
header.verdict .more, header.verdict .stats { opacity: .85; }
header.verdict code { background: rgba(255,255,255,.2); padding: 1px 5px; border-radius: 3px; }
section { background: #fff; border: 1px solid #dde1e6; border-radius: 6px; margin-top: 18px; padding: 14px 18px; }
h2 { font-size: 17px; margin: 0 0 10px; }
.legend span { display: inline-block; margin-right: 14px; font-size: 13px; }
.legend i { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 5px;
            vertical-align: -1px; }
svg text { font-family: system-ui, "DejaVu Sans", sans-serif; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #dde1e6; padding: 3px 8px; text-align: left; }
th { background: #f0f2f5; }
td.status { color: #fff; font-weight: 600; text-align: center; }
ol.findings { padding-left: 0; list-style: none; margin: 0; }
li.finding { border-left: 6px solid; padding: 8px 12px; margin-bottom: 10px; background: #fafbfc; }
li.finding .head { font-weight: 600; }
.badge { color: #fff; border-radius: 3px; padding: 1px 6px; font-size: 12px; font-weight: 700; margin-right: 6px; }
.msg { margin: 4px 0; overflow-wrap: anywhere; }
.fix { margin-top: 6px; }
.fix pre, details pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f0f2f5; padding: 8px;
                        margin: 4px 0 0; font-size: 12.5px; }
.muted { color: #5f6670; }
.nowrap { white-space: nowrap; }
footer { color: #5f6670; font-size: 12px; margin-top: 18px; }
"""


def text(value) -> str:
    """Any value from a node or a report as safe HTML text (also inside attributes)."""
    return html.escape(terminal_safe(value), quote=True)


def _ink(status) -> str:
    return INK.get(status, "#ffffff")


def _fill(status) -> str:
    return FILL.get(status, NO_RESULT)


# ------------------------------------------------------------------------------------ the model


def _nodes(report) -> list:
    return list(dict.fromkeys([*report.nodes, *(r.node for r in report.results if r.node)]))


# ------------------------------------------------------------------------------------ rack map


def _svg_text(x, y, value, size=12, weight="normal", fill="#1a1a1a", anchor="start") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" font-weight="{weight}" fill="{fill}" '
            f'text-anchor="{anchor}">{text(value)}</text>')


def _tooltip(results) -> str:
    lines = [f"{r.status.value} {r.check}: {r.message}" for r in findings(results)] or ["every result PASS"]
    return "<title>" + text("\n".join(lines[:12]) + (f"\n... {len(lines) - 12} more" if len(lines) > 12 else "")) \
        + "</title>"


def _edge_layout(pairs, row_of) -> list:
    """(pair, y of one end, y of the other, depth, label y): short spans inside, labels never on top of each other."""
    placed, boxes = [], []
    ordered = sorted((p for p in pairs if p.exporter in row_of and p.importer in row_of),
                     key=lambda p: (abs(row_of[p.exporter] - row_of[p.importer]), row_of[p.exporter]))
    for level, pair in enumerate(ordered):
        ya, yb = sorted((_row_y(row_of[pair.exporter]), _row_y(row_of[pair.importer])))
        depth = 34 + 26 * level
        label_y = (ya + yb) / 2
        while any(abs(label_y - y) < 17 and abs(depth - d) < 104 for d, y in boxes):
            label_y += 17
        boxes.append((depth, label_y))
        placed.append((pair, ya, yb, depth, label_y))
    return placed


def _row_y(row: int) -> float:
    return TOP + row * ROW_H + CARD_H / 2


def _edge_label(pair) -> str:
    bidir = pair.gbps.get("bidir") or (max(pair.gbps.values()) if pair.gbps else None)
    if pair.tcp_fallback:
        return f"TCP {bidir:,.1f} GB/s" if bidir is not None else "TCP fallback"
    if bidir is not None:
        return f"{bidir:,.0f} GB/s"
    return {Status.FAIL: "p2p failed", Status.ERROR: "not measured"}.get(pair.status, pair.status.value)


def rack_map(report) -> str:
    nodes = _nodes(report)
    cards_of, ids = cards(report.results, nodes), accel_ids(report.results)
    columns = sorted(set().union(*cards_of.values()))  # card numbers (card0 may be a BMC's VGA, not a GPU)
    by_place: dict = {}
    for r in report.results:
        by_place.setdefault((r.node, r.gpu), []).append(r)
    row_of = {n: i for i, n in enumerate(nodes)}
    pairs = _edge_layout(fabric_pairs(report.results), row_of)
    grid_right = NODE_W + GAP + len(columns) * (CARD_W + GAP)
    width = grid_right + (max((d for _, _, _, d, _ in pairs), default=0) + 110 if pairs else 0)
    height = TOP + len(nodes) * ROW_H
    out = [f'<svg class="rack" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="rack map">']
    for node, row in row_of.items():
        y = TOP + row * ROW_H
        mine = by_place.get((node, None), [])
        status = worst(r.status for r in mine)
        unreachable = node in report.unreachable
        out.append(f'<g class="node" data-node="{text(node)}" data-status="{status.value if status else ""}">'
                   + _tooltip(mine))
        out.append(f'<rect x="0" y="{y}" width="{NODE_W}" height="{CARD_H}" rx="5" fill="#fff" '
                   f'stroke="{_fill(status)}" stroke-width="3"/>')
        out.append(_svg_text(10, y + 24, node, size=15, weight="bold"))
        note = "unreachable" if unreachable else f"node {status.value}" if status else "no node result"
        out.append(_svg_text(10, y + 44, note, size=12, fill=_fill(status) if status else "#5f6670"))
        out.append("</g>")
        for position, col in enumerate(columns):
            x = NODE_W + GAP + position * (CARD_W + GAP)
            present = col in cards_of[node]
            mine = by_place.get((node, col), [])
            status = worst(r.status for r in mine)
            fill = _fill(status) if status else NO_RESULT
            ink = _ink(status) if status else "#5f6670"
            out.append(f'<g class="card" data-node="{text(node)}" data-gpu="{col}" '
                       f'data-status="{status.value if status else ""}">' + _tooltip(mine))
            dash = "" if present else ' stroke-dasharray="4 3"'
            out.append(f'<rect x="{x}" y="{y}" width="{CARD_W}" height="{CARD_H}" rx="5" fill="{fill}" '
                       f'stroke="#5f6670" stroke-width="{1 if present else 1.5}"{dash}/>')
            out.append(_svg_text(x + 8, y + 18, f"gpu{col}", size=13, weight="bold", fill=ink))
            accid = ids.get(node, {}).get(col)
            out.append(_svg_text(x + 8, y + 35, f"AccId {accid}" if accid is not None else "AccId ?", fill=ink))
            out.append(_svg_text(x + 8, y + 51, status.value if status else ("no result" if present else "not read"),
                                 size=11, weight="bold", fill=ink))
            out.append("</g>")
    labels = []  # drawn after every edge, so no edge runs across another pair's label
    for pair, ya, yb, depth, label_y in pairs:
        status = pair.status
        colour = _fill(status)
        dash = ' stroke-dasharray="7 4"' if pair.tcp_fallback else \
            ' stroke-dasharray="2 3"' if not pair.gbps else ""
        x0, x1 = grid_right - GAP + 2, grid_right + depth
        name = text(pair.name)
        out.append(f'<g class="pair" data-pair="{name}" data-status="{status.value}" '
                   f'data-tcp="{int(pair.tcp_fallback)}" data-gbps="{text(json.dumps(pair.gbps, sort_keys=True))}">'
                   f'<title>{text(pair.name + ": " + pair.message)}</title>')
        out.append(f'<path d="M{x0},{ya} C{x1},{ya} {x1},{yb} {x0},{yb}" fill="none" stroke="{colour}" '
                   f'stroke-width="{2.5 if status == Status.PASS else 3.5}"{dash}/>')
        out += [f'<circle cx="{x0}" cy="{y}" r="4" fill="{colour}"/>' for y in (ya, yb)]
        out.append("</g>")
        label, lx = _edge_label(pair), grid_right + depth * 0.75
        labels.append(f'<g class="pair-label" data-pair="{name}"><title>{text(pair.name + ": " + pair.message)}'
                      f'</title><rect x="{lx - 2:.1f}" y="{label_y - 11:.1f}" width="{7 * len(label) + 8}" '
                      f'height="16" rx="3" fill="#fff" stroke="{colour}"/>'
                      + _svg_text(lx + 2, label_y + 1, label, size=11, weight="bold", fill=colour) + "</g>")
    out += labels
    out.append("</svg>")
    return "".join(out)


def _legend(pairs) -> str:
    items = "".join(f'<span><i style="background:{FILL[s]}"></i>{s.value}</span>'
                    for s in (Status.PASS, Status.WARN, Status.FAIL, Status.ERROR, Status.SKIP))
    gpus = sorted({g for p in pairs for g in p.gpus})
    on = f" measured on gpu{', gpu'.join(map(str, gpus))}" if gpus else ""
    edges = (f'<span class="muted">edges: fabric pairs{on} (bidir GB/s); dashed = TCP fallback, dotted = no '
             'figures</span>') if pairs else ""
    return (f'<p class="legend">{items}<span><i style="background:{NO_RESULT};border:1px dashed #5f6670"></i>'
            f"no result</span>{edges}</p>")


def pair_table(report) -> str:
    pairs = fabric_pairs(report.results)
    if not pairs:
        return ""
    directions = sorted({d for p in pairs for d in p.gbps}, key=lambda d: ("read", "write", "bidir").index(d)
                        if d in ("read", "write", "bidir") else 3)
    head = "".join(f"<th>{text(d)} GB/s</th>" for d in directions)
    rows = []
    for p in pairs:
        cells = "".join(f"<td>{p.gbps[d]:,.1f}</td>" if d in p.gbps else "<td>-</td>" for d in directions)
        mark = " (TCP fallback)" if p.tcp_fallback else ""
        gpus = ", ".join(f"gpu{g}" for g in p.gpus) or "all"
        rows.append(f'<tr class="pair-row" data-pair="{text(p.name)}"><td class="nowrap">{text(p.name)}</td>'
                    f'<td class="nowrap">{gpus}</td>'
                    f'<td class="status" style="background:{_fill(p.status)};color:{_ink(p.status)}">'
                    f'{p.status.value}</td>{cells}<td>{text(p.message)}{mark}</td></tr>')
    return f"<table><tr><th>pair</th><th>GPU</th><th>status</th>{head}<th>result</th></tr>{''.join(rows)}</table>"


# ------------------------------------------------------------------------------------ busbw plot


def _nice_ceiling(value: float) -> float:
    if value <= 0:
        return 1.0
    step = 10 ** math.floor(math.log10(value))
    return next(m * step for m in (1, 2, 2.5, 5, 10) if m * step >= value)


def busbw_plot(report) -> str:
    series: dict = {}
    for p in busbw_points(report.results):
        series.setdefault((p.collective, p.run), {})[p.bytes] = p.busbw_gbs
    if not series:
        return ""
    sizes = sorted({b for s in series.values() for b in s})
    lo, hi = math.log2(sizes[0]), math.log2(sizes[-1])
    top = _nice_ceiling(max(v for s in series.values() for v in s.values()) * 1.05)
    span_x = PLOT_W - MARGIN_L - MARGIN_R
    span_y = PLOT_H - MARGIN_T - MARGIN_B

    def px(size):
        return MARGIN_L + (span_x * (math.log2(size) - lo) / (hi - lo) if hi > lo else span_x / 2)

    def py(value):
        return MARGIN_T + span_y * (1 - value / top)

    out = [f'<svg class="busbw" xmlns="http://www.w3.org/2000/svg" width="{PLOT_W}" height="{PLOT_H}" '
           f'viewBox="0 0 {PLOT_W} {PLOT_H}" role="img" aria-label="busbw per message size">']
    for i in range(5):
        value = top * i / 4
        y = py(value)
        out.append(f'<line x1="{MARGIN_L}" y1="{y:.1f}" x2="{MARGIN_L + span_x}" y2="{y:.1f}" stroke="#e3e6ea"/>')
        out.append(_svg_text(MARGIN_L - 6, y + 4, f"{value:g}", size=11, anchor="end", fill="#5f6670"))
    every = max(1, math.ceil(len(sizes) / 8))  # at most ~8 size labels
    for i, size in enumerate(sizes):
        if i % every == 0 or i == len(sizes) - 1:
            x = px(size)
            out.append(f'<line x1="{x:.1f}" y1="{MARGIN_T + span_y}" x2="{x:.1f}" y2="{MARGIN_T + span_y + 4}" '
                       'stroke="#5f6670"/>')
            out.append(_svg_text(x, MARGIN_T + span_y + 17, human_bytes(size).replace(" ", "\u00a0"), size=11,
                                 anchor="middle", fill="#5f6670"))
    out.append(f'<line x1="{MARGIN_L}" y1="{MARGIN_T + span_y}" x2="{MARGIN_L + span_x}" y2="{MARGIN_T + span_y}" '
               'stroke="#5f6670"/>')
    out.append(_svg_text(MARGIN_L + span_x / 2, PLOT_H - 6, "message size", size=12, anchor="middle"))
    out.append(f'<text x="14" y="{MARGIN_T + span_y / 2:.0f}" font-size="12" text-anchor="middle" '
               f'transform="rotate(-90 14 {MARGIN_T + span_y / 2:.0f})">busbw GB/s</text>')
    for i, ((collective, run), points) in enumerate(series.items()):
        colour = SERIES.get(collective, "#37474f")
        xy = [(px(b), py(v)) for b, v in sorted(points.items())]
        name = f"{collective} ({run})" if run else collective
        out.append(f'<g class="series" data-collective="{text(collective)}" data-run="{text(run)}" '
                   f'data-points="{len(xy)}">')
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
                   + " ".join(f"{x:.1f},{y:.1f}" for x, y in xy) + '"/>')
        out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"><title>{text(human_bytes(b))}: '
                f'{v:,.2f} GB/s</title></circle>' for (x, y), (b, v) in zip(xy, sorted(points.items()), strict=True)]
        ly = MARGIN_T + 14 + 18 * i
        out.append(f'<line x1="{PLOT_W - MARGIN_R + 12}" y1="{ly - 4}" x2="{PLOT_W - MARGIN_R + 30}" y2="{ly - 4}" '
                   f'stroke="{colour}" stroke-width="2"/>')
        out.append(_svg_text(PLOT_W - MARGIN_R + 34, ly, name, size=11))
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


# ------------------------------------------------------------------------------------ table, findings


def check_table(report, checks) -> str:
    """The checks x nodes of the nodes that were read (the others are said once, in the findings)."""
    results = unread.read_results(report)
    columns = [n for n in report.nodes if n not in unread.unread_nodes(report)]
    columns += [CLUSTER_COLUMN] if any(r.node is None for r in results) else []
    rows = []
    not_run = set(report.not_for_platform)
    for chk in (c for c in checks if c.name not in not_run):
        mine = [r for r in results if r.check == chk.name]
        cells = []
        for col in columns:
            status = worst(r.status for r in mine if (r.node or CLUSTER_COLUMN) == col)
            cells.append(f'<td class="status" style="background:{_fill(status)};color:{_ink(status)}">'
                         f'{status.value}</td>' if status else '<td class="muted">-</td>')
        rows.append(f"<tr><td>{text(chk.name)}</td>{''.join(cells)}</tr>")
    head = "".join(f"<th>{text(c)}</th>" for c in columns)
    return f"<table><tr><th>check</th>{head}</tr>{''.join(rows)}</table>"


def _evidence(r) -> str:
    if not r.evidence:
        return ""
    dumped = json.dumps(r.evidence, indent=1, default=str, ensure_ascii=False)
    if len(dumped) > EVIDENCE_CHARS:
        dumped = dumped[:EVIDENCE_CHARS] + f"\n... ({len(dumped) - EVIDENCE_CHARS} more characters: see --format json)"
    return f"<details><summary>evidence</summary><pre>{text(dumped)}</pre></details>"


def _finding(r, remediations) -> str:
    fix = remediations.get(r.remediation) if r.remediation else None
    place = _place(r)
    fix_html = ""
    if fix:
        fix_html = (f'<div class="fix"><b>Fix</b> <code>{text(fix.code)}</code>: {text(fix.title)}'
                    f"<pre>{text(fix.text.strip())}</pre></div>")
    elif r.remediation:
        fix_html = f'<div class="fix"><b>Fix</b>: <code>k3doctor explain {text(r.remediation)}</code></div>'
    return (f'<li class="finding" data-status="{r.status.value}" data-check="{text(r.check)}" '
            f'data-node="{text(r.node or "")}" data-gpu="{"" if r.gpu is None else r.gpu}" '
            f'style="border-color:{_fill(r.status)}">'
            f'<div class="head"><span class="badge" style="background:{_fill(r.status)};color:{_ink(r.status)}">'
            f'{r.status.value}</span>{text(r.check)} &middot; {text(place)}</div>'
            f'<div class="msg">{text(r.message)}</div>{fix_html}{_evidence(r)}</li>')


def _not_read(group, total: int, checks: int) -> str:
    """One cause of nodes not read, once for all of its nodes: its words, fix, and what did not run there."""
    fix = f'<div class="fix"><b>Fix</b>: {text(group.fix())}</div>' if group.fix() else ""
    return (f'<li class="finding not-read" data-status="ERROR" data-cause="{text(group.cause)}" '
            f'data-nodes="{text(" ".join(group.nodes))}" style="border-color:{_fill(Status.ERROR)}">'
            f'<div class="head"><span class="badge" style="background:{_fill(Status.ERROR)};'
            f'color:{_ink(Status.ERROR)}">NOT READ</span>{len(group.nodes)} of {total} nodes &middot; '
            f'{text(group.names())}</div><div class="msg">{text(group.summary)} <code>{text(group.cause)}</code>'
            f' &middot; {checks} check(s) not run on each</div>{fix}</li>')


def findings_section(report, verbose, remediations, checks=()) -> str:
    found = findings(unread.read_results(report))
    shown = [r for r in found if r.status != Status.SKIP]
    skipped = [r for r in found if r.status == Status.SKIP]
    groups = unread.groups(report)
    ran = len([c for c in checks if c.name not in set(report.not_for_platform)])
    parts = ['<ol class="findings">' + "".join(_not_read(g, len(report.nodes), ran) for g in groups)
             + "".join(_finding(r, remediations) for r in shown) + "</ol>"
             if shown or groups else '<p class="muted">No finding: every check that ran passed.</p>']
    if skipped:
        parts.append(f"<details{' open' if verbose else ''}><summary>{len(skipped)} not evaluated (SKIP)</summary>"
                     '<ol class="findings">' + "".join(_finding(r, remediations) for r in skipped) + "</ol></details>")
    if verbose:
        passes = [r for r in report.results if r.status == Status.PASS]
        rows = "".join(f"<tr><td>{text(r.check)}</td><td>{text(where(r))}</td><td>{text(r.message)}</td></tr>"
                       for r in passes)
        parts.append(f"<details><summary>{len(passes)} passing results</summary><table>"
                     f"<tr><th>check</th><th>where</th><th>result</th></tr>{rows}</table></details>")
    return "".join(parts)


def _cause(report, remediations) -> tuple:
    """(the worst finding and where it is, what to do about it) for the banner: the first screen says both.
    Nodes not read come first, unless a node that was read FAILed."""
    found = findings(unread.read_results(report))
    shown = [r for r in found if r.status.severity > 1] or found
    groups, read = unread.groups(report), unread.nodes_read(report)
    if groups and not (shown and shown[0].status == Status.FAIL):
        more = len(groups) - 1 + len(shown)
        more = f" <span class=\"more\">(+{more} more below)</span>" if more else ""
        first = groups[0]
        fix = f'<p id="fix">Fix: {text(first.fix())}</p>' if first.fix() else ""
        return (f"<b>{text(read)}</b>: {text(first.line(len(report.nodes)))}{more}", fix)
    if not shown:
        return f"{len(report.results)} result(s), every one PASS", ""
    top = shown[0]
    more = f" <span class=\"more\">(+{len(shown) - 1} more below)</span>" if len(shown) > 1 else ""
    cause = f"<b>{text(top.check)}</b> on <b>{text(_place(top))}</b>: {text(top.message)}{more}"
    fix = remediations.get(top.remediation) if top.remediation else None
    if not top.remediation:
        return cause, ""
    title = f"{text(fix.title)} &middot; " if fix else ""
    return cause, f'<p id="fix">Fix: {title}<code>k3doctor explain {text(top.remediation)}</code></p>'


def _place(r) -> str:
    return f"{r.node} gpu{r.gpu}" if r.node and r.gpu is not None else where(r)


def _counts(results) -> str:
    counts = {s: sum(r.status == s for r in results) for s in Status}
    return ", ".join(f"{n} {s.value.lower()}" for s, n in counts.items() if n) or "no results"


@output("html", "one self-contained HTML page: verdict, rack map, fabric pairs, busbw plot, findings (use -o FILE)")
def render(report, checks, verbose, remediations=None):
    remediations = REGISTRY.remediations if remediations is None else remediations
    verdict = overall(report.results)
    cause, fix = _cause(report, remediations)
    unreachable = f" &middot; unreachable: {text(', '.join(report.unreachable))}" if report.unreachable else ""
    stamp = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime())
    plot, pairs = busbw_plot(report), pair_table(report)
    body = [
        f'<header class="verdict" style="background:{VERDICT_FILL[verdict]}"><div class="wrap">'
        f'<h1 id="verdict">{verdict.text}</h1><p id="cause">{cause}</p>{fix}'
        f'<p class="stats">{len(report.nodes)} node(s) &middot; {_counts(report.results)} &middot; '
        f'{report.duration_s:.1f}s'
        f"{unreachable}</p></div></header><main>",
        f'<section id="rack-map"><h2>Rack map</h2>{_legend(fabric_pairs(report.results))}{rack_map(report)}'
        "</section>",
    ]
    if pairs:
        body.append(f'<section id="fabric"><h2>Fabric pairs (deep tier)</h2>{pairs}</section>')
    if plot:
        body.append(f'<section id="busbw"><h2>Collective busbw per message size (deep tier)</h2>{plot}</section>')
    body.append(f'<section id="findings"><h2>Findings</h2>{findings_section(report, verbose, remediations, checks)}'
                '</section>')
    if checks:
        body.append(f'<section id="checks"><h2>Checks x nodes</h2>{check_table(report, checks)}</section>')
    body.append(f"<footer>k3doctor {text(__version__)} &middot; generated {stamp}</footer></main>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
            "img-src data:\">"
            f"<title>k3doctor: {verdict.text}</title><style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")
