"""The bench's fair floor (bench/fair_floor.py) takes every reading of a saved-readings file: its script is run
here for real, with a stand-in `docker` CLI that logs its calls and runs a container's shell locally."""
import importlib.util
import json
import os
import shlex
import subprocess
from pathlib import Path
from types import SimpleNamespace

from k3doctor.gather import snapshot
from k3doctor.readings import (
    CONTAINER_PID,
    DOCKER_ROOT_DIR,
    Command,
    ContainerInspect,
    Docker,
    EngineFactCommand,
    Exists,
    File,
    Glob,
    Unavailable,
    in_container,
)

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("fair_floor", REPO / "bench" / "fair_floor.py")
fair_floor = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fair_floor)

FAKE_DOCKER = r"""#!/bin/sh
printf '%s\n' "$*" >> "$DOCKER_LOG"
case $1 in
  info) echo /var/lib/docker-root ;;
  inspect) echo '4242 {"Id": "c0ffee"}' ;;
  exec) shift 2; exec "$@" ;;
  ps) echo '{"Names": "k3ep16"}' ;;
  events) echo '{"Action": "start"}' ;;
  cp) echo 'copied-script-body' ;;
esac
"""


def saved_readings(tmp: Path, specs: list) -> Path:
    """A --save-readings --keep-identifiers file (as the bench saves one) whose one node took ``specs``."""
    report = SimpleNamespace(readings={"n1": {s: Unavailable("not needed here") for s in specs}}, unreachable={})
    path = tmp / "saved.json"
    path.write_text(snapshot.dump(report, "nodes:\n- {name: n1, host: n1}\n", keep_identifiers=True))  # as the bench
    return path


def test_the_fair_script_takes_every_reading_of_a_saved_file(tmp_path):
    tree = tmp_path / "tree"
    (tree / "cards" / "card0").mkdir(parents=True)
    (tree / "cards" / "card1").mkdir()
    (tree / "cards" / "card0" / "vendor").write_text("vendor-of-card0\n")
    (tree / "cards" / "card1" / "vendor").write_text("vendor-of-card1\n")
    (tree / "meminfo").write_text("MemTotal: 42 kB\n")
    (tree / "with space").write_text("spaced-file-body\n")
    (tree / "launch.sh").write_text("launch-script-body\n")  # the fake `docker exec` runs here
    specs = [File(str(tree / "meminfo")), File(str(tree / "with space")), File(str(tree / "missing")),
             Glob(str(tree / "cards" / "card*" / "vendor")), Exists(str(tree / "meminfo")), Exists(str(tree / "gone")),
             Command(("echo", "host-command-one")), Command(("sh", "-c", "echo 'host  command two'")),
             Docker(), ContainerInspect("k3ep16", launch_script=str(tree / "launch.sh")),
             ContainerInspect("idle", launch_script="/app/idle.sh"),  # no exec there: the archive, `docker cp`
             ContainerInspect("k3ep16", keep=("TMPDIR",)),
             EngineFactCommand(("sh", "-c", 'echo "root-fact=$1"', "k3"), fact=DOCKER_ROOT_DIR),
             EngineFactCommand(("sh", "-c", 'echo "pid-fact=$1"', "k3"), fact=CONTAINER_PID, container="k3ep16"),
             in_container("k3ep16", "echo", "in-container-one"),
             in_container("k3ep16", "sh", "-c", "echo 'in container two'")]
    by_node = fair_floor.saved_specs(str(saved_readings(tmp_path, specs)))
    assert list(by_node) == ["n1"] and set(by_node["n1"]) == set(specs)
    script = fair_floor.fair_script(by_node["n1"])

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    log = tmp_path / "docker.log"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", DOCKER_LOG=str(log))
    out = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True, env=env, timeout=60).stdout

    for body in ("MemTotal: 42 kB", "spaced-file-body", "vendor-of-card0", "vendor-of-card1",
                 f"present {tree / 'meminfo'}", "host-command-one", "host  command two",
                 "root-fact=/var/lib/docker-root", "pid-fact=4242", "launch-script-body", "copied-script-body",
                 '{"Names": "k3ep16"}', '{"Action": "start"}', "in-container-one", "in container two"):
        assert body in out, (body, script, out)
    assert f"present {tree / 'gone'}" not in out
    calls = [shlex.split(line)[0] for line in log.read_text().splitlines()]
    # one of each: the engine asked once a reading kind, each container inspected and exec'd once; a launch
    # script read in its container's exec (as k3doctor reads it), through the archive where none is made
    assert sorted(calls) == ["cp", "events", "exec", "info", "inspect", "inspect", "ps"], log.read_text()
    assert "idle:/app/idle.sh" in log.read_text()
    assert script.count("tail ") == 1  # every file and glob in one read


def test_the_floor_of_a_real_saved_file_names_every_reading(tmp_path):
    """A saved file as `check --save-readings` writes it: every spec of it is in the node's script."""
    specs = [File("/proc/meminfo"), Glob("/sys/class/drm/card*/device/vendor"), Exists("/dev/kfd"),
             Command(("dmesg",)), in_container("k3ep16", "stat", "-c", "%s %n", "--", "/app/x")]
    doc = json.loads(saved_readings(tmp_path, specs).read_text())
    doc["nodes"]["n2"] = doc["nodes"]["n1"][:2]
    path = tmp_path / "two.json"
    path.write_text(json.dumps(doc))
    by_node = fair_floor.saved_specs(str(path))
    assert [len(by_node[n]) for n in ("n1", "n2")] == [5, 2]
    script = fair_floor.fair_script(by_node["n1"])
    for needed in ("/proc/meminfo", "/sys/class/drm/card*/device/vendor", "/dev/kfd", "dmesg 2>&1",
                   "docker exec k3ep16 sh -c"):
        assert needed in script, (needed, script)


def test_a_fact_without_a_plain_shell_line_is_left_out_of_both_floors():
    """A created container's HF cache mount (its host path out of Env and Mounts) has no plain shell line: the
    floors leave that read out (cheaper than k3doctor, never dearer) rather than run it with a wrong argument."""
    from k3doctor.readings import CONTAINER_HF_CACHE, sh_with_fact

    cache = sh_with_fact('ls -d "$1"', CONTAINER_HF_CACHE, "vllm0")
    pid = sh_with_fact('echo "$1"', CONTAINER_PID, "vllm0")
    for script in (fair_floor.fair_script([cache, pid]), fair_floor.plain_per_reading([cache, pid])):
        assert "ls -d" not in script and 'echo "$1"' in script
