"""The simulated rack is a package of its own (rig/): the product neither ships nor needs it, except
`k3doctor demo` (and `demo --watch`), which says in one line how to get it."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_no_product_module_imports_the_rig_but_demo():
    importers = set()
    for path in [*(ROOT / "k3doctor").rglob("*.py"), *(ROOT / "checks").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "k3rig" or n.startswith("k3rig.") for n in names):
                importers.add(path.relative_to(ROOT).as_posix())
    assert importers == {"k3doctor/cli/oncall.py", "k3doctor/cli/demo_watch.py"}  # the demo and its --watch
    assert not (ROOT / "k3doctor" / "rig").exists()


@pytest.mark.parametrize("argv", [["demo"], ["demo", "--watch"]])
def test_demo_without_the_rig_package_is_one_line_exit_3(argv):
    code = (f"import sys; sys.modules['k3rig'] = None; sys.argv = ['k3doctor', *{argv!r}]; "
            "from k3doctor.cli import main; main()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert "pip install ./rig" in proc.stderr
