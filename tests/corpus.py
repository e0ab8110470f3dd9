"""Load real tool outputs from the shared corpus (``../shared/corpus`` beside the repo) for tests.

Every corpus file starts with a provenance header — the leading run of ``#`` lines — that is
not tool output and is stripped here (corpus INDEX.md).
"""
from __future__ import annotations

from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"


def load(name: str) -> str:
    """The tool output of corpus file ``name`` (header stripped); skips the test if the corpus is absent."""
    if not CORPUS.is_dir():
        pytest.skip(f"corpus not found at {CORPUS} (clone the shared repo beside this one)")
    lines = (CORPUS / name).read_text(encoding="utf-8").splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    return "".join(lines[start:])


def commands(name: str) -> list:
    """Split a file that holds several ``$ command`` outputs into the outputs, prompts dropped."""
    outputs: list = []
    for line in load(name).splitlines(keepends=True):
        if line.startswith("$ "):
            outputs.append("")
        elif outputs:
            outputs[-1] += line
    return outputs
