"""launch-config's judgement of one node's launch against the inventory's recipe point (reference §25, §30,
§17, §22; issue 30): the gate says what `recipe diff` says, from one code path (k3doctor/recipes/judgement.py) -
the same rows, arithmetic and words. On gfx1250 (wide EP) checks/launch.py reads the container and ranks itself
and hands each environment and the node's command to :func:`judge_wide_ep`; where the platform's launch is the
recipe's alone (MI355X TP8 AgentX), :func:`judge` reads the launch as follows.

What is judged, in this order, is whatever the node has:
1. the running server: its own argv and environment read from /proc (k3doctor/recipes/servers.py), wherever it
   runs - Docker, Slurm with pyxis/enroot, or bare;
2. else the created container's configuration (docker inspect: Entrypoint + Cmd and Env), the moment a
   pre-launch gate runs;
3. else the launch script the inventory names (``cluster.launch_script``), read from the node and resolved here
   in the sandbox of `recipe diff --script` (k3doctor/recipes/sandbox.py): its programs recorded, never run.
With a recipe declared and none of these, the launch is not judged: an ERROR that says what to add, never a
quiet PASS. A sandbox that cannot run (no bwrap, user namespaces off) is an ERROR of this check, naming what
is missing - the rest of the gate still runs.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import replace

from k3doctor import recipes
from k3doctor.parsers import ParseError
from k3doctor.readings import CONTAINER_HF_CACHE, Command, ContainerInspect, File, ReadingUnavailable, sh_with_fact
from k3doctor.recipes import judgement, rules, sandbox, servers
from k3doctor.registry import remediation
from k3doctor.results import Verdict, error, passed

SCRIPT_TIMEOUT_S = 20.0  # a launch script's shell logic, every program but the text tools recorded (sandbox.py)
SCRIPT_PATH = "/usr/local/bin:/usr/bin:/bin"  # the script's PATH; the caller's environment is not handed on

DIFFERENCE = remediation("RECIPE-DIFFERENCE", "the launch differs from the recipe point", """
The server's flag or variable named differs from the recipe point the inventory launches (cluster.recipe,
cluster.concurrency): set it as the recipe says (its why is in the finding), or declare the deviation in a site
recipe that extends the shipped one (`deviations:`, with its why). `k3doctor recipe diff` shows the whole
comparison, no-ops and declared deviations included.
""")
# One remediation per arithmetic rule of k3doctor/recipes/rules.py: the rule's own why (its docstring).
RULE_CODES = {rule.__name__.replace("_", "-"): remediation(
    f"RECIPE-{rule.__name__.replace('_', '-').upper()}", f"recipe rule {rule.__name__.replace('_', '-')}",
    " ".join((rule.__doc__ or "").split()) + " `k3doctor recipe diff` shows the rule with its numbers.")
    for rule in rules.RULES}
NO_LAUNCH = remediation("RECIPE-NO-LAUNCH", "the launch could not be judged", """
With cluster.recipe declared, the gate judges the launch before it starts: from the running server, else the
created container's command and environment, else the launch script. Where nothing runs and no container
holds the server command yet (a Slurm or bare launch), name the script that starts the server in the inventory:
`cluster: {launch_script: /path/on/the/nodes/launch.sh}`; it is copied and resolved in a sandbox (bubblewrap,
package `bubblewrap`) where k3doctor runs.
""")
CODES = (DIFFERENCE, NO_LAUNCH, *RULE_CODES.values())


def reads(settings) -> dict:
    """The server reader, our container's configuration and (where the inventory names one) the launch script."""
    recipe = recipes.cached(settings.recipe)
    out = {"server": Command(("sh", "-c", servers.server_script(recipe))),
           "container": ContainerInspect(settings.container, keep=tuple(kept(settings))),
           "cache": sh_with_fact(servers.mounted_cache_script(), CONTAINER_HF_CACHE, settings.container)}
    if settings.launch_script:
        out["script"] = File(settings.launch_script)
        out["script_caches"] = Command(("sh", "-c", servers.script_caches_script(settings.launch_script)))
    return out


def kept(settings) -> set:
    """The variables whose values the recipe judgement reads (the recipe's, its no-ops', its rules')."""
    return servers.kept_names(recipes.cached(settings.recipe))


def judge(r, settings) -> list:
    """Every finding of the node's launch against its recipe point, each once, with where it was read."""
    recipe = recipes.cached(settings.recipe)
    point = recipe.point(settings.concurrency)
    launches, unread, mem_total = _from_server(r, recipe)
    if not launches:
        found, why = _from_container(r, recipe, settings.container, mem_total)
        launches, unread = found, unread + why
    if not launches and settings.launch_script:
        try:
            launches = _from_script(r["script"].text(), settings, mem_total, _caches(r, "script_caches"))
        except (ReadingUnavailable, sandbox.SandboxError, judgement.NotJudged) as exc:
            return [error(f"launch script {settings.launch_script} (cluster.launch_script) not judged: {exc}",
                          remediation=NO_LAUNCH)]
    if not launches:
        return [error(f"the launch is not judged against recipe {recipe.name}: {'; '.join(unread)}; name the "
                      "script that starts the server in the inventory (cluster.launch_script: PATH)",
                      remediation=NO_LAUNCH, evidence={"not_read": unread})]
    out = []
    for where, resolved in launches:
        d = judgement.diff_point(recipe, point, resolved)
        found = verdicts(where, recipe, d)
        out += found
        if not found:
            aside = [w for w, items in (("no-ops", d.noops), ("deviations", d.deviations)) if items]
            out.append(passed(f"{where}: {judgement.IDENTICAL} of recipe {recipe.name} at "
                              f"{_point(point)}" + (f" ({' and '.join(aside)} aside)" if aside else "")
                              + "; the recipe's rules hold (§25, §30)"))
    return out


