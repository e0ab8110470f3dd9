"""aiter-jit-locks: stale JIT build locks (holder dead or on another host, no compiler) vs a build in progress (§29).

The listing script runs for real in a local shell on a temporary JIT directory (its output is what the
judge parses); the judge is then fed listings for both sides of the aiter #4153 edge."""
import os
import shutil
import subprocess
import sys

import pytest
from k3doctor.checks import aiter_locks

from k3doctor import testing
from k3doctor.readings import CommandReading
from k3doctor.registry import REGISTRY
from k3doctor.results import Status

CHECK = REGISTRY.checks["aiter-jit-locks"]
OLD_AITER, NEW_AITER = "aiter=0.1.4\n", "aiter=0.1.9\n"
EDGE = {"version_edges": {"aiter-4153": "0.1.7"}}


def listing(tmp_path, holder_pid: int, host: str | None = None, extra_env=None) -> str:
    """Run the check's own listing script on a JIT dir holding one lock written by ``holder_pid``."""
    build = tmp_path / "jit" / "build"
    build.mkdir(parents=True)
    (build / "lock_module_moe").write_text(f"{host}:{holder_pid}\n" if host else f"{holder_pid}\n")
    env = {"PATH": os.environ["PATH"], "AITER_JIT_DIR": str(tmp_path / "jit"), "HOME": str(tmp_path),
           **(extra_env or {})}
    return subprocess.run(["sh", "-c", aiter_locks._LIST], capture_output=True, text=True, env=env, timeout=60,
                          check=True).stdout


def judge(text: str, versions: str = OLD_AITER, **params):
    return testing.judge(CHECK, {"locks": CommandReading("docker exec k3ep16 sh -c ...", 0, text, ""),
                                 "versions": CommandReading("docker exec k3ep16 sh -c ...", 0, versions, "")},
                         **params)


def no_compilers(text: str) -> str:
    """The listing as on a node where nothing compiles (this test host may run a compiler right now)."""
    return "".join(line + "\n" for line in text.splitlines() if not line.startswith("@compiler "))


@pytest.fixture
def dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_listing_script_reads_a_real_lock_and_its_dead_holder(tmp_path, dead_pid):
    host, locks, _, _ = aiter_locks.parse_listing(listing(tmp_path, dead_pid))
    [lock] = locks
    assert host and lock.path.endswith("/jit/build/lock_module_moe") and lock.holder == dead_pid
    assert not lock.holder_alive and lock.holder_host is None and 0 <= lock.age_s < 60


@pytest.mark.parametrize("versions, params, status", [
    (OLD_AITER, EDGE, Status.FAIL),  # before #4153: nothing breaks it
    (NEW_AITER, EDGE, Status.PASS),  # since #4153: aiter breaks it itself
    (NEW_AITER, {}, Status.FAIL),  # the edge's release not known: strict
    ("", EDGE, Status.FAIL),  # aiter's version not read: strict
])
def test_a_dead_holders_lock_with_no_compiler_blocks_unless_aiter_breaks_it(tmp_path, dead_pid, versions, params,
                                                                           status):
    [v] = judge(no_compilers(listing(tmp_path, dead_pid)), versions, **params)
    assert v.status == status, v.message
    if status == Status.FAIL:
        assert "stale aiter JIT lock" in v.message and f"holder pid {dead_pid} is gone" in v.message
        assert v.remediation == "AITER-STALE-LOCK"


def test_another_hosts_lock_blocks_even_where_aiter_breaks_stale_locks(tmp_path, dead_pid):
    [v] = judge(no_compilers(listing(tmp_path, dead_pid, host="ct99")), NEW_AITER, **EDGE)
    assert v.status == Status.FAIL and "another host's lock" in v.message and "on ct99" in v.message


def test_a_live_holder_or_a_running_compiler_is_a_build_in_progress(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        [v] = judge(no_compilers(listing(tmp_path, holder.pid)), OLD_AITER, **EDGE)
    finally:
        holder.kill()
        holder.wait()
    assert v.status == Status.PASS and "build in progress" in v.message
    text = "@host ct13\n@lock 5\t424242\t0\t-\t/root/.aiter/jit/build/lock_gemm\n@compiler 4711 hipcc\n"
    [v] = judge(text, OLD_AITER, **EDGE)
    assert v.status == Status.PASS and "1 compiler process(es) running" in v.message


def test_no_lock_passes_and_a_garbled_listing_is_an_error():
    [v] = judge("@host ct13\n")
    assert v.status == Status.PASS and "no aiter JIT or torch_extensions lock" in v.message
    [v] = judge("@host ct13\nsh: syntax error\n")
    assert v.status == Status.ERROR and "unexpected line" in v.message


def test_the_listing_names_a_compiler_running_beside_it(tmp_path):
    """The listing's own shell, run here: a process whose command name is a compiler's (a copy of `sleep`
    named `hipcc`) is listed once as a build in progress; the process scan uses the shell's `read`, no program
    per process (a container with hundreds of processes cost hundreds of `cat`s)."""
    compiler = tmp_path / "hipcc"
    shutil.copy("/bin/sleep", compiler)
    with subprocess.Popen([str(compiler), "30"]) as proc:
        try:
            out = subprocess.run(["sh", "-c", aiter_locks._LIST], capture_output=True, text=True, timeout=30,
                                 env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
        finally:
            proc.kill()
    _, locks, compilers, _ = aiter_locks.parse_listing(out.stdout)
    assert out.returncode == 0 and locks == [] and (str(proc.pid), "hipcc") in compilers, out


@pytest.mark.parametrize("env, root", [({}, ".cache/torch_extensions"), ({"TORCH_EXTENSIONS_DIR": "ext"}, "ext"),
                                       ({"XDG_CACHE_HOME": "xdg"}, "xdg/torch_extensions")])
def test_a_torch_extensions_lock_with_no_compiler_blocks_whatever_aiters_version(tmp_path, env, root):
    """§31.3 (InferenceX #1964): torch's FileBaton (`<root>/py312_rocm7/<name>/lock`, empty: no holder) is never
    broken by torch; the listing script, run here, finds it under $TORCH_EXTENSIONS_DIR, else the XDG cache."""
    env = {k: str(tmp_path / v) for k, v in env.items()}
    lock = tmp_path / root / "py312_rocm7" / "deep_ep_cpp" / "lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    out = subprocess.run(["sh", "-c", aiter_locks._LIST], capture_output=True, text=True, timeout=30, check=True,
                         env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), **env}).stdout
    [v] = judge(no_compilers(out), NEW_AITER, **EDGE)
    assert (v.status, v.remediation) == (Status.FAIL, "TORCH-STALE-LOCK"), v.message
    assert f"stale torch_extensions build lock {lock}" in v.message and "torch never breaks it" in v.message
    [v] = judge(out.replace("@host", "@compiler 4711 ninja\n@host", 1), NEW_AITER, **EDGE)
    assert v.status == Status.PASS and "build in progress" in v.message
