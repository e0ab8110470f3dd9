"""``--format npd``: a Kubernetes Node Problem Detector custom plugin.

Contract of NPD's custom plugin monitor: exit 0 OK, 1 NonOK (a problem), anything else
Unknown; stdout is the condition's message (NPD cuts it at ``max_output_length``). DO NOT
LAUNCH is the problem; INCONCLUSIVE is Unknown (2); warnings alone are OK. The example
monitor config is docs/npd-k3doctor.json.
"""
from __future__ import annotations

from k3doctor.outputs.registry import launch_exit_code, output
from k3doctor.outputs.summary import headline

MESSAGE_LIMIT = 200  # the example config's max_output_length


@output("npd", "Kubernetes Node Problem Detector custom plugin: one line, exit 0 OK / 1 problem / 2 unknown",
        exit_code=launch_exit_code)  # k3doctor's 0/1/2 already is NPD's contract
def render(report, checks, verbose):
    return headline(report, limit=MESSAGE_LIMIT)
