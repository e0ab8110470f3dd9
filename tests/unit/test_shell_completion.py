"""Shell completion (click's): the script ``_K3DOCTOR_COMPLETE=bash_source k3doctor`` prints, run by bash itself."""
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


@functools.lru_cache(maxsize=1)
def entry_point() -> str:
    found = shutil.which("k3doctor", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if not found:
        pytest.skip("the k3doctor console script is not installed (pip install -e .)")
    return found


@functools.lru_cache(maxsize=1)
def bash_source() -> str:
    proc = subprocess.run([entry_point()], env={**os.environ, "_K3DOCTOR_COMPLETE": "bash_source"},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def complete(*words: str) -> list:
    """What bash offers for the last word of ``k3doctor WORDS`` (COMPREPLY of the sourced function)."""
    line = " ".join(f"'{w}'" for w in ("k3doctor", *words))
    script = (f'eval "$K3_COMPLETION"; COMP_WORDS=({line}); COMP_CWORD={len(words)}; '
              f'_k3doctor_completion "$K3_BIN"; printf "%s\\n" "${{COMPREPLY[@]}}"')
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "K3_COMPLETION": bash_source(), "K3_BIN": entry_point()})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_bash_completion_script_registers_for_k3doctor():
    script = bash_source()
    assert "_k3doctor_completion()" in script and "complete -o nosort -F _k3doctor_completion k3doctor" in script


def test_bash_completes_commands_options_and_formats():
    assert {"check", "judge", "explain", "baseline", "triage"} <= set(complete(""))
    assert {"--tier", "--timeout"} <= set(complete("check", "--ti"))
    assert set(complete("check", "--format", "")) >= {"table", "json", "junit", "html", "prom", "nagios", "npd"}
    assert complete("check", "--tier", "d") == ["deep"]
