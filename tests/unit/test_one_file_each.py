"""Done means (issue 34): a newcomer's platform, check, rule row and output format are one file each (plus its own
test) - in a copy of this checkout's git-known tree, the shipped examples of the manual's "Adding a platform",
"Writing a check", "Writing a rule" and "Writing an output format" pages (docs/examples/) are added and nothing else is edited, and the suite's
layering, docs and registry tests pass there with them.

A rule row is one row in its family's table (``k3doctor/rules/triage.py`` here): one edited file, not a new
one, because a table's order is its match order (the first row whose pattern matches a line names it) and its
rows share the remediation texts beside them; a row in a file of its own would need a priority to say where
it goes."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
TESTS = ("tests/unit/test_layers.py", "tests/unit/test_docs.py", "tests/unit/test_output_formats.py", "tests/unit/test_check_layering.py",
         "tests/unit/test_platforms.py", "tests/unit/test_check_api.py", "tests/unit/test_triage_rules.py",
         "tests/unit/test_kernel_log_rules.py")
TABLE = "k3doctor/rules/triage.py"
TABLE_START = "RULES = (\n"  # the row goes first: its pattern is the narrowest


def git_known(root: Path) -> list:
    """Tracked files and untracked ones git does not ignore, as the working tree holds them."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, timeout=60)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    return [name for name in listed.stdout.decode().split("\0") if name and (root / name).is_file()]


def copy_tree(to: Path) -> Path:
    for name in git_known(ROOT):
        (to / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, to / name)
    # installed as k3doctor.checks (setup.cfg package_dir): a checkout run from its root sees checks/ there
    (to / "k3doctor" / "checks").symlink_to(Path("..") / "checks")
    return to


def test_a_platform_a_check_a_rule_row_and_an_output_format_are_one_file_each(tmp_path):
    tree = copy_tree(tmp_path / "tree")
    added = {"k3doctor/platforms/mi300a.yaml": EXAMPLES / "mi300a.yaml",
             "checks/clock_synced.py": EXAMPLES / "clock_synced.py",
             "tests/unit/test_mi300a.py": EXAMPLES / "test_mi300a.py",
             "tests/unit/test_clock_synced.py": EXAMPLES / "test_clock_synced.py",
             "tests/unit/test_hip_out_of_memory.py": EXAMPLES / "test_hip_out_of_memory.py",
             "k3doctor/outputs/oneline.py": EXAMPLES / "oneline.py",
             "tests/unit/test_oneline.py": EXAMPLES / "test_oneline.py"}
    for name, source in added.items():
        assert not (tree / name).exists(), f"{name}: the example must be new"
        shutil.copy(source, tree / name)
    table = (tree / TABLE).read_text()
    assert table.count(TABLE_START) == 1
    (tree / TABLE).write_text(table.replace(TABLE_START, TABLE_START + (EXAMPLES / "triage-row.txt").read_text()))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                           f"--basetemp={tmp_path / 'bt'}", *TESTS, *(n for n in added if n.startswith("tests/"))],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout.splitlines()[-1]
