"""Running the real k3doctor CLI in a subprocess, for the end-to-end tests."""
import json
import os
import subprocess
import sys


def k3(*args, timeout=180, env=None):
    """(exit code, stdout, stderr) of ``k3doctor ARGS``; ``env``: variables added to this process's environment."""
    proc = subprocess.run([sys.executable, "-m", "k3doctor.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    return proc.returncode, proc.stdout, proc.stderr


def k3json(*args, timeout=180, env=None):
    """(exit code, parsed report) of ``k3doctor ARGS --format json``."""
    rc, out, err = k3(*args, "--format", "json", timeout=timeout, env=env)
    assert out, f"no JSON on stdout (rc {rc}): {err}"
    return rc, json.loads(out)
