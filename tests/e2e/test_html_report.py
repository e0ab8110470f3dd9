"""The HTML report end to end: the real CLI on the simulated rack, the page read by headless Chromium.

Chromium renders the file (screenshot) and gives back the DOM it built: the faulty card is red,
its finding is listed with the fix, every healthy card is not red, node text stays text.
"""
import os
import re
import shutil
import stat

import pytest
from k3rig.fixtures import GPUS_PER_NODE, accel_base
from PIL import Image

from k3doctor.outputs.html import FILL
from k3doctor.results import Status
from tests.chromium import cards, render
from tests.e2e.cli import k3

pytestmark = pytest.mark.e2e
RED = FILL[Status.FAIL]
NODES = ("ct13", "ct14", "ct16", "ct17")
SCREENSHOTS = os.environ.get("K3DOCTOR_SCREENSHOTS")  # keep the screenshots here (they go to tmp_path otherwise)


def keep(png):
    if SCREENSHOTS:
        os.makedirs(SCREENSHOTS, exist_ok=True)
        shutil.copy(png, SCREENSHOTS)


def self_contained(page: str):
    """Nothing the page could fetch: no script, no external reference of any kind."""
    assert "<script" not in page.lower()
    assert not re.search(r"""\s(src|href|xlink:href)\s*=|@import|url\(|<link|<iframe|<object""", page, re.I)
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) <= {"http://www.w3.org/2000/svg"}


def pixels(png, colour: str) -> int:
    want = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
    with Image.open(png) as img:
        return sum(n for n, rgb in img.convert("RGB").getcolors(1 << 24) if rgb == want)


def test_failing_card_is_red_on_the_rack_map_and_listed_with_its_fix(rig, tmp_path):
    rig.apply("card-unconfigured")  # ct14 card1
    page, saved = tmp_path / "report.html", tmp_path / "state.json"
    rc, out, err = k3("check", "--nodes", rig.inventory_path, "--format", "html", "-o", page,
                      "--save-readings", saved, "--keep-identifiers")  # the offline page names the same nodes
    assert (rc, out) == (1, ""), err
    assert stat.S_IMODE(page.stat().st_mode) == 0o600  # it holds evidence from the nodes
    self_contained(page.read_text())

    png, dom = render(page, tmp_path)
    keep(png)
    assert dom.first("h1", id="verdict").text == "DO NOT LAUNCH"
    assert "ct14 gpu1" in dom.first("p", id="cause").text
    grid = cards(dom)
    assert set(grid) == {(n, g) for n in NODES for g in range(GPUS_PER_NODE)}
    red = {place for place, (_, fill, _) in grid.items() if fill == RED}
    assert red == {("ct14", 1)}, red
    assert {grid[p][0] for p in grid if p != ("ct14", 1)} == {"PASS"}
    for tray, node in zip((13, 14, 16, 17), NODES, strict=True):
        for gpu in range(GPUS_PER_NODE):  # the rig numbers card0 highest: AccIds 3 2 1 0 of the tray
            assert f"AccId {accel_base(tray) + GPUS_PER_NODE - 1 - gpu}" in grid[(node, gpu)][2]
    [finding] = [f for f in dom.find_all("li", cls="finding") if f.attrs["data-status"] == "FAIL"]
    assert (finding.attrs["data-check"], finding.attrs["data-node"], finding.attrs["data-gpu"]) == \
        ("ualink-state", "ct14", "1")
    _, explained, _ = k3("explain", "UALINK-NOT-ACTIVE")
    remedy = explained.split("\n\n", 1)[1].split("\n\nRaised by")[0].strip()
    assert " ".join(remedy.split()) in " ".join(finding.text.split())  # the fix itself, not only its code
    # what Chromium painted: the 15 healthy cards' green (and the table's) is on the screenshot
    assert pixels(png, FILL[Status.PASS]) > 15 * 100 * 50

    judged = tmp_path / "judged.html"  # the same page offline, from the saved readings
    rc, _, err = k3("judge", saved, "--format", "html", "-o", judged)
    assert rc == 1, err
    _, again = render(judged, tmp_path)
    assert cards(again) == grid


def test_node_markup_and_control_characters_stay_text(rig, tmp_path):
    rig.apply("html-hostile-accel-state")  # ct16 card2: <script>, </svg>, <u>, ESC, NUL, SOH
    page = tmp_path / "hostile.html"
    rc, _, err = k3("check", "--nodes", rig.inventory_path, "--format", "html", "-o", page)
    assert rc == 1, err
    text = page.read_text()
    self_contained(text)
    assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", text)
    png, dom = render(page, tmp_path)
    keep(png)
    assert not dom.find_all("script") and not dom.find_all("u")  # nothing the node wrote became an element
    assert dom.first("title").text.startswith("k3doctor: DO NOT LAUNCH")
    grid = cards(dom)
    assert {p for p, (_, fill, _) in grid.items() if fill == RED} == {("ct16", 2)}
    [finding] = [f for f in dom.find_all("li", cls="finding") if f.attrs["data-status"] == "FAIL"]
    assert "<script>document.title='owned'</script></svg><u>x\\x1b[31m\\x00\\x01" in finding.text
    assert len(dom.find_all("svg", cls="rack")) == 1 and len(grid) == 16  # the map was not cut short


def test_fabric_pairs_are_edges_with_gbps_and_the_tcp_fallback_marked(rig, tmp_path):
    rig.apply("ualoe-tcp-fallback")  # ct16's traffic at TCP speed
    page = tmp_path / "fabric.html"
    rc, _, err = k3("check", "--nodes", rig.inventory_path, "--only", "ualoe-fabric", "--format", "html",
                    "-o", page, timeout=400)
    assert rc == 1, err
    png, dom = render(page, tmp_path)
    keep(png)
    edges = {g.attrs["data-pair"]: g for g in dom.find_all("g", cls="pair")}
    labels = {g.attrs["data-pair"]: g for g in dom.find_all("g", cls="pair-label")}
    assert set(edges) == {"ct13<->ct14", "ct14<->ct16", "ct16<->ct17", "ct17<->ct13"}
    tcp = {name for name, g in edges.items() if g.attrs["data-tcp"] == "1"}
    assert tcp == {"ct14<->ct16", "ct16<->ct17"}
    for name, g in edges.items():
        path = g.first("path")
        if name in tcp:
            assert (g.attrs["data-status"], path.attrs["stroke"]) == ("FAIL", RED) and path.attrs["stroke-dasharray"]
            assert re.fullmatch(r"TCP 4\.5 GB/s", labels[name].first("text").text)
        else:
            assert g.attrs["data-status"] == "PASS" and path.attrs["stroke"] != RED
            assert re.fullmatch(r"1\d,\d{3} GB/s", labels[name].first("text").text)  # bidir ~10,96x GB/s
    rows = {r.attrs["data-pair"] for r in dom.find_all("tr", cls="pair-row")}
    assert rows == set(edges)
    assert {(f.attrs["data-node"], f.attrs["data-check"]) for f in dom.find_all("li", cls="finding")
            if f.attrs["data-status"] == "FAIL"} == {("ct16", "ualoe-fabric")}
