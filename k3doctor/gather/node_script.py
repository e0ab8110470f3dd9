"""Gather every reading a node's checks declared in one remote script (one round trip).

Each reading's output is framed with lengths, not delimiters, so no file content can be
mistaken for a frame: ``@@<nonce> <index> <rc> <total_out> <out_len> <err_len> <path_len>``
then ``path``, ``out`` and ``err`` bytes. A reading whose frame never arrives (node
deadline reached) becomes :class:`Unavailable` and its checks report ERROR. The engine's readings are
taken beside the script, on the Docker API (k3doctor/gather/engine_reads.py), within the same node deadline: a
container's readings too, in one exec whose script (written here) frames them the same way.
"""
from __future__ import annotations

import secrets
import threading
from collections.abc import Iterable
from pathlib import Path

from k3doctor.deadline import MAX_READS_IN_FLIGHT, READS_IN_FLIGHT, Deadline, seconds
from k3doctor.gather.engine_reads import SharedEngine, gather_container, gather_docker, gather_engine_fact, gather_exec
from k3doctor.readings import (
    OUTPUT_CAP_BYTES,
    Command,
    CommandReading,
    ContainerInspect,
    Docker,
    EngineFactCommand,
    Exists,
    File,
    FileReading,
    Glob,
    InContainer,
    Unavailable,
    in_container,
    tool_call,
)
from k3doctor.shell import join, quote
from k3doctor.transport.base import TransportError

MISSING, DIRECTORY = "M", "D"
FSIZE_BLOCK = 512  # `ulimit -f` unit in POSIX sh (bash outside POSIX mode counts 1024: a looser cap, still cut)
ARCHIVE_RESERVE_S = 5.0  # of the node deadline, kept for a launch script's archive read when its exec runs late
DOCKER_STOP_MARGIN_S = 10.0  # past the deadline, for the Docker reader to stop its channels on the node
GROUP_KILL_GRACE_S = 0.5  # TERM -> KILL of a reading's group; well inside the node-side KILL_GRACE_S
KILL_AFTER_S = 2.0  # a reading's `timeout -k`: KILL this long after its TERM
# How long after the node deadline the reader may be KILLed. It stops its command itself on TERM (the gather
# script's, at the deadline), so it is given time to run first: only a reader stalled this long can leave its
# command running, and one that TERM cannot wake (a read sleeping killable on a hard NFS or FUSE mount) still
# ends then. Its own `timeout` runs this much past the deadline, not to it: GNU timeout (coreutils 9.1) that
# got a TERM first KILLs at once when its own time comes (the first signal turns its next one into KILL and
# the deadline's timer still runs), which left the reader a few milliseconds - the gap between the two
# timeouts' starts - to stop its command.
READER_KILL_AFTER_S = 10.0
NODE_PYTHON = "python3"  # takes every reading in one process where the node has it (amd-smi needs it)
NODE_READER = (Path(__file__).parents[1] / "remote" / "node_reader.py").read_text()
# In a container the reader's source comes on the exec's stdin, not in its command line: an engine keeps an
# exec's command line in its events (`exec_create: ...` and `exec_start: ...`, each twice), so every reader
# of the next 30 minutes of events - rack-free's next run, `docker events`, a log shipper - would carry ~100 KB
# of it per node and run. The container's python3 reads exactly the source's length (no wait for the end of stdin).
_READER_FROM_STDIN = (f"import sys;exec(compile(sys.stdin.buffer.read({len(NODE_READER.encode())}),"
                      "'k3doctor-node-reader','exec'))")

# One frame of $t/o (stdout) and $t/e (stderr), each cut at the cap: `emit INDEX RC PATH`.
_EMIT = r"""emit() {
  n=$(wc -c < "$t/o"); o=$t/o; m=$n
  if [ "$n" -gt {cap} ]; then head -c {cap} "$t/o" > "$t/oc"; o=$t/oc; m={cap}; fi
  if [ -s "$t/e" ]; then head -c {cap} "$t/e" > "$t/ec"; el=$(wc -c < "$t/ec"); else : > "$t/ec"; el=0; fi
  printf '@@{nonce} %s %s %s %s %s %s\n%s' "$1" "$2" $n $m $el ${#3} "$3"
  cat "$o" "$t/ec"
}
"""

