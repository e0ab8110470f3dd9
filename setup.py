"""The packages, found rather than listed (issue 32: a hand-kept list missed ``k3doctor.rules``, so the
wheel ran nowhere): every ``k3doctor.*`` package under ``k3doctor/``, and the built-in checks, which live
in ``checks/`` and install as ``k3doctor.checks`` (setup.cfg's ``package_dir``). setup.cfg's ``find:`` finds
packages only where they lie, so it cannot say the second; nothing else (``checks`` as a top-level
package, rig/, tests/, bench/) is shipped. Everything else is declared in setup.cfg."""
from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["k3doctor", "k3doctor.*"]),
                *(f"k3doctor.{name}" for name in find_packages(include=["checks", "checks.*"]))])
