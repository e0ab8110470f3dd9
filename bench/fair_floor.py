"""The fair floor: per node, the reads k3doctor took there as ONE plain script a person would write by hand.

Generated from a ``k3doctor check --save-readings`` file (the reads of each node as k3doctor took them):

- every file and glob in ONE ``tail -n +1 --`` (the shell expands the globs; ``tail`` prints each file with
  its name), the paths asked for existence with the shell's own ``[ -e ]``;
- each host command as written, once;
- the engine with the docker CLI: one ``docker ps -a``, one ``docker events`` over the same window, one
  ``docker info`` for the root dir where a command needs it, one ``docker inspect`` per container (its PID
  taken from the same answer), a launch script read with that container's other readings (``docker cp``
  where it has none, as k3doctor reads it);
- every reading inside one container in ONE ``docker exec CONTAINER sh -c``.

No timeouts, caps or framing: it is the least a script can do and still take the same readings (a floor).
``plain_per_reading`` is the older floor: one plain command per reading (a ``cat`` per file, a ``docker
exec`` per container reading); kept as a labelled extra column.

    python3 bench/fair_floor.py SAVED.json [NODE]    # print a node's script (the first node's by default)
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from k3doctor.gather.node_script import launch_scripts_in_exec  # noqa: E402
from k3doctor.gather.snapshot import load  # noqa: E402
from k3doctor.readings import (  # noqa: E402
    CONTAINER_PID,
    DOCKER_ROOT_DIR,
    Command,
    ContainerInspect,
    Docker,
    EngineFactCommand,
    Exists,
    File,
    Glob,
    InContainer,
)
from k3doctor.shell import join, quote  # noqa: E402

_WILDCARD = re.compile(r"([*?])")


def glob_words(pattern: str) -> str:
    """A glob pattern as one shell word: the literal parts quoted, ``*`` and ``?`` left to the shell."""
    return "".join(part if part in ("*", "?") else quote(part) for part in _WILDCARD.split(pattern) if part)


def _pid_var(container: str) -> str:
    return "pid_" + re.sub(r"\W", "_", container)


def fair_script(specs: list) -> str:
    """One node's reads (``specs``, as its saved readings list them) as one plain shell script."""
    specs = list(dict.fromkeys(specs))
    lines = []
    files = [quote(s.path) if isinstance(s, File) else glob_words(s.pattern)
             for s in specs if isinstance(s, (File, Glob))]
    if files:
        lines.append(f"tail -n +1 -- {' '.join(files)} 2>&1")
    exists = [quote(s.path) for s in specs if isinstance(s, Exists)]
    if exists:
        lines.append(f'for p in {" ".join(exists)}; do [ -e "$p" ] && echo "present $p"; done')
    for spec in specs:
        if type(spec) is Command:
            lines.append(f"{join(spec.argv)} 2>&1")
    for spec in specs:
        if isinstance(spec, Docker):
            lines.append("docker ps -a --no-trunc --format '{{json .}}' 2>&1")
            lines.append(f"docker events --since {int(spec.events_since_s)}s --until 0s --format '{{{{json .}}}}' 2>&1")
    facts = [s for s in specs if isinstance(s, EngineFactCommand)]
    if any(s.fact == DOCKER_ROOT_DIR for s in facts):
        lines.append("root=$(docker info --format '{{.DockerRootDir}}' 2>&1)")
    inspected = list(dict.fromkeys([s.container for s in specs if isinstance(s, ContainerInspect)]
                                   + [s.container for s in facts if s.fact == CONTAINER_PID]))
    for container in inspected:  # one inspect a container: its JSON, and its PID out of the same answer
        lines.append(f"ins=$(docker inspect --format '{{{{.State.Pid}}}} {{{{json .}}}}' -- {quote(container)} 2>&1); "
                     f'echo "$ins"; {_pid_var(container)}=${{ins%% *}}')
    in_exec = launch_scripts_in_exec(specs)  # read with the container's other readings, as k3doctor reads them
    for container, script in dict.fromkeys((s.container, s.launch_script) for s in specs
                                           if isinstance(s, ContainerInspect) and s.launch_script and s not in in_exec):
        lines.append(f"docker cp {quote(container + ':' + script)} - 2>&1")
    # As k3doctor runs them: only where the engine gave the fact (a root path, a PID). A created container's HF
    # cache mount (its host path out of Env and Mounts) has no plain shell line: that read is left out of the
    # floor, which makes the floor cheaper than k3doctor, never dearer.
    for spec in (s for s in facts if s.fact in (DOCKER_ROOT_DIR, CONTAINER_PID)):
        fact, given = (('"$root"', "/*") if spec.fact == DOCKER_ROOT_DIR
                       else (f'"${_pid_var(spec.container)}"', "[0-9]*"))
        lines.append(f"case {fact} in {given}) {join(spec.argv)} {fact} 2>&1 ;; esac")
    inside: dict = {}
    for spec in [*specs, *dict.fromkeys(in_exec.values())]:
        if isinstance(spec, InContainer):
            inside.setdefault(spec.container, []).append(spec)
    for container, members in inside.items():
        body = "; ".join(f"echo '== {i}'; {join(s.inner)} 2>&1" for i, s in enumerate(members))
        lines.append(f"docker exec {quote(container)} sh -c {quote(body)} 2>&1")
    return "\n".join(lines) + "\n"