_PRELUDE = r"""
LC_ALL=C; export LC_ALL
t=
w=
reader=
# The shell's scratch directory, made only where the shell takes the readings itself (no python3).
scratch() { t=$(mktemp -d "${TMPDIR:-/tmp}/k3doctor.XXXXXXXX") || exit 97; }
trap '[ -z "$t" ] || rm -rf "$t"' EXIT
# At the node deadline the outer timeout signals this shell (on Ctrl-C the client does; when the client
# is gone the next frame raises PIPE). The in-flight reading's `timeout` leads a process group of its
# own and exits as soon as its direct child dies, so the whole group gets TERM, then KILL: descendants
# that ignore TERM die too. The reader (`batch`, $reader set) is waited for instead of KILLed: its command
# runs in a process group of its own that only the reader knows, and the reader stops it on TERM as soon
# as it gets the CPU; a KILL after a fixed grace would, on a node stalled for longer, leave it running.
stop() {
  if [ -n "$w" ]; then kill -TERM "-$w" 2>/dev/null || kill -TERM "$w" 2>/dev/null
    if [ -n "$reader" ]; then kill -CONT "-$w" 2>/dev/null; wait "$w"; else sleep {grace}; fi
    kill -KILL "-$w" 2>/dev/null; fi
  [ -z "$t" ] || rm -rf "$t"; exit 143
}
trap stop TERM HUP INT PIPE
# Output is capped at the source: the reading cannot write more than the cap (+1 block, so the cut is
# still seen) to $t, whatever it prints (SIGXFSZ stops it there). Whatever of the reading's group
# outlives it (a child that escaped the TERM) is killed with the group, so nothing is left behind.
bg() { ( ulimit -f {blocks}; exec "$@" ) > "$t/o" 2> "$t/e" < /dev/null & w=$!; wait "$w"; r=$?
  kill -9 "-$w" 2>/dev/null; w=; return $r; }
{emit}# Every reading in one process (k3doctor/remote/node_reader.py), in a process group of its own like any reading
# (it stops the command in flight itself when signalled); it writes whole frames itself.
batch() { reader=1; ( exec "$@" ) < /dev/null & w=$!; wait "$w"; r=$?; kill -9 "-$w" 2>/dev/null; w=; reader=
  return $r; }
none() { printf '@@{nonce} %s %s 0 0 0 %s\n%s' "$1" "$2" ${#3} "$3"; }
readf() {
  if [ -d "$2" ]; then none "$1" D "$2"
  elif [ -e "$2" ]; then bg timeout -k 1 {read_timeout} cat -- "$2"; emit "$1" $? "$2"
  else none "$1" M "$2"; fi
}
"""


# A container's readings, in one exec: every reading in one process (k3doctor/remote/node_reader.py, run by
# the container's python3, as on the node) where the image has python3, else by the container's shell
# (BODY below, `run INDEX TIMEOUT ARGV...`), framed like the node's: each command's output capped where it is
# written, each under its own timeout, the whole under one (where the image has a coreutils-style `timeout`:
# coreutils, busybox >= 1.30; the reader's KILL comes READER_KILL_AFTER_S after its TERM, which it answers by
# stopping its command: an early KILL could come before it got the CPU and leave that command running),
# nothing left behind. WRAPPER gets BODY, the line that runs the reader's source from stdin
# (_READER_FROM_STDIN) and the reader's words.
_IN_CONTAINER_WRAPPER = (
    'b=$1; r=$2; shift 2; t=; x=; if timeout -k 1 5 true 2>/dev/null; then t="timeout -k {kill_after} {total}"; '
    'x="timeout -k {reader_kill_after} {total}"; fi; '
    'if command -v {python} >/dev/null 2>&1; then exec $x {python} -I -S -c "$r" "$@"; fi; '
    'exec $t sh -c "$b" k3doctor "${t:+1}"')
