"""`k3doctor recipe diff`: what will really run, against a recipe point, every server flag and every
environment variable (reference §30 "Mechanical dry-run diff per concurrency", the seed's practice).

`--script`: the launch script is resolved without running anything real. Its shell code runs under
bash in a scratch directory with PATH holding only a few text tools (awk, sed, grep, bc, mkdir, ...); every
other command - the model server, docker, srun, hf download, curl, aiperf - is not found there, and
bash's ``command_not_found_handle`` records its argv and environment instead and returns 0. The script
sees the caller's environment (``CONC=8``), as under its harness; the run is bounded (its process group
is killed at the deadline).

Each difference is reported once - missing, extra, other value - with the recipe's why; differences the
recipe calls no-ops and its declared deviations are listed as such; the arithmetic rules of
k3doctor/recipes/rules.py are applied to the resolved values and shown with their numbers.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field

from k3doctor import localfiles, recipes
from k3doctor.model.container import parse_flags
from k3doctor.recipes import rules

EXIT_SAME, EXIT_DIFFERENT, EXIT_NOT_READ, EXIT_BAD_INPUT = 0, 1, 2, 3
SERVER_ENTRY_POINTS = ("atom.entrypoints", "vllm.entrypoints", "sglang.launch_server")
CLIENT_PROGRAMS = ("aiperf",)
# Text tools a launch script computes with, and mkdir (its output redirections need the directory); they run
# for real, in the scratch directory (nothing else does).
TEXT_TOOLS = ("mkdir", "awk", "sed", "grep", "cut", "tr", "bc", "expr", "basename", "dirname", "head", "tail", "wc",
              "seq", "sort", "uniq", "cat", "date", "printf", "numfmt", "nproc", "hostname", "uname", "id")
# Names bash or this resolver sets in the recorded environment: never the script's own.
SHELL_NAMES = {"PATH", "BASH_ENV", "PWD", "OLDPWD", "SHLVL", "_", "K3DOCTOR_RECORD"}
MAX_CALLS = 2000
NOT_NAMED = "(not named)"
OUTPUT_TAIL = 2000


class DiffInputError(Exception):
    """Input the diff cannot work from: one line, exit 3."""


@dataclass
class Call:
    argv: list
    env: dict


@dataclass
class ScriptRun:
    calls: list
    returncode: int | None  # None: ended by the deadline
    base_env: dict
    output_tail: str = ""


_PRELUDE = r"""
command_not_found_handle() {
    local record="$K3DOCTOR_RECORD/$(printf '%s' "${EPOCHREALTIME/./}")-$BASHPID-$RANDOM"
    __ENV__ -0 > "$record.env"
    printf '%s\0' "$@" > "$record.argv"
    return 0
}
# Nothing real was started, so nothing is killed: a stopped background stub would lose its record.
kill() {
    [ "$1" = "-0" ] && return 1
    return 0
}
"""


def resolve_script(path: str, env: dict, timeout_s: float) -> ScriptRun:
    """Run the script's shell logic with every external command recorded instead of run."""
    why = localfiles.why_not_readable(path)
    if why:
        raise DiffInputError(f"--script {path}: {why}")
    bash, env_tool = shutil.which("bash"), shutil.which("env")
    if not bash or not env_tool:
        raise DiffInputError("bash and env are needed to resolve a launch script")
    with tempfile.TemporaryDirectory(prefix="k3doctor-recipe-diff-") as scratch:
        tools, record, work = (os.path.join(scratch, d) for d in ("bin", "calls", "work"))
        for d in (tools, record, work):
            os.mkdir(d)
        for tool in TEXT_TOOLS:
            real = shutil.which(tool)
            if real:
                os.symlink(real, os.path.join(tools, tool))
        prelude = os.path.join(scratch, "prelude.sh")
        with open(prelude, "w") as fh:
            fh.write(_PRELUDE.replace("__ENV__", shlex.quote(env_tool)))
        run_env = {**env, "PATH": tools, "BASH_ENV": prelude, "K3DOCTOR_RECORD": record}
        output = os.path.join(scratch, "output")
        with open(output, "wb") as out:  # a file, not a pipe: a script that prints without end costs no memory
            proc = subprocess.Popen([bash, "--noprofile", "--norc", os.path.abspath(path)], cwd=work, env=run_env,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        deadline = time.monotonic() + timeout_s
        try:
            rc = proc.wait(timeout=timeout_s)
            _drain(proc.pid, deadline)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            _kill_group(proc)
        calls = _read_calls(record)
        tail = _tail(output)
    return ScriptRun(calls=calls, returncode=rc, base_env=dict(env), output_tail=tail)


def _tail(path: str) -> str:
    with open(path, "rb") as fh:
        fh.seek(max(0, os.path.getsize(path) - OUTPUT_TAIL))
        return fh.read().decode("utf-8", "replace")


def _drain(pgid: int, deadline: float) -> None:
    """Let the script's background jobs (the server it started with `&`) finish recording, up to the deadline."""
    while time.monotonic() < deadline and _group_alive(pgid):
        time.sleep(0.02)


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (zombies aside: an init that does not reap keeps them)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def _kill_group(proc) -> None:
    """The script's whole process group ends with it (background jobs included)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _read_calls(record: str) -> list:
    names = sorted({f.rsplit(".", 1)[0] for f in os.listdir(record)}, key=lambda n: (int(n.split("-")[0]), n))
    calls = []
    for name in names[:MAX_CALLS]:  # the argv is written last: a call without it was cut off
        try:
            with open(os.path.join(record, name + ".argv"), "rb") as fh:
                argv = [w.decode("utf-8", "replace") for w in fh.read().split(b"\0")[:-1]]
            with open(os.path.join(record, name + ".env"), "rb") as fh:
                env = dict(e.decode("utf-8", "replace").split("=", 1) for e in fh.read().split(b"\0") if b"=" in e)
        except OSError:
            continue  # a call cut off by the deadline
        calls.append(Call(argv, env))
    return calls


# ----------------------------------------------------------------------------- the server and the client

def parse_args(words) -> dict:
    """The server's or client's flags: ``--flag value`` / ``--flag=value`` / bare ``--flag`` (True); a
    value may start with one dash (-1)."""
    return parse_flags(words, prefix="--", bare=True)


def _unwrap(call: Call, markers) -> tuple | None:
    """(words after the marker, env) when the call starts a program named by ``markers``, directly or
    inside a wrapper (env A=1 ..., srun/docker ... -e A=1 image ..., bash -c "...")."""
    env = dict(call.env)
    words = list(call.argv)
    for i, word in enumerate(words):
        if any(m in word for m in markers):
            if " " in word.strip():  # a command string (bash -c "..."): the same, inside it
                inner = shlex.split(word)
                j = next((j for j, w in enumerate(inner) if any(m in w for m in markers)), None)
                if j is None:
                    return None
                env.update(_assignments(inner[:j]))
                return inner[j + 1:], env
            env.update(_assignments(words[:i]))
            env.update(_docker_env(words[:i]))
            return words[i + 1:], env
    return None


def _assignments(words) -> dict:
    pairs = (w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
    return {name: value for name, value in pairs if name.isidentifier()}


def _docker_env(words) -> dict:
    out = {}
    for i, w in enumerate(words):
        if w in ("-e", "--env") and i + 1 < len(words) and "=" in words[i + 1]:
            name, value = words[i + 1].split("=", 1)
            out[name] = value
        elif w.startswith("--env=") and "=" in w[6:]:
            name, value = w[6:].split("=", 1)
            out[name] = value
    return out


@dataclass
class Resolved:
    """What the script would start: the server's flags and environment, the client's, and which
    environment variables the script itself set (the others came from the caller)."""

    launch: rules.Launch
    own_env: set
    client_seen: bool
    notes: list = field(default_factory=list)


def resolved_from_script(run: ScriptRun) -> Resolved:
    server = next((u for c in run.calls if (u := _unwrap(c, SERVER_ENTRY_POINTS))), None)
    if server is None:
        programs = sorted({c.argv[0] for c in run.calls if c.argv})
        raise DiffInputError("the script starts no model server (no " + " / ".join(SERVER_ENTRY_POINTS) +
                             " command)" + (f"; it called {', '.join(programs[:12])}" if programs else "") +
                             ("" if run.returncode is not None else "; it was still running at the deadline") +
                             _last_line(run))
    words, env = server
    client = next((u for c in run.calls if (u := _unwrap(c, CLIENT_PROGRAMS))), None)
    own = {k for k, v in env.items() if run.base_env.get(k) != v} - SHELL_NAMES
    notes = []
    if run.returncode is None:
        notes.append("the script was still running at the deadline (killed); what it had started is compared")
    elif run.returncode != 0:
        notes.append(f"the script exited {run.returncode} (with every command stubbed){_last_line(run)}")
    launch = rules.Launch(flags=parse_args(words), env={k: v for k, v in env.items() if k not in SHELL_NAMES},
                          client_flags=parse_args(client[0]) if client else None,
                          client_env=client[1] if client else None)
    return Resolved(launch=launch, own_env=own, client_seen=client is not None, notes=notes)


def _last_line(run: ScriptRun) -> str:
    lines = [ln for ln in run.output_tail.splitlines() if ln.strip()]
    return f"; its last output line: {lines[-1][:200]!r}" if lines else ""


# ----------------------------------------------------------------------------- the diff

@dataclass
class Entry:
    name: str
    kind: str  # missing | extra | other value | no-op | deviation
    expected: str
    found: str
    why: str = ""
    rule: str = ""  # a rule's finding on the same name, with its numbers
    where: str = "server"  # server | client


@dataclass
class PointDiff:
    concurrency: int | None
    differences: list
    noops: list
    deviations: list
    rules: list  # rule findings not already shown on a difference (dicts)
    notes: list

    @property
    def identical(self) -> bool:
        return not self.differences

    @property
    def matters(self) -> bool:
        return bool(self.differences) or any(r["status"] in (rules.BLOCK, rules.WARN) for r in self.rules)


def _shown(value, arg: bool) -> str:
    if value is None:
        return "(absent)" if arg else "(unset)"
    if value is True:
        return "(flag)"
    return str(value)


def _same(expected, found) -> bool:
    if expected == recipes.ANY:
        return found is not None
    if expected is None or found is None or expected is True or found is True:
        return expected == found
    if expected == found:
        return True
    for convert in (float, json.loads):
        try:
            return convert(expected) == convert(found)
        except (TypeError, ValueError):
            continue
    return False


def _compare(names, want: dict, have: dict, recipe, point, arg: bool, where: str) -> tuple:
    """(differences, no-ops, deviations) over ``names``."""
    differences, noops, deviations = [], [], []
    for name in names:
        named = name in want
        expected, found = want.get(name), have.get(name)
        noop = recipe.noops.get(name)
        deviation = recipe.deviations.get(name)
        if deviation and deviation.get("points") and point.concurrency not in deviation["points"]:
            deviation = None
        if not named and found is None:
            continue
        if named and _same(expected, found):
            if deviation:
                deviations.append(Entry(name, "deviation", f"upstream {deviation['upstream']}", _shown(found, arg),
                                        deviation.get("why", ""), where=where))
            continue
        if noop and found in noop.get("same", ()):
            noops.append(Entry(name, "no-op", _shown(expected, arg) if named else NOT_NAMED,
                               _shown(found, arg), noop.get("why", ""), where=where))
            continue
        kind = "extra" if (not named or expected is None) else "missing" if found is None else "other value"
        why = recipe.why.get(name, "")
        if deviation:
            why = f"{why}; the recipe deviates from upstream {deviation['upstream']} on purpose: {deviation['why']}"
        differences.append(Entry(name, kind, _shown(expected, arg) if named else NOT_NAMED,
                                 _shown(found, arg), why.strip("; "), where=where))
    return differences, noops, deviations


def diff_point(recipe, point, resolved: Resolved) -> PointDiff:
    launch = resolved.launch
    env_names = list(point.env) + sorted((resolved.own_env | {n for n in recipe.noops if not n.startswith("-")})
                                         - set(point.env) - set(point.client_env))
    arg_names = list(point.args) + sorted((set(launch.flags) | {n for n in recipe.noops if n.startswith("-")})
                                          - set(point.args))
    d1, n1, v1 = _compare(env_names, point.env, launch.env, recipe, point, arg=False, where="server")
    d2, n2, v2 = _compare(arg_names, point.args, launch.flags, recipe, point, arg=True, where="server")
    differences, noops, deviations = d1 + d2, n1 + n2, v1 + v2
    notes = list(resolved.notes)
    if point.client_env:
        if resolved.client_seen:
            d3, n3, v3 = _compare(list(point.client_env), point.client_env, launch.client_env or {}, recipe, point,
                                  arg=False, where="client")
            differences, noops, deviations = differences + d3, noops + n3, deviations + v3
        else:
            notes.append("no benchmark client (aiperf) was seen: its environment "
                         f"({', '.join(point.client_env)}) was not compared")
    shown = {e.name: e for e in differences}
    findings = []
    for f in rules.apply(launch, recipe, point):
        if f.subject in shown and f.status in (rules.BLOCK, rules.WARN):
            entry = shown[f.subject]
            entry.rule = f"{f.status} {f.rule}: {f.message}"
            continue
        findings.append(asdict(f))
    return PointDiff(point.concurrency, differences, noops, deviations, findings, notes)


def points_judged(recipe, concurrency: int | None) -> list:
    """The points a diff judges: the one asked for, else every point of the recipe; DiffInputError (exit 3,
    naming the recipe's points) for a concurrency it has no point for - asked before anything runs."""
    if concurrency is not None or len(recipe.points) == 1:
        try:
            return [recipe.point(concurrency)]
        except ValueError as exc:
            raise DiffInputError(str(exc)) from None
    return list(recipe.points)


def diff(recipe, resolved: Resolved, concurrency: int | None) -> list:
    """One PointDiff per point judged (:func:`points_judged`)."""
    return [diff_point(recipe, p, resolved) for p in points_judged(recipe, concurrency)]


def best(diffs: list) -> PointDiff:
    """The point the launch matches best: fewest differences, then fewest rule findings that matter."""
    return min(diffs, key=lambda d: (len(d.differences),
                                     sum(r["status"] in (rules.BLOCK, rules.WARN) for r in d.rules)))


# ----------------------------------------------------------------------------- output

IDENTICAL = "identical on every server flag and every environment variable"


def _point_label(d: PointDiff) -> str:
    return "the recipe" if d.concurrency is None else f"concurrency {d.concurrency}"


def render_table(recipe, source: str, diffs: list) -> str:
    lines = [f"recipe {recipe.name} ({recipe.source}) vs {source}"]
    chosen = best(diffs)
    for d in diffs:
        lines.append("")
        head = f"== {_point_label(d)}: "
        if d.identical:
            aside = [w for w, items in (("no-ops", d.noops), ("deviations", d.deviations)) if items]
            head += IDENTICAL + (f" ({' and '.join(aside)} aside)" if aside else "")
        else:
            head += f"{len(d.differences)} difference(s)"
        lines.append(head)
        for e in d.differences:
            where = " [client]" if e.where == "client" else ""
            lines.append(f"  {e.kind:<11} {e.name}{where}: recipe {e.expected}, launch {e.found}"
                         + (f" - {e.why}" if e.why else ""))
            if e.rule:
                lines.append(f"              {e.rule}")
        for e in d.noops:
            lines.append(f"  no-op       {e.name}: recipe {e.expected}, launch {e.found} - {e.why}")
        for e in d.deviations:
            lines.append(f"  deviation   {e.name}: {e.found} ({e.expected}) - {e.why}")
        for f in d.rules:
            lines.append(f"  {f['status']:<11} {f['rule']}: {f['message']}")
        for note in d.notes:
            lines.append(f"  note        {note}")
    if len(diffs) > 1:
        lines += ["", f"best match: {_point_label(chosen)} ({len(chosen.differences)} difference(s))"]
    return "\n".join(lines) + "\n"


def to_json(recipe, source: str, diffs: list) -> str:
    chosen = best(diffs)
    return json.dumps({
        "recipe": recipe.name, "recipe_source": recipe.source, "launch": source,
        "best_concurrency": chosen.concurrency, "identical": chosen.identical,
        "points": [{"concurrency": d.concurrency, "identical": d.identical,
                    "differences": [asdict(e) for e in d.differences], "noops": [asdict(e) for e in d.noops],
                    "deviations": [asdict(e) for e in d.deviations], "rules": d.rules, "notes": d.notes}
                   for d in diffs]}, indent=2) + "\n"


def run_nodes(recipe_spec: str | None, concurrency: int | None, nodes: str, fmt: str, timeout_s: float) -> tuple:
    """(exit code, report text) for the servers running on the inventory's nodes: 2 where a node could not
    be read or runs no server (nothing compared there). Without --recipe / --concurrency, the inventory's
    cluster.recipe / cluster.concurrency."""
    from k3doctor.inventory.load import load_nodes
    from k3doctor.inventory.types import InventoryError
    from k3doctor.recipes import nodes as recipe_nodes

    try:
        inv = load_nodes(nodes)
    except InventoryError as exc:
        raise DiffInputError("; ".join(exc.problems)) from None
    if recipe_spec is None and inv.cluster.recipe is None:
        raise DiffInputError(f"give --recipe NAME|PATH (the inventory {inv.path} names no cluster.recipe)")
    recipe = recipes.load(recipe_spec) if recipe_spec else recipes.cached(inv.cluster.recipe)
    if concurrency is None and not recipe_spec:
        concurrency = inv.cluster.concurrency
    points_judged(recipe, concurrency)
    launches, missing = [], []
    for node, pid, found in recipe_nodes.read(inv, recipe, timeout_s):
        if isinstance(found, str):
            missing.append({"node": node, "why": found})
        else:
            launches.append((f"node {node} server pid {pid}", node, pid, diff(recipe, found, concurrency)))
    if fmt == "json":
        text = json.dumps({"recipe": recipe.name, "launches": [
            {"node": node, "pid": pid, **json.loads(to_json(recipe, source, diffs))}
            for source, node, pid, diffs in launches], "not_compared": missing}, indent=2) + "\n"
    else:
        text = "".join(render_table(recipe, source, diffs) + "\n" for source, _, _, diffs in launches)
        text += "".join(f"node {m['node']}: {m['why']}\n" for m in missing)
    if any(best(diffs).matters for *_, diffs in launches):
        return EXIT_DIFFERENT, text
    return (EXIT_NOT_READ if missing else EXIT_SAME), text


def run(recipe_spec: str, concurrency: int | None, script: str | None, fmt: str, timeout_s: float,
        env: dict | None = None, nodes: str | None = None) -> tuple:
    """(exit code, report text). Raises DiffInputError / recipes.RecipeError on bad input."""
    if nodes is not None:
        return run_nodes(recipe_spec, concurrency, nodes, fmt, timeout_s)
    if recipe_spec is None:
        raise DiffInputError("give --recipe NAME|PATH (the recipe to compare with)")
    recipe = recipes.load(recipe_spec)
    points_judged(recipe, concurrency)
    started = time.monotonic()
    resolved = resolved_from_script(resolve_script(script, dict(os.environ if env is None else env), timeout_s))
    diffs = diff(recipe, resolved, concurrency)
    source = f"script {script} (resolved in {time.monotonic() - started:.1f} s)"
    text = to_json(recipe, source, diffs) if fmt == "json" else render_table(recipe, source, diffs)
    return (EXIT_DIFFERENT if best(diffs).matters else EXIT_SAME), text
