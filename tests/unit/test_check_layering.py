"""Checks never import each other: what two checks share lives in k3doctor/views/ or k3doctor/parsers/."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

CHECKS = Path(__file__).resolve().parents[2] / "checks"
MODULES = sorted(p for p in CHECKS.glob("*.py") if p.name != "__init__.py")


def check_imports(path: Path) -> list:
    """(line, module) of every import of a check module, in any form and anywhere in the file."""
    names = {p.stem for p in MODULES}
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("k3doctor.checks.")]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            if base.startswith("k3doctor.checks.") or (node.level and node.module):
                found.append((node.lineno, base))
            elif base in ("k3doctor.checks", ".") or (node.level and not node.module):
                found += [(node.lineno, f"{base}.{a.name}") for a in node.names if a.name in names]
    return found


def test_there_are_check_modules_to_inspect():
    assert len(MODULES) >= 10 and CHECKS.joinpath("ualink.py") in MODULES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_check_imports_another_check(path):
    assert check_imports(path) == [], f"{path.name} imports another check: move what they share to k3doctor/views/"


@pytest.mark.parametrize("source", [
    "from k3doctor.checks.ualink import majority",
    "import k3doctor.checks.rack",
    "from k3doctor.checks import rack",
    "from .rack import KFD_PROC_GLOB",
    "from . import rack",
    "def late():\n    from k3doctor.checks.ualink import Card\n",
])
def test_the_rule_sees_every_form_of_import(tmp_path, source):
    path = tmp_path / "probe.py"
    path.write_text(source + "\n")
    assert check_imports(path)


def test_report_order_is_checks_order_not_imports():
    """A fresh process (as the CLI starts) registers the built-in checks module by module in ORDER, then the
    modules ORDER does not name, in name order: a new check module needs no edit there (docs/writing-a-check.md)."""
    code = ("from k3doctor.registry import REGISTRY, load_checks; load_checks(); "
            "print(' '.join(dict.fromkeys((c.judge or c.probe).__module__.rsplit('.', 1)[-1] "
            "for c in REGISTRY.checks.values())))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    from k3doctor.checks import ORDER

    listed = [m for m in ORDER if CHECKS.joinpath(f"{m}.py") in MODULES]
    unlisted = sorted({path.stem for path in MODULES} - set(ORDER))
    assert out.stdout.split() == listed + [m for m in unlisted if m in out.stdout.split()]
