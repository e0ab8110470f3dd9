"""The manual (docs/, reference: mkdocs): its reference tables are made from the registry and the data files by
docs/generate.py when the manual is built (a mkdocs hook), so none is committed and none can be stale - a new
check, rule or platform edits no page; the build is `mkdocs build --strict` (a broken link or a page missing
from the navigation fails it); each "how to add" page's example is a file this module runs."""
import importlib.util
import os
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
EXAMPLES = DOCS / "examples"
sys.path.insert(0, str(DOCS))
import generate  # noqa: E402  (docs/generate.py: the generator is a script of the manual, not of k3doctor)


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict`, in a fresh interpreter (this one's registry also holds the checks other tests
    registered, which no user's has) that imports this checkout's k3doctor."""
    pytest.importorskip("mkdocs")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, timeout=180, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = build(ROOT / "mkdocs.yml", out)
    assert done.returncode == 0, done.stderr
    return out


def test_no_reference_page_is_committed():
    """A committed table would be one more file for every new check, rule or platform to edit."""
    assert not (DOCS / "reference").exists()


def test_the_manual_builds_strict_with_the_reference_made_now(site):
    from k3doctor.registry import REGISTRY, load_checks, load_rule_tables, rule_table_rows

    load_checks()
    load_rule_tables()
    pages = {name: (site / "reference" / name.removesuffix(".md") / "index.html").read_text()
             for name in generate.pages()}
    builtin = [c for c in REGISTRY.ordered() if (c.judge or c.probe).__module__.startswith("k3doctor.checks.")]
    assert len(builtin) > 20 and all(f"<code>{c.name}</code>" in pages["checks.md"] for c in builtin)
    assert all(f"<code>{row}</code>" in pages["rules.md"] for row, _ in rule_table_rows())
    assert all(f"<code>{name}</code>" in pages["platforms.md"] for name in platforms.names())


def test_a_broken_link_fails_the_build(tmp_path):
    """The build above can fail: a copy of the manual with one link to a page that does not exist."""
    pytest.importorskip("mkdocs")
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "index.md"
    page.write_text(page.read_text() + "\n[gone](no-such-page.md)\n")
    done = build(tmp_path / "mkdocs.yml", tmp_path / "site")
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


def _blocks(page: str, lang: str) -> list:
    return re.findall(rf"```{lang}\n(.*?)```", (DOCS / page).read_text(), re.DOTALL)


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_tests(module) -> list:
    tests = [f for name, f in vars(module).items() if name.startswith("test_") and callable(f)]
    for test in tests:
        test()
    return tests


def test_writing_a_check_examples_are_the_files_and_their_tests_pass():
    """The page's example is tests/unit/test_check_api.py's; the second one (test_one_file_each's) runs here."""
    assert _blocks("writing-a-check.md", "python")[:2] == [(EXAMPLES / "ifoe_loaded.py").read_text(),
                                                           (EXAMPLES / "test_ifoe_loaded.py").read_text()]
    check, test = EXAMPLES / "clock_synced.py", EXAMPLES / "test_clock_synced.py"
    with testing.temporary_registry() as reg:
        _module(check)
        assert set(reg.checks) == {"clock-synced"}
        assert len(_run_tests(_module(test))) == 2


def test_writing_a_rule_builtin_row_example_is_the_file_and_fires_on_its_sample():
    from k3doctor.rules import triage

    row, test = EXAMPLES / "triage-row.txt", EXAMPLES / "test_hip_out_of_memory.py"
    assert _blocks("writing-a-rule.md", "python") == [row.read_text(), test.read_text()]
    rule = eval(row.read_text().strip().rstrip(","), vars(triage))  # noqa: S307 (the manual's own row)
    assert isinstance(rule, triage.Rule) and re.search(rule.pattern, rule.sample)


def test_writing_an_output_format_example_is_the_file_and_renders(monkeypatch):
    from k3doctor.judging.runner import RunReport
    from k3doctor.outputs import registry
    from k3doctor.results import Result

    example = EXAMPLES / "oneline.py"
    assert _blocks("writing-an-output-format.md", "python") == [example.read_text(),
                                                                (EXAMPLES / "test_oneline.py").read_text()]
    monkeypatch.setattr(registry, "OUTPUTS", {k: v for k, v in registry.OUTPUTS.items() if k != "oneline"})
    _module(example)
    report = RunReport([Result("clock-synced", "n0", Status.WARN, "not synchronized")], ["n0"], 0.1)
    assert "WARN clock-synced n0: not synchronized" in registry.OUTPUTS["oneline"].render(report, [], False)
    assert registry.OUTPUTS["oneline"].exit_code(report) == 0  # the launch verdict's code: a WARN launches
