"""What users install is what runs (issue 32 item 1): the wheel and the sdist are built from this checkout,
each is installed into a virtual environment of its own outside it, and that environment's ``k3doctor`` runs
from a directory outside the checkout, importing k3doctor from the environment's site-packages.

Every other test runs on the checkout (setup.cfg's ``pythonpath = .``, an editable install), which hid a
wheel that shipped 16 of its 17 packages. The environments are made without the system's site-packages:
there, the editable install's finder (a ``.pth`` hook) would hand out any module the wheel lacks from the
checkout. k3doctor's dependencies come from the interpreter's own site-packages through a path line in a
``.pth`` file, which puts the directory on ``sys.path`` without running its hooks (no registry needed).
"""
from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERDICTS = {0: "READY TO LAUNCH", 1: "DO NOT LAUNCH", 2: "INCONCLUSIVE"}
BUILD_S = 300  # one build or install; each takes seconds


def run(argv: list, cwd: Path, timeout: float = BUILD_S, check: bool = True) -> subprocess.CompletedProcess:
    """``argv`` from ``cwd`` with no PYTHON* variable: nothing points the interpreter back at the checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(map(str, argv))} exited {done.returncode}:\n"
                    f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return done


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """The checkout's files as git knows them (tracked, and new files not ignored), copied: a build writes
    build/ and *.egg-info beside its sources, and nothing the checkout ignores may reach a release."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: what a release holds is what git tracks")
    listed = run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"], ROOT)
    copy = tmp_path_factory.mktemp("source")
    for name in filter(None, listed.stdout.split("\0")):
        if (ROOT / name).is_file():  # a file deleted but not yet committed is listed, not there
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    return copy


@pytest.fixture(scope="module")
def wheels(source, tmp_path_factory) -> dict:
    """``{"wheel": the wheel built from the checkout, "sdist": the wheel pip builds from the sdist}`` (what
    ``pip install k3doctor-*.tar.gz`` installs), and the rig's wheel (``demo``): setuptools' own PEP 517 hooks,
    this interpreter's setuptools (no build isolation: nothing is downloaded)."""
    out = tmp_path_factory.mktemp("dist")
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    run([*pip_wheel, "-w", str(out / "wheel"), str(source)], source)
    run([*pip_wheel, "-w", str(out / "rig"), str(source / "rig")], source)
    run([sys.executable, "-c", "import sys; from setuptools import build_meta; build_meta.build_sdist(sys.argv[1])",
         str(out / "sdist")], source)
    [sdist] = (out / "sdist").glob("k3doctor-*.tar.gz")
    run([*pip_wheel, "-w", str(out / "from-sdist"), str(sdist)], out)
    [wheel] = (out / "wheel").glob("k3doctor-*.whl")
    [from_sdist] = (out / "from-sdist").glob("k3doctor-*.whl")
    [rig] = (out / "rig").glob("k3doctor_rig-*.whl")
    return {"wheel": wheel, "sdist": from_sdist, "rig": rig}


def shipped_files(source: Path) -> set:
    """The package's files a release must hold: k3doctor/ as it lies, checks/ as k3doctor/checks/."""
    files = {p.relative_to(source).as_posix() for p in (source / "k3doctor").rglob("*") if p.is_file()}
    files |= {"k3doctor/" + p.relative_to(source).as_posix() for p in (source / "checks").rglob("*") if p.is_file()}
    return files


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_the_release_holds_every_package_file_and_nothing_else(wheels, source, kind):
    """Modules and data (recipes, platforms, the node reader k3doctor sends) are all there; rig/, tests/,
    bench/ and a top-level ``checks`` package are not."""
    with zipfile.ZipFile(wheels[kind]) as whl:
        names = {n for n in whl.namelist() if ".dist-info/" not in n}
    assert names == shipped_files(source)


@pytest.fixture(scope="module", params=["wheel", "sdist"])
def installed(request, wheels, tmp_path_factory) -> tuple:
    """(the environment's bin/, a directory outside the checkout) for k3doctor installed from ``param``."""
    kind = request.param
    venv = tmp_path_factory.mktemp(f"venv-{kind}")
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], venv)
    python = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
         str(wheels[kind]), str(wheels["rig"])], venv)
    purelib = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       venv).stdout.strip())
    deps = dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"], site.getusersitepackages()])
    (purelib / "k3doctor-test-deps.pth").write_text("".join(f"{d}\n" for d in deps))
    return venv / "bin", tmp_path_factory.mktemp(f"cwd-{kind}")


def test_k3doctor_is_imported_from_the_environment(installed):
    """Every k3doctor module the commands load, the checks included, comes from the environment's
    site-packages, not from the checkout."""
    bin_dir, cwd = installed
    code = ("import sys, sysconfig, k3doctor, k3doctor.cli\n"
            "from k3doctor.registry import load_checks, REGISTRY\n"
            "assert not load_checks(), load_checks()\n"
            "lib = sysconfig.get_paths()['purelib']\n"
            "mods = {n: m.__file__ for n, m in sys.modules.items() if n.split('.')[0] == 'k3doctor'}\n"
            "print(len(REGISTRY.checks), k3doctor.__file__)\n"
            "print(sorted(n for n, f in mods.items() if not (f or '').startswith(lib + '/k3doctor/')))\n")
    out = run([str(bin_dir / "python"), "-c", code], cwd).stdout.splitlines()
    count, where = out[0].split()
    assert int(count) > 20 and where.startswith(str(bin_dir.parent)) and "site-packages" in where
    assert out[1] == "[]"
    assert str(ROOT) not in where


def test_the_installed_commands_run(installed):
    bin_dir, cwd = installed
    k3doctor = str(bin_dir / "k3doctor")
    listed = run([k3doctor, "list"], cwd).stdout
    assert "kernel-health" in listed and "ualink-state" in listed
    assert "UALink" in run([k3doctor, "explain", "UALINK-NOT-ACTIVE"], cwd).stdout
    assert "Usage:" in run([k3doctor, "recipe", "diff", "--help"], cwd).stdout
    assert "healthy" in run([k3doctor, "demo", "--list-scenarios"], cwd).stdout.split()


def test_the_installed_k3doctor_checks_this_machine_to_a_verdict(installed):
    """``check`` with no --nodes: this machine, read through the installed node reader. A box without GPUs
    is not ready, but every check runs to a verdict of its own."""
    bin_dir, cwd = installed
    done = run([str(bin_dir / "k3doctor"), "check", "-q"], cwd, timeout=180, check=False)
    assert done.returncode in VERDICTS, done.stderr[-2000:]
    assert VERDICTS[done.returncode] in done.stdout
    assert "internal error" not in done.stdout + done.stderr and "Traceback" not in done.stderr


@pytest.mark.e2e
def test_the_installed_k3doctor_finds_the_healthy_rack_ready(installed, rig):
    """Over SSH, with the node reader and scripts the release ships (read from its own files)."""
    rig.apply("healthy")
    bin_dir, cwd = installed
    done = run([str(bin_dir / "k3doctor"), "check", "-q", "--nodes", str(rig.inventory_path)], cwd, timeout=180,
               check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert done.stdout.rstrip().splitlines()[-1].startswith("READY TO LAUNCH")
