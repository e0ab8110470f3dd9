"""``k3doctor merge``: node results carried by an existing engine, joined into one report.

Each node ran ``k3doctor node --json`` (k3doctor/fleet/node_mode.py); this joins those documents, runs the
cluster-scope judges over their readings exactly as ``check`` does (runner.judge_cluster, per rack),
and renders the usual report with the usual exit codes. Inputs, read line by line (formats):

- a node document on a line of its own (``k3doctor node --json`` output, ``-o`` files, ``srun`` output,
  concatenated files);
- ``HOST: {document}``: ClusterShell ``clush`` / ``pdsh`` line prefixes (not ``clush -b``, which folds hosts);
- Ansible's ad-hoc output (default callback): ``HOST | CHANGED | rc=0 >>`` (``FAILED | rc=N >>``)
  followed by that host's output, and ``HOST | UNREACHABLE! => {...}`` / ``HOST | FAILED! => {...}``.

Where a host is known (prefix or Ansible header), a missing or garbled document is an ERROR for that
node (the engine's own message as the reason). Input that cannot be attributed to a node, two
results for one node, a node the inventory does not have, or results taken with another inventory or
other ``--set`` values are bad input: :class:`MergeError` (one line, exit 3). A node of the inventory
with no result at all is an ERROR for every check there ("no result"); a document that lists a check as
run but holds no result for it is damaged: ERROR for that check, never a silent gap.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field, replace

from k3doctor import localfiles, platforms
from k3doctor.fleet.node_mode import SCHEMA, inventory_digest
from k3doctor.gather import snapshot
from k3doctor.inventory.types import Inventory, Node, Settings, SSHSettings
from k3doctor.judging.causes import explained
from k3doctor.judging.prerequisites import blocking_findings
from k3doctor.judging.runner import RunReport, judge_cluster, specs_of
from k3doctor.judging.unread import unread_results
from k3doctor.readings import Unavailable
from k3doctor.results import Result, Status, Unread, figure_from_dict

_ANSIBLE_OUTPUT = re.compile(r"^(\S+) \| ([A-Z]+!?) \| rc=(-?\d+) >>\s*$")  # minimal callback (ad-hoc default)
_ANSIBLE_ONELINE = re.compile(r"^(\S+) \| ([A-Z]+!?) \| rc=(-?\d+) \| \(stdout\) ?(.*)$")  # -o / oneline
_ANSIBLE_MODULE = re.compile(r"^(\S+) \| ([A-Z]+!?) => (.*)$")  # UNREACHABLE! / FAILED! with the module's JSON
_PREFIXED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.:@+-]*?): ?(.*)$")  # clush / pdsh: "host: line"
_ENGINE_NOISE = ("[WARNING]", "[DEPRECATION WARNING]", "[ERROR]")  # Ansible's own messages (2.19: on stdout)
_CLUSH_OWN = "clush: "  # "clush: ct13: exited with exit code 255"


class MergeError(ValueError):
    """Bad or mismatched inputs: one line, nothing judged (exit 3)."""


@dataclass
class NodeResult:
    """One node's document, or why there is none (``problem``) where the engine named the host."""

    node: str
    where: str  # file:line, for messages
    results: list = field(default_factory=list)
    readings: dict = field(default_factory=dict)  # spec -> reading (cluster checks' readings only)
    checks: tuple = ()
    inventory_sha256: str | None = None
    overrides: tuple = ()
    problem: str | None = None  # the node could not be read (its own error, the engine's, a garbled document)
    document: bool = False  # a node document (its inventory and --set values count), not the engine's word


def read_inputs(sources) -> list:
    """Every node result of ``sources`` (``(name, text)`` pairs), in input order."""
    found = []
    for name, text in sources:
        try:
            found += _parse(name, text)
        except RecursionError:  # json's decoder recurses per level: 100k brackets end here, not in a traceback
            raise MergeError(f"{name}: not a k3doctor node result (JSON nested too deeply)") from None
    return found