def verdicts(where: str, recipe, d: judgement.PointDiff) -> list:
    """The PointDiff's rows that matter as the gate's findings (judgement.gate_findings: the words `recipe diff`
    prints), each after where the launch was read; the subject is in the evidence."""
    return [Verdict(f.status, f"{where}: {f.message}",
                    remediation=RULE_CODES.get(f.rule, DIFFERENCE),
                    evidence={"source": where, "rule": f.rule, "subject": f.subject, **f.numbers})
            for f in judgement.gate_findings(recipe, d)]


def judge_wide_ep(recipe, point, where: str, env: dict, argv, ignore=(), elsewhere=()) -> list:
    """[(subject, Verdict)] of one wide-EP environment (the container's, or that of ranks sharing one) and, where
    ``argv`` is given, the node's launch command, against the inventory's recipe point (gfx1250, §16, §17): the
    rows of `recipe diff`. ``point`` carries the inventory's own overrides (launch-config's ``env``); ``ignore``:
    names no rule judges here; ``elsewhere``: names a wide-EP row judges (the A0 trio, deprecated variables, the
    MORI heap), never an `extra` here where the recipe does not name them - that row says what is wrong with
    them, with what the recipe cannot know (the node's stepping). Without a command (none read, or a second
    environment of the same node) the flags are not compared: the command is judged once per node, with its
    first environment."""
    if not argv:
        point = replace(point, args={})
    env = {k: judgement.NOT_READ if v is None else v for k, v in env.items() if k not in set(ignore)}
    resolved = servers.resolved(recipe, list(argv or ()), env, set(), None)
    resolved.own_env -= set(elsewhere)
    return [(v.evidence["subject"], v) for v in verdicts(where, recipe, judgement.diff_point(recipe, point, resolved))]


def _point(point) -> str:
    return "its one point" if point.concurrency is None else f"concurrency {point.concurrency}"


def _from_server(r, recipe) -> tuple:
    """([(where, Resolved)] of every model server running on the node, [why none was read], the node's MemTotal
    (read beside the servers: the launches read elsewhere are judged against this node's RAM too))."""
    try:
        found, mem_total = servers.parse(r["server"].output("the server reader"))
    except (ReadingUnavailable, ParseError) as exc:
        return [], [f"the running server not read ({exc})"], None
    if not found:
        return [], [servers.NO_SERVER], mem_total
    return [(f"server pid {pid}", servers.resolved(recipe, argv, env, cache, mem_total))
            for pid, argv, env, cache in found], [], mem_total


def _from_container(r, recipe, name: str, mem_total) -> tuple:
    """([(where, Resolved)] of our container's configured server command, [why it was not judged])."""
    try:
        record = r["container"].record
    except ReadingUnavailable as exc:
        return [], [f"no container configuration ({exc})"]
    if record is None:
        return [], [f"no container {name}"]
    if not record.get("launch"):
        return [], [f"container {name}'s command starts no model server"]
    env = {k: judgement.NOT_READ if v is None else v for k, v in (record.get("env") or {}).items()}
    resolved = servers.resolved(recipe, record["launch"], env, set(), mem_total)
    # before it runs, the container's HF cache is seen only through the mount that holds it, read on the node
    caches = _caches(r, "cache")
    resolved.launch.hf_cache = next(iter(caches.values())) if len(caches) == 1 else None
    return [(f"container {name} ({record.get('status') or 'created'}) command", resolved)], []


def _caches(r, name: str) -> dict:
    """{HF cache directory on the node: complete repo ids} of reading ``name``; {} where it was not read (no mount
    holds the cache, no launch script): the drafter rule then says it was not read (INFO), never a PASS. A garbled
    listing raises its ParseError: the launch check's ERROR."""
    try:
        return servers.parse_caches(r[name].output("the HF cache listing"))
    except (KeyError, ReadingUnavailable):
        return {}


def _from_script(text: str, settings, mem_total, caches: dict) -> list:
    """[(where, Resolved)] of each server the inventory's launch script starts, resolved in the sandbox here;
    ``caches``: the HF caches the script's paths name on the node, where each server's drafter is looked up."""
    with tempfile.TemporaryDirectory(prefix="k3doctor-launch-") as tmp:
        os.chmod(tmp, 0o755)  # as root the sandbox runs as nobody, who must read the copy
        path = os.path.join(tmp, os.path.basename(settings.launch_script))
        with open(path, "w") as fh:
            fh.write(text)
        os.chmod(path, 0o644)
        ran = sandbox.run(path, {"PATH": SCRIPT_PATH, "HOME": "/root"}, SCRIPT_TIMEOUT_S)
    found = judgement.resolved_from_script(ran)
    for resolved in found:
        resolved.launch.mem_total_bytes = mem_total
        resolved.launch.hf_cache = caches.get(resolved.cache_host)
    return [(f"launch script {settings.launch_script}, {resolved.label}", resolved) for resolved in found]
