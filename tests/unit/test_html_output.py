"""The HTML report's pure parts: rack-map model, escaping of hostile node text, pair edges, busbw plot.

The page is parsed back with the standard library's html.parser (tests/chromium.py); the busbw
plot is also rendered by headless Chromium from a real 2 x H200 probe report (bench/results/).
"""
import json
import re
from pathlib import Path

from k3doctor import testing
from k3doctor.judging.runner import RunReport
from k3doctor.outputs import OUTPUTS, write_output
from k3doctor.outputs.html import FILL, NO_RESULT
from k3doctor.outputs.text import terminal_safe
from k3doctor.probes.collective_figures import with_sweep_figures
from k3doctor.probes.ualoe_verdicts import pair_figures
from k3doctor.registry import REGISTRY, load_checks
from k3doctor.results import CardId, Result, Status
from tests.chromium import cards, parse, render

REPO = Path(__file__).resolve().parents[2]
H200_X2 = REPO / "bench/results/allreduce-h200-x2-2026-11-29/healthy.json"
HOSTILE = "<script>alert(1)</script>\x1b[31m\x00\x07\udcff</svg>\"'&"


def page(results, nodes=("ct13", "ct14"), unreachable=None, verbose=False):
    load_checks()
    report = RunReport(results=results, nodes=list(nodes), duration_s=3.2, unreachable=unreachable or {})
    checks = [c for c in REGISTRY.ordered() if any(r.check == c.name for r in results)]
    return OUTPUTS["html"].render(report, checks, verbose)


def with_accids(results: list, ids: dict) -> list:
    """The results, each card's ualink-state result carrying its AccId as the check adds it ({node: {gpu: id}})."""
    for r in results:
        if r.check == "ualink-state" and r.gpu is not None:
            r.figures.append(CardId(r.gpu, ids.get(r.node, {}).get(r.gpu)))
    return results


def report_results(path: Path) -> list:
    """A saved JSON report's results, with the figures the probe adds to them."""
    doc = json.loads(path.read_text())
    return with_sweep_figures([Result(r["check"], r["node"], Status(r["status"]), r["message"], gpu=r["gpu"],
                                      evidence=r["evidence"], remediation=r["remediation"]) for r in doc["results"]])


def test_each_card_takes_its_worst_result_and_its_accid_from_the_check():
    results = [Result("ualink-state", "ct13", Status.PASS, "ok", gpu=g) for g in range(4)] + \
              [Result("ualink-state", "ct14", Status.PASS, "ok", gpu=g) for g in range(4)] + \
              [Result("kernel-health", "ct14", Status.WARN, "recoverable", gpu=2),
               Result("ualink-state", "ct14", Status.FAIL, "unconfigured", gpu=3),
               Result("kernel-health", "ct14", Status.PASS, "clean", gpu=3),
               Result("rack-free", "ct13", Status.ERROR, "docker unreadable")]  # node-wide: not on a card
    results = with_accids(results, {"ct13": {0: 51, 1: 50, 2: 49, 3: 48}, "ct14": {0: 55, 3: 52}})
    grid = cards(parse(page(results)))
    assert {p: fill for p, (_, fill, _) in grid.items()} == {
        **{("ct13", g): FILL[Status.PASS] for g in range(4)},
        ("ct14", 0): FILL[Status.PASS], ("ct14", 1): FILL[Status.PASS],
        ("ct14", 2): FILL[Status.WARN], ("ct14", 3): FILL[Status.FAIL]}
    assert "AccId 51" in grid[("ct13", 0)][2] and "AccId 48" in grid[("ct13", 3)][2]
    assert "AccId 52" in grid[("ct14", 3)][2] and "AccId ?" in grid[("ct14", 1)][2]  # unset: never guessed
    dom = parse(page(results))
    assert dom.first("g", cls="node", data_node="ct13").attrs["data-status"] == "ERROR"


def test_cards_are_the_amd_drm_cards_a_bmc_vga_card0_is_no_column():
    vendors = {f"/sys/class/drm/card{c}/device/vendor": v for c, v in ((0, "0x1a03\n"), (1, "0x1002\n"),
                                                                      (2, "0x1002\n"))}
    judged = testing.judge("gpu-inventory", {"vendors": vendors, "vram": {}, "smi": ""}, node="ct13")
    results = [Result("gpu-inventory", "ct13", v.status, v.message, figures=v.figures) for v in judged]  # node-wide
    grid = cards(parse(page(results, nodes=("ct13",))))
    assert set(grid) == {("ct13", 1), ("ct13", 2)}


def test_an_unreachable_node_keeps_its_row_with_cards_marked_not_read():
    results = [Result("ualink-state", "ct13", Status.PASS, "ok", gpu=g) for g in range(4)] + \
              [Result("ualink-state", "ct14", Status.ERROR, "node not checked: connection refused")]
    dom = parse(page(results, unreachable={"ct14": "connection refused"}))
    grid = cards(dom)
    assert {grid[("ct14", g)][1] for g in range(4)} == {NO_RESULT}
    assert all("not read" in grid[("ct14", g)][2] for g in range(4))
    assert "unreachable" in dom.first("g", cls="node", data_node="ct14").text
    assert dom.first("h1", id="verdict").text == "INCONCLUSIVE"