def _parse(source: str, text: str) -> list:
    whole = text.strip()
    if whole.startswith("{") and "\n" in whole:  # one pretty-printed document (e.g. through jq)
        try:
            return [_document(json.loads(whole), f"{source}:1")]
        except json.JSONDecodeError:
            pass
    out, lines = [], text.splitlines()
    answered, said = set(), {}  # hosts with a document; host -> (where, what the engine said about it)
    host, i, noise = None, 0, False  # the host of the last Ansible header; inside an Ansible message
    while i < len(lines):
        line, where = lines[i], f"{source}:{i + 1}"
        i += 1
        header = _ANSIBLE_OUTPUT.match(line) or _ANSIBLE_ONELINE.match(line)
        module = None if header else _ANSIBLE_MODULE.match(line)
        if line.startswith(_ENGINE_NOISE):  # Ansible's own message, up to the next host's header
            noise = True
            continue
        if noise and not (header or module):
            continue
        noise = False
        if not line.strip():
            continue
        if header or module:
            host = (header or module).group(1)
            status = (header or module).group(2).rstrip("!") + (f" rc={header.group(3)}" if header else "")
            said[host] = (where, status)
            if module:  # the module's JSON (indented over lines up to a closing brace, or on this line)
                body = [module.group(3)]
                while not _complete(body) and i < len(lines):
                    body.append(lines[i])
                    i += 1
                said[host] = (where, f"{status}: {_engine_message(body)}")
                continue
            if header.re is _ANSIBLE_OUTPUT:
                continue
            line = header.group(4)  # oneline: the host's stdout follows on this line
        prefixed = None
        if not line.startswith("{") and host is None:  # inside an Ansible block every line is that host's
            prefixed = _PREFIXED.match(line[len(_CLUSH_OWN):] if line.startswith(_CLUSH_OWN) else line)
        owner = prefixed.group(1) if prefixed else host
        body = (prefixed.group(2) if prefixed else line).lstrip()
        if body.startswith("{"):
            try:
                doc, _ = json.JSONDecoder().raw_decode(body)  # Ansible appends stderr to stdout's last line
            except json.JSONDecodeError as exc:
                if owner is None:
                    raise MergeError(f"{where}: not a k3doctor node result (garbled JSON: {exc})") from None
                out.append(NodeResult(owner, where, problem=f"its result is garbled (cut short?): {exc}"))
                answered.add(owner)
                continue
            out.append(_document(doc, where, engine_host=owner))
            answered.add(owner)
        elif owner is not None:  # the host's other output (stderr, a shell's or ssh's complaint): its last line
            first, status = said.get(owner, (where, ""))[0], said.get(owner, (where, ""))[1].split(": ", 1)[0]
            said[owner] = (first, f"{status}: {body[:300]}" if status and prefixed is None else body[:300])
        else:
            raise MergeError(f"{where}: not a k3doctor node result ({line[:60]!r}); see `k3doctor merge --help`")
    out += [NodeResult(h, where, problem=f"no k3doctor result ({what or 'no output'})")
            for h, (where, what) in said.items() if h not in answered]
    return out


def _complete(body: list) -> bool:
    try:
        json.loads("\n".join(body))
        return True
    except json.JSONDecodeError:
        return False


def _engine_message(body: list) -> str:
    try:
        doc = json.loads("\n".join(body))
    except json.JSONDecodeError:
        return " ".join(" ".join(body).split())[:300]
    if isinstance(doc, dict):
        doc = doc.get("msg") or doc.get("stderr") or doc.get("module_stderr") or "failed"
    return " ".join(str(doc).split())[:300]


