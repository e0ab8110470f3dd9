"""Record the field corpus's rig seeds: a healthy 4-node gfx1250 rack and the `demo` scenario's faulty one,
each saved by `k3doctor check --save-readings` as a user would (the default: pseudonyms), with its verdicts
from `k3doctor judge`. Needs what `k3doctor demo` needs (root, sshd, dockerd: scripts/install.sh).

    python3 tests/field/record_rig.py [SCENARIO ...]      (default: healthy demo)
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from make_readings import HERE, ROOT, judged, taken_on

sys.path.insert(0, str(ROOT / "rig"))
from k3rig import Rig  # noqa: E402


def record(scenario: str) -> None:
    readings, verdicts = HERE / f"rig-{scenario}.readings.json", HERE / f"rig-{scenario}.verdicts.json"
    with tempfile.TemporaryDirectory(prefix="k3doctor-field-") as tmp, \
            Rig(Path(tmp), nodes=4, scenario=scenario) as rig:
        subprocess.run([sys.executable, "-m", "k3doctor.cli", "check", "--nodes", str(rig.inventory_path), "-q",
                        "--save-readings", str(readings)], cwd=ROOT, capture_output=True, timeout=300)
    doc = json.loads(readings.read_text())
    readings.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    verdicts.write_text(json.dumps({"source": [f"the rig (rig/k3rig), 4 gfx1250 nodes, scenario {scenario}, saved "
                                               "by `k3doctor check --save-readings`"],
                                    "built": [], "only": [], "taken_on": taken_on(doc),
                                    **judged(readings, [])}, indent=1) + "\n")


if __name__ == "__main__":
    for name in sys.argv[1:] or ["healthy", "demo"]:
        record(name)