_IN_CONTAINER_BODY = r"""to=$1
t=$(mktemp -d "${TMPDIR:-/tmp}/k3doctor.XXXXXXXX" 2>/dev/null || mktemp -d /dev/shm/k3doctor.XXXXXXXX 2>/dev/null) ||
  { echo "k3doctor: no writable temporary directory in the container (read-only root file system?)" >&2; exit 97; }
trap 'rm -rf "$t"' EXIT
trap 'rm -rf "$t"; exit 143' TERM HUP INT PIPE
{emit}run() { i=$1; s=$2; shift 2; [ -n "$to" ] && set -- timeout -k {kill_after} "$s" "$@"
  ( ulimit -f {blocks}; exec "$@" ) > "$t/o" 2> "$t/e" < /dev/null; emit "$i" $? ''; }
"""
FRAME_HEAD_BYTES = 128  # a frame's header line (and the path, empty here) at most
CONTAINER_EXEC_MARGIN_S = 5.0  # past the readings' own timeouts (each + its KILL), for the exec to start and end


def _exec_script(members: list, nonce: str, command_timeout_s: float, cap_bytes: int, fill,
                 python: str = NODE_PYTHON, in_flight: int = READS_IN_FLIGHT) -> tuple:
    """(command, its stdin, bound in seconds) of the one exec that takes every (index, InContainer) of one
    container (k3doctor/gather/engine_reads.py runs it through the API). Its output is those readings' frames,
    capped as a whole at the cap, so each reading gets its share of it (stdout and stderr alike); a cut-off or
    stopped exec can only lose readings, never run one reading's frame into another's (see
    _in_container_readings). The stdin is the reader's source (python3 reads it; the shell, without python3,
    leaves it unread). The reader runs ``in_flight`` of them at once; its bound stays the sum of their times
    (what the shell, one after another, may take)."""
    timeouts = [seconds(spec.timeout_s or command_timeout_s, 30.0) for _, spec in members]
    inner = sum(t + KILL_AFTER_S for t in timeouts) + CONTAINER_EXEC_MARGIN_S
    share = max(1, (cap_bytes - FRAME_HEAD_BYTES * len(members)) // (2 * len(members)))
    own_cap = (_IN_CONTAINER_BODY.replace("{emit}", _EMIT).replace("{cap}", str(share))
               .replace("{blocks}", str(share // FSIZE_BLOCK + 1)))
    body = fill(own_cap) + "".join(f"run {i} {t:g} {join(spec.inner)}\n"
                                   for (i, spec), t in zip(members, timeouts, strict=True))
    words = [nonce, str(share), f"{command_timeout_s:g}", f"{KILL_AFTER_S:g}", _in_flight_word(in_flight)]
    words += [w for (i, spec), t in zip(members, timeouts, strict=True)
              for w in _reader_words(i, Command(spec.inner, t))]
    wrapper = (_IN_CONTAINER_WRAPPER.replace("{kill_after}", f"{KILL_AFTER_S:g}").replace("{total}", f"{inner:g}")
               .replace("{reader_kill_after}", f"{READER_KILL_AFTER_S:g}").replace("{python}", quote(python)))
    return (["sh", "-c", wrapper, "k3doctor-in-container", body, _READER_FROM_STDIN, *words], NODE_READER.encode(),
            inner + KILL_AFTER_S + CONTAINER_EXEC_MARGIN_S)


def _steps(specs: list, command_timeout_s: float) -> list:
    """(frame index, File | Glob | Exists | Command) in the order the script takes them, every command with
    its timeout."""
    steps = []
    for i, spec in enumerate(specs):
        if isinstance(spec, EngineFactCommand):
            raise TypeError(f"{spec!r} runs with its engine fact: gather it with gather(), not in the node's script")
        if isinstance(spec, InContainer):
            raise TypeError(f"{spec!r} runs in its container's exec, through the engine: gather it with gather(), "
                            "not in the node's script")
        if isinstance(spec, Command):
            steps.append((i, Command(spec.argv, seconds(spec.timeout_s or command_timeout_s, 30.0))))
        elif isinstance(spec, (File, Glob, Exists)):
            steps.append((i, spec))
        else:
            raise TypeError(f"cannot gather {spec!r} in a shell script")
    return steps


def _shell_step(index: int, spec) -> str:
    """One step as the shell takes it (a node without python3)."""
    if isinstance(spec, File):
        return f"readf {index} {quote(spec.path)}"
    if isinstance(spec, Exists):
        return f"if [ -e {quote(spec.path)} ]; then none {index} 0 ''; else none {index} M ''; fi"
    if isinstance(spec, Glob):
        # The pattern is assigned quoted and expanded unquoted with IFS empty: the shell only globs it.
        return (f"p={quote(spec.pattern)}; IFS=; for f in $p; do IFS=' '; "
                f"[ -e \"$f\" ] || [ -L \"$f\" ] && readf {index} \"$f\"; done; IFS=' '; none {index} END ''")
    # `timeout` runs argv itself (no `sh -c` between): one process less per reading
    return f"bg timeout -k {KILL_AFTER_S:g} {spec.timeout_s:g} {join(spec.argv)}; emit {index} $? ''"


def _reader_words(index: int, spec) -> list:
    """One step as k3doctor/remote/node_reader.py takes it (its RECORD words)."""
    if isinstance(spec, Command):
        found = tool_call(spec.argv)
        if found:  # the reader finds the tool as FIND_TOOL does: one shell less a GPU tool call
            path, args = found
            return [str(index), "T", f"{spec.timeout_s:g}", str(1 + len(args)), path, *args]
        return [str(index), "C", f"{spec.timeout_s:g}", str(len(spec.argv)), *spec.argv]
    kind = {File: "F", Glob: "G", Exists: "E"}[type(spec)]
    return [str(index), kind, spec.pattern if isinstance(spec, Glob) else spec.path]


def _in_flight_word(in_flight: int) -> str:
    """The reader's ``-jN``: how many readings it runs at once (k3doctor/remote/node_reader.py Commands),
    clamped as the inventory bounds it, as every time value is clamped again at the runtime (deadline.py)."""
    return f"-j{min(max(int(in_flight), 1), MAX_READS_IN_FLIGHT)}"


def _filler(nonce: str, cap_bytes: int, command_timeout_s: float):
    """The scripts' placeholders, filled in."""
    def fill(text: str) -> str:
        return (text.replace("{emit}", _EMIT).replace("{nonce}", nonce).replace("{cap}", str(cap_bytes))
                .replace("{blocks}", str(cap_bytes // FSIZE_BLOCK + 1)).replace("{grace}", f"{GROUP_KILL_GRACE_S:g}")
                .replace("{read_timeout}", f"{command_timeout_s:g}").replace("{kill_after}", f"{KILL_AFTER_S:g}"))

    return fill


def build_script(specs: list, nonce: str, command_timeout_s: float, cap_bytes: int,
                 python: str = NODE_PYTHON, deadline_s: float = 120.0, in_flight: int = READS_IN_FLIGHT) -> str:
    """The node's gather script: every reading in one reader process (k3doctor/remote/node_reader.py), up to
    ``in_flight`` of them at once, where the node has ``python``; else one by one in the shell (a node without
    python3 is rare: its readings stay one after another). Framed in the order given, either way."""
    command_timeout_s = seconds(command_timeout_s, 30.0)
    fill = _filler(nonce, cap_bytes, command_timeout_s)
    steps = _steps(specs, command_timeout_s)
    if not steps:
        return fill(_PRELUDE)
    words = [nonce, str(cap_bytes), f"{command_timeout_s:g}", f"{KILL_AFTER_S:g}", _in_flight_word(in_flight)]
    words += [word for index, spec in steps for word in _reader_words(index, spec)]
    reader = join([python, "-I", "-S", "-c", NODE_READER, *words])
    one_by_one = "\n".join(_shell_step(index, spec) for index, spec in steps)
    return (fill(_PRELUDE) + f"if command -v {quote(python)} >/dev/null 2>&1; then "
            f"batch timeout -k {READER_KILL_AFTER_S:g} {seconds(deadline_s, 120.0) + READER_KILL_AFTER_S:g} {reader}\n"
            f"else\nscratch\n{one_by_one}\nfi\n")


def container_batches(specs: list) -> dict:
    """Container -> its [(index, InContainer)] in ``specs``, in the order given (one exec each)."""
    by_container: dict = {}
    for i, spec in enumerate(specs):
        if isinstance(spec, InContainer):
            by_container.setdefault(spec.container, []).append((i, spec))
    return by_container


def parse_frames(data: bytes, nonce: str) -> dict:
    """index -> list of (rc, path, out, err, truncated); tolerant of a cut-off tail."""
    frames: dict = {}
    marker = f"@@{nonce} ".encode()
    pos = 0
    while True:
        start = data.find(marker, pos)
        if start < 0:
            break
        eol = data.find(b"\n", start)
        if eol < 0:
            break
        fields = data[start + len(marker):eol].decode("ascii", "replace").split()
        try:
            index, rc = int(fields[0]), fields[1]
            total_out, out_len, err_len, path_len = (int(x) for x in fields[2:6])
        except (IndexError, ValueError):
            pos = eol + 1
            continue
        body = eol + 1
        end = body + path_len + out_len + err_len
        if end > len(data):
            break  # the script was killed mid-frame
        path = data[body:body + path_len].decode("utf-8", "replace")
        out = data[body + path_len:body + path_len + out_len].decode("utf-8", "replace")
        err = data[body + path_len + out_len:end].decode("utf-8", "replace")
        frames.setdefault(index, []).append((rc, path, out, err, total_out > out_len))
        pos = end
    return frames


def _file_reading(path, rc, out, err, truncated) -> FileReading:
    if truncated:  # cut at the cap (the reader was stopped there): kept, but never judged
        return FileReading(path, out, truncated=True)
    if rc == MISSING:
        return FileReading(path, None)
    if rc == DIRECTORY:
        return FileReading(path, None, error="is a directory")
    if rc in ("124", "137"):
        return FileReading(path, None, error="read timed out (the file blocked) and was killed")
    if rc != "0":
        return FileReading(path, None, error=(err.strip().split(": ")[-1] or f"read failed ({rc})"))
    return FileReading(path, out, truncated=truncated)


def _reading(spec, frames: list, why_missing: str):
    if isinstance(spec, Glob):
        if not frames or frames[-1][0] != "END":
            return Unavailable(f"glob {spec.pattern} not finished: {why_missing}")
        return {path: _file_reading(path, rc, out, err, tr) for rc, path, out, err, tr in frames[:-1]}
    if not frames:
        return Unavailable(f"{_describe(spec)} not read: {why_missing}")
    rc, path, out, err, truncated = frames[0]
    if isinstance(spec, File):
        return _file_reading(spec.path, rc, out, err, truncated)
    if isinstance(spec, Exists):
        return rc != MISSING
    code = int(rc)
    return CommandReading(command=join(spec.argv), rc=code, stdout=out, stderr=err,
                          timed_out=code in (124, 137), truncated=truncated)


def _in_container_readings(engine, specs: list, *, command_timeout_s: float, cap_bytes: int,
                           deadline: Deadline, extra: list = (), in_flight: int = READS_IN_FLIGHT) -> dict:
    """spec -> reading of every InContainer in ``specs``: one exec a container, through the engine. Each
    reading is the frame the container's shell wrote for it (complete ones only). A reading it never framed,
    when the exec itself failed (no such container, not running) or ran out of time, reads as that exec's
    own exit status and stderr, as if it had been its own exec; otherwise it is missing (not read). ``extra``:
    readings taken in a container's exec only if it is made anyway (a launch script), each with a share of
    the output of its own: the others' shares of the cap stay what they are without them."""
    nonce, command_timeout_s = secrets.token_hex(8), seconds(command_timeout_s, 30.0)
    fill = _filler(nonce, cap_bytes, command_timeout_s)
    batches, along = container_batches(specs), container_batches(extra)
    got = {}
    for container, members in batches.items():
        more = [(len(specs) + i, spec) for i, spec in along.get(container, []) if spec not in specs]
        cap = cap_bytes * (len(members) + len(more)) // len(members)
        members = members + more
        cmd, stdin, bound = _exec_script(members, nonce, command_timeout_s, cap, fill, in_flight=in_flight)
        outcome = gather_exec(engine, container, cmd, bound, cap, deadline, stdin=stdin)
        if isinstance(outcome, Unavailable):
            got.update({spec: outcome for _, spec in members})
            continue
        rc, body, err, cut = outcome
        frames = parse_frames(body, nonce)
        why = (f"the exec's output passed the {cap}-byte cap" if cut else "the exec ended before it"
               if rc == 0 else "the engine gave no exit status for the exec" if rc is None else f"the exec exited {rc}")
        for i, spec in members:
            mine = frames.get(i) or ([(str(rc), "", "", err, False)] if rc not in (0, None) else [])
            got[spec] = _reading(spec, mine, why)
    return got


def _describe(spec) -> str:
    if isinstance(spec, Command):
        return f"`{join(spec.argv)}`"
    return getattr(spec, "path", None) or getattr(spec, "pattern", repr(spec))


def gather_shell(transport, specs: list, *, command_timeout_s: float, deadline_s: float,
                 cap_bytes: int = OUTPUT_CAP_BYTES, in_flight: int = READS_IN_FLIGHT) -> dict:
    """spec -> reading for every File/Exists/Glob/Command spec, in one remote ``sh -s``."""
    if not specs:
        return {}
    nonce = secrets.token_hex(8)
    deadline_s = seconds(deadline_s, 120.0)
    script = build_script(specs, nonce, command_timeout_s, cap_bytes, deadline_s=deadline_s, in_flight=in_flight)
    result = transport.run_bytes("sh -s", timeout_s=deadline_s, stdin=script.encode())
    frames = parse_frames(result.stdout, nonce)
    if result.timed_out:
        why = f"node deadline of {deadline_s:g}s reached (raise ssh.node_deadline_s if the node is just slow)"
    elif result.rc not in (0, None):
        message = result.stderr.decode("utf-8", "replace").strip()[-300:] or "no message"
        why = f"gather script exited {result.rc}: {message}"
    else:
        why = "no output for it"
    return {spec: _reading(spec, frames.get(i, []), why) for i, spec in enumerate(specs)}


def gather_with_facts(transport, facts: dict, *, command_timeout_s: float, deadline: Deadline,
                      in_flight: int = READS_IN_FLIGHT) -> dict:
    """spec -> reading of each EngineFactCommand, given ``facts`` (spec -> its fact, or Unavailable, which is
    then the reading): the commands run with their fact as the last argument, all of them in one remote
    script on the node's connection (gather_shell: each under its timeout, output capped, nothing left
    behind), within what is left of the node deadline."""
    commands = {spec: Command((*spec.argv, fact), spec.timeout_s) for spec, fact in facts.items()
                if isinstance(fact, str)}
    got = {spec: fact for spec, fact in facts.items() if spec not in commands}
    if not commands:
        return got
    if deadline.expired:
        return got | {spec: Unavailable(f"{_describe(spec)} not run: the node deadline was reached first")
                      for spec in commands}
    try:
        read = gather_shell(transport, list(dict.fromkeys(commands.values())), command_timeout_s=command_timeout_s,
                            deadline_s=deadline.remaining(), in_flight=in_flight)
    except TransportError as exc:
        read = {command: Unavailable(str(exc)) for command in commands.values()}
    if deadline.expired:  # named by the node's deadline, not by what was left of it when they started
        why = f"node deadline of {deadline.budget_s:g}s reached (raise ssh.node_deadline_s if the node is just slow)"
        read = {c: Unavailable(f"{_describe(c)} not read: {why}") if isinstance(r, Unavailable) else r
                for c, r in read.items()}
    return got | {spec: read[command] for spec, command in commands.items()}


def gather(transport, specs: Iterable, *, command_timeout_s: float, deadline_s: float,
           in_flight: int = READS_IN_FLIGHT) -> dict:
    """All of a node's readings at once, within one node deadline (a slow engine does not eat the shell's
    budget, nor the reverse): the shell ones in one script; beside it, on one SDK client, the engine's
    readings, a container's exec, and the commands that need an engine fact (a script of their own, started
    as soon as their facts are known). Each script and exec runs ``in_flight`` of its readings at once."""
    deadline = Deadline(deadline_s)
    specs = list(dict.fromkeys(specs))  # de-duplicate, keep order
    engine_specs = [s for s in specs if isinstance(s, (Docker, ContainerInspect, EngineFactCommand, InContainer))]
    scripts = launch_scripts_in_exec(engine_specs)
    engine_got: dict = {}

    def read_engine():
        engine, beside = SharedEngine(transport, deadline), []

        def start(name, work):
            thread = threading.Thread(target=work, name=f"k3doctor-{name}-{transport.node}", daemon=True)
            thread.start()
            beside.append(thread)
            return thread

        execs = None
        try:  # the container's exec first: its readings take the longest
            if any(isinstance(spec, InContainer) for spec in engine_specs):
                execs = start("exec", lambda: engine_got.update(_in_container_readings(
                    engine, engine_specs, command_timeout_s=command_timeout_s, cap_bytes=OUTPUT_CAP_BYTES,
                    deadline=deadline, extra=list(dict.fromkeys(scripts.values())), in_flight=in_flight)))
            facts = {spec: gather_engine_fact(engine, spec, deadline) for spec in engine_specs
                     if isinstance(spec, EngineFactCommand)}
            if facts:
                start("facts", lambda: engine_got.update(_with_facts(transport, facts, command_timeout_s, deadline,
                                                                     in_flight)))
            # an inspect that waits for its launch script from the exec comes last: nothing waits behind it
            for spec in sorted(engine_specs, key=lambda spec: spec in scripts):
                if isinstance(spec, Docker):
                    engine_got[spec] = gather_docker(engine, spec, deadline)
                elif isinstance(spec, ContainerInspect):
                    engine_got[spec] = gather_container(engine, spec, deadline, script_from=(
                        (lambda spec=spec: _awaited(execs, engine_got, scripts[spec], deadline)) if spec in scripts
                        else None))
        finally:
            for thread in beside:  # each ends at the deadline at the latest
                thread.join(deadline.remaining() + DOCKER_STOP_MARGIN_S)
            engine.close()

    reader = threading.Thread(target=read_engine, name=f"k3doctor-docker-{transport.node}", daemon=True)
    if engine_specs:
        reader.start()
    results = gather_shell(transport, [s for s in specs if s not in engine_specs],
                           command_timeout_s=command_timeout_s, deadline_s=deadline.budget_s, in_flight=in_flight)
    if engine_specs:  # ends at the deadline at the latest (its channels are closed then)
        reader.join(deadline.remaining() + 2 * DOCKER_STOP_MARGIN_S)
    for spec in engine_specs:
        what = _describe(spec) if isinstance(spec, EngineFactCommand) else f"Docker engine on {transport.node}"
        results[spec] = engine_got.get(spec) or Unavailable(
            f"{what} not read by the node deadline of {deadline.budget_s:g}s")
    return results


def _awaited(thread: threading.Thread, got: dict, spec, deadline: Deadline):
    """``spec``'s reading once ``thread`` (the container's exec) has ended - waiting no later than
    ARCHIVE_RESERVE_S before the deadline, so that the archive can still be read in its place - else None."""
    thread.join(max(0.0, deadline.remaining() - ARCHIVE_RESERVE_S))
    return None if thread.is_alive() else got.get(spec)


def launch_scripts_in_exec(engine_specs: list) -> dict:
    """ContainerInspect -> the reading of its launch script inside the container, for each inspect whose
    container has readings of its own (one exec takes them anyway: ``cat`` there costs a process, where the
    engine's archive API re-executes dockerd as ``docker-tar`` - about 80 ms of the node's CPU a read).
    gather_container falls back to the archive wherever this reading is not a whole, clean one."""
    execed = {spec.container for spec in engine_specs if isinstance(spec, InContainer)}
    return {spec: in_container(spec.container, "cat", "--", spec.launch_script) for spec in engine_specs
            if isinstance(spec, ContainerInspect) and spec.launch_script and spec.container in execed
            and spec.launch_script.startswith("/")}  # a relative one: the archive's meaning (from /), not cat's


def _with_facts(transport, facts: dict, command_timeout_s: float, deadline: Deadline, in_flight: int) -> dict:
    """gather_with_facts, any failure read as those readings' own (ERROR), never the engine's."""
    try:
        return gather_with_facts(transport, facts, command_timeout_s=command_timeout_s, deadline=deadline,
                                 in_flight=in_flight)
    except Exception as exc:  # noqa: BLE001 -- whatever it was, those readings say it
        return {spec: Unavailable(f"{_describe(spec)} not run: {type(exc).__name__}: {exc}") for spec in facts}
