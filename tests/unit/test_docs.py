"""The manual (docs/, reference: mkdocs): its reference tables are made from the registry and the data files by
docs/generate.py, so a committed page that differs from what the code makes now is stale and fails here; the
build is `mkdocs build --strict` (a broken link or a page missing from the navigation fails it); each "how to
add" page's example is a file this module runs."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from k3doctor import platforms, testing
from k3doctor.inventory.load import parse_inventory
from k3doctor.results import Status

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS))
import generate  # noqa: E402  (docs/generate.py: the generator is a script of the manual, not of k3doctor)


@pytest.mark.parametrize("name", sorted(generate.pages()))
def test_the_committed_reference_page_is_what_the_code_makes_now(name):
    committed = (DOCS / "reference" / name).read_text()
    assert committed == generate.pages()[name], f"docs/reference/{name} is stale: run `python3 docs/generate.py`"


def test_the_manual_builds_strict(tmp_path):
    pytest.importorskip("mkdocs")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "reference" / "platforms" / "index.html").exists()


def test_a_broken_link_fails_the_build(tmp_path):
    """The build above can fail: a copy of the manual with one link to a page that does not exist."""
    pytest.importorskip("mkdocs")
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "index.md"
    page.write_text(page.read_text() + "\n[gone](no-such-page.md)\n")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(tmp_path / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "no-such-page.md" in done.stderr


def _block(page: str) -> str:
    [block] = re.findall(r"```yaml\n(.*?)```", (DOCS / page).read_text(), re.DOTALL)
    return block


def test_adding_a_platform_example_is_the_file_and_it_works(tmp_path, monkeypatch):
    example = DOCS / "examples" / "mi300a.yaml"
    assert _block("adding-a-platform.md") == example.read_text()
    folder = tmp_path / "platforms"
    shutil.copytree(platforms.DIR, folder, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    shutil.copy(example, folder)
    monkeypatch.setattr(platforms, "DIR", folder)
    platforms.get.cache_clear()
    try:
        from k3doctor.registry import REGISTRY, load_checks

        load_checks()
        assert platforms.problems(REGISTRY) == []
        inv = parse_inventory("cluster: {platform: mi300a, hbm_gib_per_gpu: 128}\nnodes:\n  - {name: n0, transport: "
                              "local}\n", "inv.yaml")
        from tests.unit.test_platforms import MI300A, _topology
        [v] = testing.judge("gpu-platform", {"topology": _topology(MI300A.read_text())}, settings=inv.cluster)
        assert v.status == Status.PASS and "platform mi300a as declared" in v.message
    finally:
        platforms.get.cache_clear()


def test_writing_a_rule_example_is_the_file_and_fires_on_its_sample():
    example = DOCS / "examples" / "site-rule.yaml"
    text = example.read_text()
    assert _block("writing-a-rule.md") == text
    inv = parse_inventory(text, str(example))
    [sample] = re.findall(r"^# sample: (.*)$", text, re.M)
    rule = inv.cluster.checks["kernel-health"]["rules"]["SITE-XGMI-RETRAIN"]
    assert re.search(rule["pattern"], sample)