# How a person gets an engine fact in a shell, one reading at a time (the per-reading floor).
_PER_READING_FACTS = {DOCKER_ROOT_DIR: lambda spec: "docker info --format '{{.DockerRootDir}}'",
                      CONTAINER_PID: lambda spec: f"docker inspect -f '{{{{.State.Pid}}}}' {quote(spec.container)}"}


def plain_per_reading(specs: list) -> str:
    """The older floor: one plain command per reading (``cat`` per file, a ``docker exec`` per container reading)."""
    lines = []
    for i, spec in enumerate(dict.fromkeys(specs)):
        lines.append(f"echo '== {i}'")
        if isinstance(spec, File):
            lines.append(f"cat -- {quote(spec.path)}")
        elif isinstance(spec, Exists):
            lines.append(f"test -e {quote(spec.path)} && echo present")
        elif isinstance(spec, Glob):
            lines.append(f"p={quote(spec.pattern)}; IFS=; for f in $p; do [ -e \"$f\" ] && cat -- \"$f\"; done; "
                         "IFS=' '")
        elif isinstance(spec, EngineFactCommand):
            if spec.fact in _PER_READING_FACTS:  # the HF cache mount: left out, as in the fair floor
                lines.append(f"{join(spec.argv)} \"$({_PER_READING_FACTS[spec.fact](spec)})\" 2>&1")
        elif isinstance(spec, Command):  # InContainer too: its argv is the whole `docker exec ...` line
            lines.append(f"{join(spec.argv)} 2>&1")
        elif isinstance(spec, Docker):
            lines.append("docker ps -a --no-trunc --format '{{json .}}' 2>&1; "
                         f"docker events --since {int(spec.events_since_s)}s --until 0s --format '{{{{json .}}}}' 2>&1")
        elif isinstance(spec, ContainerInspect):
            lines.append(f"docker inspect -- {quote(spec.container)} 2>&1")
            if spec.launch_script:
                lines.append(f"docker cp {quote(spec.container + ':' + spec.launch_script)} - 2>&1")
    return "\n".join(lines) + "\n"


def saved_specs(path: str) -> dict:
    """node -> the specs of its saved readings, in the order k3doctor took them (unreachable nodes: none)."""
    _, _, saved, _ = load(Path(path).read_text(encoding="utf-8"))
    return {node: list(got) for node, got in saved.items()}


if __name__ == "__main__":
    by_node = saved_specs(sys.argv[1])
    sys.stdout.write(fair_script(by_node[sys.argv[2] if len(sys.argv) > 2 else next(iter(by_node))]))
