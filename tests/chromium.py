"""Headless Chromium (Debian's ``chromium``) as the HTML report's consumer: a screenshot and the DOM it built.

The DOM comes from ``--dump-dom`` (what the browser made of the file, not the file's text), parsed
into a small element tree with the standard library's html.parser.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


def chromium() -> str:
    found = shutil.which("chromium")
    if not found:
        pytest.skip("headless Chromium is not installed (scripts/install.sh installs Debian's chromium)")
    return found


def _run(page: Path, profile: Path, *args, timeout=120) -> subprocess.CompletedProcess:
    # a profile of its own (other tests may run Chromium at the same time); nothing may be fetched
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           f"--user-data-dir={profile}", "--host-resolver-rules=MAP * ~NOTFOUND", *args, page.resolve().as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def render(page: Path, out_dir: Path, width: int = 1280, height: int = 1600) -> tuple:
    """(screenshot path, DOM tree) of ``page`` as headless Chromium renders it."""
    png = out_dir / (page.stem + ".png")
    shot = _run(page, out_dir / "chromium-profile", f"--screenshot={png}", f"--window-size={width},{height}")
    assert png.is_file() and png.stat().st_size > 0, shot.stderr[-2000:]
    dom = _run(page, out_dir / "chromium-profile", "--dump-dom")
    assert dom.returncode == 0 and "<html" in dom.stdout, dom.stderr[-2000:]
    return png, parse(dom.stdout)


@dataclass
class Element:
    tag: str
    attrs: dict
    children: list = field(default_factory=list)
    parent: Element | None = None
    own_text: list = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.own_text) + "".join(c.text for c in self.children)

    def iter(self):
        yield self
        for child in self.children:
            yield from child.iter()

    def find_all(self, tag=None, cls=None, **attrs) -> list:
        return [e for e in self.iter() if (tag is None or e.tag == tag)
                and (cls is None or cls in e.attrs.get("class", "").split())
                and all(e.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def first(self, tag=None, cls=None, **attrs):
        found = self.find_all(tag, cls, **attrs)
        assert found, f"no <{tag} class={cls} {attrs}> in the DOM"
        return found[0]


class _Builder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = self.top = Element("#document", {})

    def handle_starttag(self, tag, attrs):
        element = Element(tag, {k: v or "" for k, v in attrs}, parent=self.top)
        self.top.children.append(element)
        if tag not in VOID:
            self.top = element

    def handle_startendtag(self, tag, attrs):
        self.top.children.append(Element(tag, {k: v or "" for k, v in attrs}, parent=self.top))

    def handle_endtag(self, tag):
        node = self.top
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.top = node.parent

    def handle_data(self, data):
        self.top.own_text.append(data)


def parse(dom: str) -> Element:
    builder = _Builder()
    builder.feed(dom)
    builder.close()
    return builder.root


def cards(dom: Element) -> dict:
    """{(node, gpu): (status, fill colour, label text)} of the rack map's cards."""
    out = {}
    for g in dom.find_all("g", cls="card"):
        rect = g.first("rect")
        out[(g.attrs["data-node"], int(g.attrs["data-gpu"]))] = (g.attrs["data-status"], rect.attrs["fill"],
                                                                  " ".join(t.text for t in g.find_all("text")))
    return out