def test_hostile_node_text_is_escaped_everywhere():
    results = [Result("ualink-state", HOSTILE, Status.FAIL, HOSTILE, gpu=0, remediation=HOSTILE,
                      evidence={HOSTILE: HOSTILE}),
               Result("ualoe-fabric", HOSTILE, Status.FAIL, HOSTILE, gpu=0,
                      evidence=(ev := {"pair": HOSTILE, "exporter": HOSTILE, "importer": "ct14",
                                       "gbps": {"bidir": 4.5}}),
                      figures=pair_figures(ev))]
    text = page(results, nodes=[HOSTILE, "ct14"], unreachable={HOSTILE: HOSTILE}, verbose=True)
    assert "<script" not in text and "</svg>\"" not in text
    assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", text)
    dom = parse(text)
    assert not dom.find_all("script")
    shown = terminal_safe(HOSTILE)  # what a person reads: the markup as text, controls as \\xNN
    assert shown.startswith("<script>alert(1)</script>\\x1b[31m\\x00\\x07")
    [card] = [g for g in dom.find_all("g", cls="card") if g.attrs["data-node"] != "ct14"]
    assert card.attrs["data-node"] == shown
    assert len(dom.find_all("svg", cls="rack")) == 1 and len(dom.find_all("li", cls="finding")) == 2
    [edge] = dom.find_all("g", cls="pair")
    assert edge.attrs["data-pair"] == shown


def test_written_like_every_report_atomically_and_private(tmp_path):
    target = tmp_path / "report.html"
    target.write_text("old")
    target.chmod(0o644)
    text = page([Result("shm-clean", "ct13", Status.PASS, "clean")])
    write_output(str(target), text, private=OUTPUTS["html"].private)
    assert target.read_text() == text and (target.stat().st_mode & 0o777) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temporary file left


def test_pair_edges_mark_tcp_fallback_and_failed_pairs():
    def pair(a, b, status, gbps=None, code=None):
        ev = {"pair": f"{a}<->{b}", "exporter": a, "importer": b, **({"gbps": gbps} if gbps else {})}
        return [Result("ualoe-fabric", n, status, f"{a}<->{b}: x", gpu=0, evidence=ev, remediation=code,
                       figures=pair_figures(ev)) for n in (a, b)]
    good = {"read": 5788.0, "write": 6219.0, "bidir": 10968.0}
    results = pair("ct13", "ct14", Status.PASS, good) + \
        pair("ct14", "ct16", Status.FAIL, {"read": 2.3, "write": 2.4, "bidir": 4.5}, "UALOE-TCP-FALLBACK") + \
        pair("ct16", "ct17", Status.FAIL, None, "UALOE-P2P")
    dom = parse(page(results, nodes=("ct13", "ct14", "ct16", "ct17")))
    edges = {g.attrs["data-pair"]: g for g in dom.find_all("g", cls="pair")}
    labels = {g.attrs["data-pair"]: g for g in dom.find_all("g", cls="pair-label")}
    assert [labels[p].first("text").text for p in ("ct13<->ct14", "ct14<->ct16", "ct16<->ct17")] == \
        ["10,968 GB/s", "TCP 4.5 GB/s", "p2p failed"]
    assert "stroke-dasharray" not in edges["ct13<->ct14"].first("path").attrs
    assert edges["ct14<->ct16"].first("path").attrs["stroke-dasharray"] == "7 4"  # TCP: dashed
    assert edges["ct16<->ct17"].first("path").attrs["stroke-dasharray"] == "2 3"  # no figures: dotted
    assert {p: g.attrs["data-status"] for p, g in edges.items()} == \
        {"ct13<->ct14": "PASS", "ct14<->ct16": "FAIL", "ct16<->ct17": "FAIL"}
    spots = [(float(g.first("rect").attrs["x"]), float(g.first("rect").attrs["y"])) for g in labels.values()]
    assert len(set(spots)) == 3  # no two labels on one spot


def test_busbw_plot_of_a_real_two_gpu_probe_in_chromium(tmp_path):
    results = report_results(H200_X2)
    sizes = results[0].evidence["sizes"]
    target = tmp_path / "busbw.html"
    target.write_text(page(results, nodes=("gpuhost",)))
    png, dom = render(target, tmp_path)
    [series] = dom.find_all("g", cls="series")
    assert series.attrs["data-collective"] == "all_reduce" and int(series.attrs["data-points"]) == len(sizes) == 13
    points = [tuple(map(float, xy.split(","))) for xy in series.first("polyline").attrs["points"].split()]
    assert [x for x, _ in points] == sorted(x for x, _ in points)  # sizes left to right
    top = max(sizes, key=lambda r: r["busbw_gbs"])
    assert min(points, key=lambda p: p[1]) == points[sizes.index(top)]  # highest busbw drawn highest
    assert {"1 MiB", "4 GiB"} <= {t.text.replace("\u00a0", " ") for t in dom.first("svg", cls="busbw").find_all("text")}
    assert dom.first("h1", id="verdict").text == "READY TO LAUNCH"
