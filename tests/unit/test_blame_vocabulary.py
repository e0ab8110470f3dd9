"""One blame vocabulary (issue 20 §6): each of the probes' words is defined once in the package and the
built-in checks, so a name means one thing wherever it is read (kit.py's docstring says what each means)."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORDS = {"Finding": "k3doctor/probes/kit.py", "Blame": "k3doctor/probes/kit.py", "carriers": "k3doctor/probes/kit.py",
         "blame": "k3doctor/probes/kit.py", "Outcome": "k3doctor/probes/allreduce_runs.py",
         "PairOutcome": "k3doctor/probes/ualoe_verdicts.py"}


def definitions() -> dict:
    """name -> the files that define a class or function of that name at their top level."""
    found = {}
    for path in sorted([*ROOT.joinpath("k3doctor").rglob("*.py"), *ROOT.joinpath("checks").glob("*.py")]):
        if path.parts[-3:-1] == ("k3doctor", "checks"):
            continue  # the worktree's link to checks/, read once as checks/
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                found.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("word", sorted(WORDS))
def test_each_blame_word_is_defined_once(word):
    assert definitions().get(word) == [WORDS[word]]
