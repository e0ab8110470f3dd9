"""One judgement of a launch against a recipe point, for `recipe diff` and for `k3doctor check` alike
(reference §25, §30 "Mechanical dry-run diff per concurrency"): the same rows, the same arithmetic
(k3doctor/recipes/rules.py), the same words, so a rule fires in both or in neither (issue 30).

A launch is resolved first - from a launch script run contained (sandbox.py, launches.py), a running
server's argv and environment (servers.py) or a created container's configuration - into a
:class:`Resolved`; :func:`diff_point` compares it with a point: each difference once (missing, extra,
other value) with the recipe's why, no-ops and declared deviations set aside, the arithmetic rules applied
and shown with their numbers. `recipe diff` prints the PointDiff (diff.py); the gate turns the same rows
into FAIL/WARN findings with :func:`gate_findings`, with the same text the diff prints.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

from k3doctor import recipes
from k3doctor.views import env_rules
from k3doctor.views.container import hf_cache_dir, host_path, parse_flags
from k3doctor.recipes import launches, rules, sandbox
from k3doctor.redaction import REDACTED, redact_text
from k3doctor.results import Status, counts, status_of

SERVER_ENTRY_POINTS = launches.SERVER_MODULES
NOT_NAMED = "(not named)"
NOT_READ = "(set; value not read: no rule names it)"  # a running server: the value stayed on the node
# Variables the rules read besides the recipe's own (k3doctor/recipes/rules.py): judged by the rules, never an
# `extra` of a recipe that does not name them (the HF cache the drafter is looked up in, EVAL_ONLY, ...).
RULE_NAMES = {"EVAL_ONLY", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "HF_HOME", "HSA_OVERRIDE_GFX_VERSION",
              "OFFLOAD_STATE_CPU_SIZE", "LMCACHE_MAX_LOCAL_CPU_SIZE", "OFFLOAD_STATE", "OFFLOAD_GPU_STAGING_CHUNKS",
              "AITER_LOG_LEVEL"}


# Variables whose need depends on the node's library versions, which env-versions judges (k3doctor/views/env_rules.py
# rows "unset" before an edge: NCCL_MNNVL_ENABLE and NCCL_CUMEM_ENABLE are right unset on RCCL with #8444, required
# before it, §29, §0.2).
VERSIONED = {name for rule in env_rules.RULES if rule.test == "unset" for name in rule.variables}


def judged_elsewhere(name: str) -> bool:
    """Never an `extra` of a recipe that does not name it: a variable the recipe rules read (RULE_NAMES), or one
    whose need depends on the node's RCCL (VERSIONED) - a recipe cannot know the RCCL, and env-versions names that
    fault once."""
    return name in RULE_NAMES or name in VERSIONED


class NotJudged(Exception):
    """A launch that could not be resolved (the script starts no model server): one line."""


class ScriptNotRead(NotJudged):
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
    # the host path of the server's HF cache (its own where no container wrapper runs it, else through the
    # wrapper's mounts): where `check` reads the drafter on the node before launch; None where no mount holds it
    cache_host: str | None = None


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
        raise NotJudged(said)
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
        own = {k for k, v in env.items() if run.base_env.get(k) != v and not judged_elsewhere(k)}
        through = f" through {' / '.join(launch.wrappers)}" if launch.wrappers else ""
        label = f"server {n} of {len(servers)}{through}" if len(servers) > 1 else f"server{through}"
        cache = hf_cache_dir(env)
        out.append(Resolved(rules.Launch(flags=parse_args(launch.words), env=env,
                                         client_flags=parse_args(client.words) if client else None,
                                         client_env=_launch_env(client.env) if client else None),
                            own, client is not None, list(notes), label,
                            {k: w for k, w in launch.dropped.items() if k in call.env},
                            cache_host=cache if cache is None or launch.mounts is None else host_path(cache,
                                                                                                  launch.mounts)))
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
    attached: dict = field(default_factory=dict)  # name -> the rule finding (dict) shown on its difference

    @property
    def identical(self) -> bool:
        """Said only when nothing matters: "identical" always comes with exit 0."""
        return not self.matters

    @property
    def matters(self) -> bool:
        return bool(self.differences) or any(counts(r["status"]) for r in self.rules)


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
    findings, attached = [], {}
    for f in rules.apply(launch, recipe, point):
        # the first rule (RULES order: causes before consequences) is shown on the difference; a second one on the
        # same name is its own row (the gate lets it step aside: k3doctor/judging/causes.py)
        if f.subject in shown and f.subject not in attached and counts(f.status):
            shown[f.subject].rule = rule_text(asdict(f))
            attached[f.subject] = asdict(f)
            continue
        findings.append(asdict(f))
    return PointDiff(point.concurrency, differences, noops, deviations, findings, notes, attached)


# ----------------------------------------------------------------------------- the words both commands print

def difference_text(e: Entry) -> str:
    """A difference as `recipe diff` prints it after its kind, and `check` after the kind too."""
    where = " [client]" if e.where == "client" else ""
    return f"{e.name}{where}: recipe {e.expected}, launch {e.found}" + (f" - {e.why}" if e.why else "")


def rule_text(f: dict) -> str:
    """A rule's finding with its status, as both commands print it (the numbers are in its message)."""
    return f"{f['status']} {f['rule']}: {f['message']}"


# ----------------------------------------------------------------------------- the gate's findings

IDENTICAL = "identical on every server flag and every environment variable"
DIFFERENCE = "recipe-difference"  # a difference no arithmetic rule speaks to: its rule is the recipe's row


@dataclass
class GateFinding:
    """One row of a PointDiff that matters, as a result status: FAIL (the launch breaks or hangs) or WARN."""

    status: Status
    rule: str  # a rule of rules.RULES (dashes), or DIFFERENCE
    subject: str  # the variable or flag to fix
    message: str
    numbers: dict = field(default_factory=dict)


def gate_findings(recipe, d: PointDiff) -> list:
    """The PointDiff's rows that matter (exactly those that make `recipe diff` exit 1), each once: a difference
    carries the rule that speaks to its name (that rule's status and numbers), else it is a FAIL - a WARN where
    the recipe lists the name as tuning; a rule finding has the status its word maps to (results.status_of: BLOCK
    -> FAIL, WARN -> WARN). No-ops, deviations, INFO and PASS stay out of the verdict."""
    out = []
    for e in d.differences:
        ruling = d.attached.get(e.name)
        text = f"{e.kind} {difference_text(e)}" + (f"; {ruling['rule']}: {ruling['message']}" if ruling else "")
        if ruling:
            out.append(GateFinding(status_of(ruling["status"]), ruling["rule"], e.name, text, ruling["numbers"]))
        else:
            out.append(GateFinding(Status.WARN if e.name in recipe.tuning else Status.FAIL, DIFFERENCE, e.name, text))
    for f in d.rules:
        if counts(f["status"]):
            out.append(GateFinding(status_of(f["status"]), f["rule"], f["subject"], f"{f['rule']}: {f['message']}",
                                   f["numbers"]))
    return out


