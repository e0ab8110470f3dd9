"""Running the real k3doctor CLI in a subprocess, for the end-to-end tests."""
import json
import subprocess
import sys


def k3(*args, timeout=180):
    """(exit code, stdout, stderr) of ``k3doctor ARGS``."""
    proc = subprocess.run([sys.executable, "-m", "k3doctor.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def k3json(*args, timeout=180):
    """(exit code, parsed report) of ``k3doctor ARGS --format json``."""
    rc, out, err = k3(*args, "--format", "json", timeout=timeout)
    assert out, f"no JSON on stdout (rc {rc}): {err}"
    return rc, json.loads(out)
