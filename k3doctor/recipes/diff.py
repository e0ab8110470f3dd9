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
from dataclasses import asdict

from k3doctor import localfiles, recipes
from k3doctor.recipes import judgement, sandbox
from k3doctor.recipes.judgement import PointDiff, Resolved, diff_point, difference_text, parse_args  # noqa: F401
from k3doctor.results import counts

EXIT_SAME, EXIT_DIFFERENT, EXIT_NOT_READ, EXIT_BAD_INPUT = 0, 1, 2, 3
SERVER_ENTRY_POINTS = judgement.SERVER_ENTRY_POINTS
NOT_READ = judgement.NOT_READ


class DiffInputError(Exception):
    """Input the diff cannot work from: one line, exit 3."""


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
                                     sum(counts(r["status"]) for r in d.rules)))


# ----------------------------------------------------------------------------- output

IDENTICAL = judgement.IDENTICAL


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
            lines.append(f"  {e.kind:<11} {difference_text(e)}")
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
        servers = judgement.resolved_from_script(ran)
    except judgement.ScriptNotRead as exc:
        if fmt == "json":
            return EXIT_NOT_READ, json.dumps({"recipe": recipe.name, "launch": f"script {script}",
                                              "error": str(exc)}, indent=2) + "\n"
        return EXIT_NOT_READ, f"script {script}: ERROR {exc}\n"
    except judgement.NotJudged as exc:
        raise DiffInputError(str(exc)) from None
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