def _document(doc, where: str, engine_host: str | None = None) -> NodeResult:
    """A node document checked field by field; a damaged one raises MergeError naming where it is."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        schema = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        what = f"not a k3doctor node result (schema {schema!r}, want {SCHEMA})"
        if engine_host is not None:
            return NodeResult(engine_host, where, problem=what)
        raise MergeError(f"{where}: {what}")
    try:
        name = doc["node"]
        if not isinstance(name, str) or not name:
            raise TypeError("node must be a name")
        overrides = doc.get("overrides", [])
        if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
            raise TypeError("overrides must be a list of CHECK.PARAM=VALUE texts")
        results = [_result(r, name) for r in doc["results"]]
        readings = snapshot.decode_readings(doc["readings"])
        return NodeResult(name, where, results=results, readings=readings, checks=tuple(doc["checks"]),
                          inventory_sha256=doc.get("inventory_sha256"), overrides=tuple(overrides),
                          problem=doc.get("error"), document=True)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        who = engine_host or doc.get("node")
        if isinstance(who, str) and who:
            return NodeResult(who, where, problem=f"its result is damaged: {type(exc).__name__}: {exc}")
        raise MergeError(f"{where}: damaged k3doctor node result: {type(exc).__name__}: {exc}") from None


def _result(data: dict, node: str) -> Result:
    if data["node"] != node:
        raise ValueError(f"a result of {node}'s document is about {data['node']!r}")
    gpu = data.get("gpu")
    if gpu is not None and not isinstance(gpu, int):
        raise TypeError(f"gpu must be a number, got {gpu!r}")
    return Result(check=str(data["check"]), node=node, status=Status(data["status"]), message=str(data["message"]),
                  gpu=gpu, evidence=data.get("evidence") or {}, remediation=data.get("remediation"),
                  figures=[figure_from_dict(f) for f in data.get("figures") or ()])


def read_sources(sources, stdin) -> list:
    """(name, text) of each RESULTS argument (``-``: ``stdin``); MergeError names one that cannot be read."""
    out = []
    for source in sources:
        try:
            if source == "-":
                out.append(("<stdin>", stdin.read()))
            else:
                out.append((source, localfiles.read_text(source)))
        except (OSError, UnicodeDecodeError) as exc:
            raise MergeError(f"cannot read {source}: {getattr(exc, 'strerror', None) or exc}") from None
    return out


def inventory_of(found: list, inv: Inventory | None) -> Inventory:
    """The inventory the results are judged with: the given one (every result must have been taken
    with it), or the nodes that answered, in input order, with the default settings."""
    digests = {r.inventory_sha256 for r in found if r.document}
    if inv is not None:
        mine = inventory_digest(inv)
        known = {n.name for n in inv.nodes}
        for r in found:
            if r.node not in known:
                raise MergeError(f"{r.where}: a result for {r.node!r}, which is not a node of {inv.path} (name each "
                                 "node as the inventory does: `k3doctor node --name NAME`)")
            if r.document and r.inventory_sha256 != mine:
                taken = f"another inventory (sha256 {r.inventory_sha256[:12]})" if r.inventory_sha256 else "none"
                raise MergeError(f"{r.where}: {r.node}'s result was taken with {taken}, not {inv.path} "
                                 f"(sha256 {mine[:12] if mine else None}): run `k3doctor node --nodes` with this file")
        return inv
    if digests - {None}:
        raise MergeError("the results were taken with an inventory (`k3doctor node --nodes`): pass the same file "
                         "to merge with --nodes")
    names = list(dict.fromkeys(r.node for r in found))
    if not names:
        raise MergeError("no node results in the input")
    return Inventory(path="<merged results>", ssh=SSHSettings(), cluster=Settings(),
                     nodes=[Node(name=n, host=None, settings=Settings(), transport="local") for n in names])


def one_each(found: list) -> dict:
    """node -> its one result; two for one node is bad input (which one would be right?)."""
    seen = {}
    for r in found:
        if r.node in seen:
            raise MergeError(f"two results for {r.node} ({seen[r.node].where} and {r.where}): "
                             "merge one run's results")
        seen[r.node] = r
    return seen


def common_overrides(found: list) -> tuple:
    """The ``--set`` values every node ran with (they must agree: cluster judges use them too)."""
    taken = {r.overrides for r in found if r.document}
    if len(taken) > 1:
        raise MergeError("the nodes ran with different --set values: " + " vs ".join(
            repr(list(t)) for t in sorted(taken)))
    return next(iter(taken), ())


def merge(inv: Inventory, checks: list, by_node: dict, started: float | None = None) -> RunReport:
    """One report from the nodes' own results and the cluster judges over their readings; what the
    direct ``check`` of the same rack reports (node order, messages, per-rack cluster results)."""
    started = time.monotonic() if started is None else started
    checks = platforms.applicable(checks, inv.cluster.platform)  # what `check` runs on this platform
    passive = [c for c in checks if c.interaction == "passive"]
    own = [c for c in passive if c.scope in ("node", "gpu")]
    results, readings, unreachable, specs_by_node, failed_by_node = [], {}, {}, {}, {}
    for node in inv.nodes:
        got = by_node.get(node.name)
        if got is None or got.problem:
            if got is None:
                why = Unread("NODE-NO-RESULT", "no result", "no result in the merged input",
                             "no result from this node in the merged input",
                             "run `k3doctor node --json` on it and merge its document too")
            else:
                why = Unread("NODE-NO-RESULT", "no result", "its engine reported no k3doctor result", got.problem,
                             "see the engine's output for the node, then run `k3doctor node --json` on it again")
            unreachable[node.name] = why
            results += unread_results(node.name, checks, why)
            continue
        specs_by_node[node.name] = specs_of(passive, node.settings)
        mine = {c.name: [r for r in got.results if r.check == c.name] for c in own}
        for chk in passive:  # in the order `check` puts a node's results
            if chk.name in mine and chk.name not in got.checks:
                mine[chk.name] = [Result(chk.name, node.name, Status.ERROR, "not run on this node (its `k3doctor "
                                         "node` ran other checks: --only/--skip, or an older k3doctor)")]
            elif chk.name in mine and not mine[chk.name]:  # every run check says something, if only PASS/SKIP
                mine[chk.name] = [Result(chk.name, node.name, Status.ERROR, "its document lists this check as run "
                                         "but holds no result for it (damaged or cut): nothing was judged")]
            if chk.name in mine:
                results += mine[chk.name]
            elif isinstance(specs_by_node[node.name][chk.name], Result):  # its reads could not be built here
                results.append(replace(specs_by_node[node.name][chk.name], node=node.name))
        failed_by_node[node.name] = {c.name: blocking_findings(c, mine[c.name]) for c in own}
        readings[node.name] = {spec: got.readings.get(spec, Unavailable(
            "not in this node's result (its `k3doctor node` ran other checks or another k3doctor)"))
            for specs in specs_by_node[node.name].values() if isinstance(specs, dict) for spec in specs.values()}
    cluster = [c for c in passive if c.scope == "cluster"]
    results += judge_cluster(inv, cluster, readings, specs_by_node, failed_by_node, {})
    return RunReport(results=explained(results), nodes=[n.name for n in inv.nodes],
                     duration_s=round(time.monotonic() - started, 3), unreachable=unreachable, readings=readings)
