"""The manual's output-format example, added as k3doctor/outputs/oneline.py: registered with no other edit,
rendering a run's findings and offered by `--format`."""
import subprocess
import sys

from k3doctor.judging.runner import RunReport
from k3doctor.outputs import OUTPUTS
from k3doctor.results import Result, Status


def test_oneline_renders_each_finding_on_one_line():
    report = RunReport([Result("clock-synced", "n0", Status.WARN, "not synchronized"),
                        Result("clock-synced", "n1", Status.PASS, "synchronized")], ["n0", "n1"], 0.1)
    assert OUTPUTS["oneline"].render(report, [], False) == "WARN clock-synced n0: not synchronized\n"


def test_check_offers_format_oneline():
    shown = subprocess.run([sys.executable, "-m", "k3doctor.cli", "check", "--help"], capture_output=True,
                           text=True, timeout=60)
    assert "oneline" in shown.stdout
