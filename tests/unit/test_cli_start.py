"""What `k3doctor check` imports before its first connection: only what it needs (issue 12)."""
import subprocess
import sys


def imported_after(code: str) -> set:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys; print(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_the_cli_leaves_invoke_and_tabulate_until_they_are_used():
    loaded = imported_after("import k3doctor.cli")
    assert "paramiko" in loaded and "invoke.context" not in loaded and "asyncio" not in loaded
    assert "tabulate" not in loaded


def test_paramiko_still_gets_the_real_invoke_when_it_asks():
    loaded = imported_after("import k3doctor.transport, paramiko.config as c\nassert callable(c.invoke.run)")
    assert "invoke.context" in loaded
