"""`k3doctor recipe diff`: what will really run, against a recipe point, every server flag and every
environment variable (reference §30 "Mechanical dry-run diff per concurrency", the seed's practice).

`--script`: the launch script's shell logic runs contained (k3doctor/recipes/sandbox.py: a bubblewrap sandbox,
no network, the machine's files out of reach, every program but a few text tools replaced by a recorder); the
model server and the environment it really gets are read from the records through their wrappers
(k3doctor/recipes/launches.py). Each server the script starts is judged.

Each difference is reported once - missing, extra, other value - with the recipe's why; differences the
recipe calls no-ops and its declared deviations are listed as such; the arithmetic rules of
k3doctor/recipes/rules.py are applied to the resolved values and shown with their numbers.
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field

from k3doctor import localfiles, recipes
from k3doctor.model.container import parse_flags
from k3doctor.recipes import launches, rules, sandbox
from k3doctor.redaction import REDACTED, redact_text

EXIT_SAME, EXIT_DIFFERENT, EXIT_NOT_READ, EXIT_BAD_INPUT = 0, 1, 2, 3
SERVER_ENTRY_POINTS = launches.SERVER_MODULES
NOT_NAMED = "(not named)"
NOT_READ = "(set; value not read: no rule names it)"  # --nodes: the value stayed on the node


class DiffInputError(Exception):
    """Input the diff cannot work from: one line, exit 3."""


class ScriptNotRead(Exception):
    """The script ran, but the sandbox's bounds (or its runner's deadline) cut it short before a server was seen:
    an ERROR, exit 2 - not bad input."""


def parse_args(words) -> dict:
    """The server's or client's flags: ``--flag value`` / ``--flag=value`` / bare ``--flag`` (True); a
    value may start with one dash (-1)."""
    return parse_flags(words, prefix="--", bare=True)


@dataclass
class Resolved:
    """What the script would start: the server's flags and environment, the client's, and which
    environment variables the script itself set (the others came from the caller)."""

    launch: rules.Launch
    own_env: set
    client_seen: bool
    notes: list = field(default_factory=list)
    label: str = ""
    dropped: dict = field(default_factory=dict)  # name -> the wrapper that did not pass it
    placeholder_note: str = "any non-empty interface name (no node to check it against)"


def _launch_env(env: dict) -> dict:
    return {k: v for k, v in env.items() if k not in launches.SHELL_NAMES and not k.startswith("BASH_FUNC_")}


def resolved_from_script(run: sandbox.ScriptRun) -> list:
    """One Resolved per model server the script starts (in the order started)."""
    if run.lost:
        raise ScriptNotRead("the sandbox's runner did not report within the deadline: nothing the script started "
                            "was read")
    servers = [(launch, call) for call in run.calls
               for launch in launches.launches(call.argv, call.env, call.files, launches.server_words)]
    if not servers:
        programs = sorted({os.path.basename(c.argv[0]) for c in run.calls if c.argv})
        said = ("the script starts no model server (no " + " / ".join(SERVER_ENTRY_POINTS) + " entry point)" +
                (f"; it called {', '.join(programs[:12])}" if programs else "") +
                ("; it was still running at the deadline" if run.returncode is None else
                 f"; the script exited {run.returncode}" if run.returncode else ""))
        if run.errors:  # a bound or a missing program, not the script's content, may be why none was seen
            raise ScriptNotRead(redact_text(f"{'; '.join(run.errors)}; among what was read, {said}"))
        raise DiffInputError(said)
    client = next((u for c in run.calls
                   for u in launches.launches(c.argv, c.env, c.files, launches.client_words)), None)
    notes = [redact_text(f"ERROR {e}") for e in run.errors]
    if run.returncode is None:
        notes.append("the script was still running at the deadline (killed); what it had started is compared")
    elif run.returncode != 0:
        notes.append(f"the script exited {run.returncode} (every program but the text tools recorded, not run)")
    if len(servers) > 1:
        notes.append(f"the script starts {len(servers)} model servers: each is judged")
    out = []
    for n, (launch, call) in enumerate(servers, 1):
        env = _launch_env(launch.env)
        own = {k for k, v in env.items() if run.base_env.get(k) != v}
        through = f" through {' / '.join(launch.wrappers)}" if launch.wrappers else ""
        label = f"server {n} of {len(servers)}{through}" if len(servers) > 1 else f"server{through}"
        out.append(Resolved(rules.Launch(flags=parse_args(launch.words), env=env,
                                         client_flags=parse_args(client.words) if client else None,
                                         client_env=_launch_env(client.env) if client else None),
                            own, client is not None, list(notes), label,
                            {k: w for k, w in launch.dropped.items() if k in call.env}))
    return out


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
        """Said only when nothing matters: "identical" always comes with exit 0."""
        return not self.matters

    @property
    def matters(self) -> bool:
        return bool(self.differences) or any(r["status"] in (rules.BLOCK, rules.WARN) for r in self.rules)


def _shown(value, arg: bool, name: str = "") -> str:
    """A value as printed: ``<redacted>`` where the name or the value has a secret's shape (k3doctor.redaction),
    in either mode."""
    if value is None:
        return "(absent)" if arg else "(unset)"
    if value is True:
        return "(flag)"
    text = str(value)
    if text == NOT_READ:
        return text
    probe = f"{name} {text}" if arg else f"{name}={text}"
    return REDACTED if redact_text(probe) != probe or redact_text(text) != text else text


def _same(expected, found) -> bool:
    if expected == recipes.ANY:
        return found is not None
    if expected == recipes.DATA_IF:  # any interface name: the node's routes are not read here
        return isinstance(found, str) and found.strip() != "" and "," not in found
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


def _compare(names, want: dict, have: dict, recipe, point, arg: bool, where: str, dropped=None) -> tuple:
    """(differences, no-ops, deviations) over ``names``; ``dropped``: name -> the wrapper that did not pass it."""
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
                deviations.append(Entry(name, "deviation", f"upstream {deviation['upstream']}",
                                        _shown(found, arg, name), deviation.get("why", ""), where=where))
            continue
        if noop and found in noop.get("same", ()):
            noops.append(Entry(name, "no-op", _shown(expected, arg, name) if named else NOT_NAMED,
                               _shown(found, arg, name), noop.get("why", ""), where=where))
            continue
        kind = "extra" if (not named or expected is None) else "missing" if found is None else "other value"
        why = recipe.why.get(name, "")
        if deviation:
            why = f"{why}; the recipe deviates from upstream {deviation['upstream']} on purpose: {deviation['why']}"
        shown = _shown(found, arg, name)
        if found is None and name in (dropped or {}):
            shown = f"(unset: the script exports it, {dropped[name]} does not pass it)"
        differences.append(Entry(name, kind, _shown(expected, arg, name) if named else NOT_NAMED,
                                 shown, why.strip("; "), where=where))
    return differences, noops, deviations


def diff_point(recipe, point, resolved: Resolved) -> PointDiff:
    launch = resolved.launch
    env_names = list(point.env) + sorted((resolved.own_env | {n for n in recipe.noops if not n.startswith("-")})
                                         - set(point.env) - set(point.client_env))
    arg_names = list(point.args) + sorted((set(launch.flags) | {n for n in recipe.noops if n.startswith("-")})
                                          - set(point.args))
    d1, n1, v1 = _compare(env_names, point.env, launch.env, recipe, point, arg=False, where="server",
                          dropped=resolved.dropped)
    d2, n2, v2 = _compare(arg_names, point.args, launch.flags, recipe, point, arg=True, where="server")
    differences, noops, deviations = d1 + d2, n1 + n2, v1 + v2
    notes = list(resolved.notes)
    placeholders = sorted(n for n, v in point.env.items() if v == recipes.DATA_IF and n in launch.env)
    if placeholders:
        notes.append(f"{', '.join(placeholders)}: {recipes.DATA_IF} taken as {resolved.placeholder_note}")
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
        elif d.differences:
            head += f"{len(d.differences)} difference(s)"
        else:
            head += "the recipe's flags and variables, but a rule finding below matters"
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
    if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
        raise DiffInputError(f"--timeout {timeout_s!r}: a finite number of seconds is needed")
    recipe = recipes.load(recipe_spec)
    why = localfiles.why_not_readable(script)
    if why:
        raise DiffInputError(f"--script {script}: {why}")
    points_judged(recipe, concurrency)
    started = time.monotonic()
    try:
        ran = sandbox.run(script, dict(os.environ if env is None else env), timeout_s)
    except sandbox.SandboxError as exc:
        raise DiffInputError(str(exc)) from None
    try:
        servers = resolved_from_script(ran)
    except ScriptNotRead as exc:
        if fmt == "json":
            return EXIT_NOT_READ, json.dumps({"recipe": recipe.name, "launch": f"script {script}",
                                              "error": str(exc)}, indent=2) + "\n"
        return EXIT_NOT_READ, f"script {script}: ERROR {exc}\n"
    took = f"resolved in {time.monotonic() - started:.1f} s"
    judged = [(f"script {script}, {r.label} ({took})", diff(recipe, r, concurrency)) for r in servers]
    if fmt == "json":
        text = to_json(recipe, judged[0][0], judged[0][1]) if len(judged) == 1 else json.dumps(
            {"recipe": recipe.name, "launches": [json.loads(to_json(recipe, source, diffs))
                                                 for source, diffs in judged]}, indent=2) + "\n"
    else:
        text = "\n".join(render_table(recipe, source, diffs) for source, diffs in judged)
    if any(best(diffs).matters for _, diffs in judged):
        return EXIT_DIFFERENT, text
    return (EXIT_NOT_READ if ran.errors else EXIT_SAME), text
