"""Output formats (``--format``): the registry, the built-in formats and the monitoring ones."""
from k3doctor.outputs import builtin, html, nagios, npd, prom  # noqa: F401  (importing registers each format)
from k3doctor.outputs.files import OutputPath, write_output
from k3doctor.outputs.registry import OUTPUTS, Output, launch_exit_code, output

__all__ = ["OUTPUTS", "Output", "OutputPath", "launch_exit_code", "output", "write_output"]
