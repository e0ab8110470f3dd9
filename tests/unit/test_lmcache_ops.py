"""lmcache-ops: with LMCache offload in the launch, `import lmcache.c_ops` must succeed in the container (§29).

The probe script runs for real in a local shell against a fake `lmcache` package (a CUDA build whose c_ops fails
on libcudart.so.13, as PyPI's 0.5.2 does on ROCm; a ROCm build whose c_ops loads; none at all); the judge is fed
its output with the rig's real `docker inspect` of our container."""
import copy
import json
import os
import subprocess
from pathlib import Path

import pytest
from k3doctor.checks import lmcache

from k3doctor import testing
from k3doctor.views.container import record_from_inspect
from k3doctor.readings import CommandReading, ContainerReading
from k3doctor.registry import REGISTRY
from k3doctor.results import Status

CHECK = REGISTRY.checks["lmcache-ops"]
INSPECT = json.loads((Path(__file__).with_name("samples") / "docker-inspect-k3ep16-rig.json").read_text())
CUDA_WHEEL = "raise ImportError('libcudart.so.13: cannot open shared object file: No such file or directory')\n"


def probe(tmp_path, c_ops: str | None) -> str:
    """The check's own probe, run on a python path holding an lmcache package whose c_ops is ``c_ops``."""
    if c_ops is not None:
        package = tmp_path / "lmcache"
        package.mkdir()
        (package / "__init__.py").write_text("")
        (package / "c_ops.py").write_text(c_ops)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path), "PYTHONNOUSERSITE": "1"}
    return subprocess.run(["sh", "-c", lmcache._PROBE], capture_output=True, text=True, env=env, timeout=60,
                          check=True).stdout


def judge(ops: str, env=None, running=True):
    a = copy.deepcopy(INSPECT)
    a["Config"]["Env"] += [f"{k}={v}" for k, v in (env or {}).items()]
    a["State"]["Running"], a["State"]["Status"] = running, "running" if running else "exited"
    return testing.judge(CHECK, {"container": ContainerReading(record_from_inspect(a, ()), None),
                                 "ops": CommandReading("docker exec k3ep16 sh -c ...", 0, ops, "")})


OFFLOAD = {"LMCACHE_LOCAL_CPU": "True", "LMCACHE_MAX_LOCAL_CPU_SIZE": "32"}


def test_pypi_cuda_wheel_on_rocm_blocks_an_offload_launch(tmp_path):
    [v] = judge(probe(tmp_path, CUDA_WHEEL), OFFLOAD)
    assert (v.status, v.remediation) == (Status.FAIL, "LMCACHE-NO-NATIVE-OPS")
    assert "LMCACHE_LOCAL_CPU, LMCACHE_MAX_LOCAL_CPU_SIZE set in the container" in v.message
    assert "ImportError: libcudart.so.13: cannot open shared object file" in v.message


def test_rocm_build_whose_ops_load_passes(tmp_path):
    [v] = judge(probe(tmp_path, "OK = 1\n"), OFFLOAD)
    assert v.status == Status.PASS and "`import lmcache.c_ops` succeeds" in v.message


def test_offload_without_lmcache_installed_blocks(tmp_path):
    [v] = judge(probe(tmp_path, None), OFFLOAD)
    assert v.status == Status.FAIL and "the lmcache package is not installed" in v.message


@pytest.mark.parametrize("ops", ["@absent\n", "@failed ImportError: libcudart.so.13\n"])
def test_no_offload_in_the_launch_needs_no_native_ops(ops):
    [v] = judge(ops)
    assert v.status == Status.PASS and "no LMCache offload in the launch" in v.message


def test_a_stopped_container_is_not_probed_and_garbage_is_an_error():
    [v] = judge("", OFFLOAD, running=False)
    assert v.status == Status.PASS and "not running: not probed" in v.message
    [v] = judge("Traceback (most recent call last):\n", OFFLOAD)
    assert v.status == Status.ERROR


def test_what_the_import_prints_itself_does_not_hide_the_probes_answer(tmp_path):
    """LMCache and its dependencies may print on import: the fault this check is for stays a FAIL (before: an
    unparseable ERROR); two answers, or none, are still an ERROR."""
    noisy = "print('[LMCache] loading native ops')\n" + CUDA_WHEEL
    [v] = judge(probe(tmp_path, noisy), OFFLOAD)
    assert (v.status, v.remediation) == (Status.FAIL, "LMCACHE-NO-NATIVE-OPS") and "libcudart.so.13" in v.message
    [v] = judge("@ok /x/c_ops.py\n@absent\n", OFFLOAD)
    assert v.status == Status.ERROR
