"""Output formats (``--format``): the registry and every module of this package, found by name as checks are.

Importing a format module registers it, so a new format is one module here and nothing else: the built-in
formats come first, then the others in name order (the order ``--format`` offers them).
"""
import importlib
import pkgutil

from k3doctor.outputs.files import OutputPath, write_output
from k3doctor.outputs.registry import OUTPUTS, Output, launch_exit_code, output

for _module in sorted((m.name for m in pkgutil.iter_modules(__path__)), key=lambda name: (name != "builtin", name)):
    importlib.import_module(f"{__name__}.{_module}")

__all__ = ["OUTPUTS", "Output", "OutputPath", "launch_exit_code", "output", "write_output"]
