"""What the engine will be started with (reference §13, §16-§18; §1/§2 on A0): our container's
environment, run options and launch command, the live environment of ATOM's ranks where they
already run, the data-plane interface and the ports the launch needs. Every rule is a row of a
table; a wrong value fails silently at launch (TCP fallback at ~4.5 GB/s, a ModelRunner
that dies while HTTP stays up, a rendezvous over the management port), so it is caught here.
The rows themselves (environment, run options, server arguments) are in
``k3doctor/rules/launch.py``; this file reads the node, applies them, and compares the
nodes with each other. With ``cluster.recipe`` declared, the recipe point is judged through the one
judgement `recipe diff` prints (k3doctor/rules/recipe_launch.py, issue 30): on gfx1250 beside the
wide-EP rows (:func:`_recipe_rows` says which names a fault both would name), elsewhere alone.

Values of variables that no rule names never leave the node: readings keep their names only.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace

from k3doctor.api import (
    Command,
    ContainerInspect,
    File,
    Param,
    ParseError,
    ReadingUnavailable,
    Status,
    Verdict,
    check,
    error,
    fail,
    passed,
    remediation,
    skip,
    warn,
)
from k3doctor.views import ifnames, network
from k3doctor.views.container import ROCJITSU_PREFIX, ContainerView, launch_options, parse_rank_envs, rank_envs
from k3doctor import platforms
from k3doctor.views.peers import majority
from k3doctor.rules import launch as launch_rules
from k3doctor.rules import recipe_launch
from k3doctor.rules.launch import (
    ARGS,
    DEPRECATED,
    ENV,
    IFNAME,
    INERT,
    LOG_LEVEL,
    PAIR,
    RUN_OPTIONS,
    TRIO,
    UNSET,
    judge_args,
    judge_env,
    judge_run_options,
    kept_names,
    selected,
    trio_rules,
)

CHECK = launch_rules.CHECK
SOCKET_IFNAMES = ifnames.SOCKET_IFNAMES
PARAMS = {
    "profile": "config-a",  # a gfx1250 recipe (name or alias); the inventory's cluster.recipe wins
    "env": {},  # single-variable overrides of the profile: NAME: value | "*" (any value) | null (must be unset)
    "ignore": [],  # variables no rule judges here (site-specific)
    "launch_script": "",  # a launch script inside the container whose server command is judged (§17)
    "rjprefix": ROCJITSU_PREFIX,  # A0: the translation prefix (§2)
    "shm_bytes": 128 * 2**30,  # --shm-size=128g (§13)
    "group_add": ["39", "105"],  # host-specific GIDs, presumably video/render (§13, §27 item 6)
    "model_mount": "/models",  # bind-mounted read-only (§12, §13)
    "master_port": 29500, "http_port": 8000,  # node 0 (§17); a port in the launch command wins
    "base_port": 29700,  # every node; the range's width is not documented (§27 item 11): a port range, not 2**63
    "base_port_width": Param(16, minimum=1, maximum=1024),
}

CONTAINER = remediation("LAUNCH-CONTAINER", "our container is missing, stopped or not the expected image", """
One container per node, named as the inventory says, from the expected image, running (§13):
`docker run -d --name k3ep16 --device /dev/kfd --device /dev/dri --network=host --ipc=host
--pid=host --group-add 39 --group-add 105 --cap-add=SYS_PTRACE --cap-add=SYS_ADMIN
--security-opt seccomp=unconfined --shm-size=128g -v /mnt/k3:/models:ro -v /root/k3ep16-logs:/logs
--entrypoint sleep rocm/fw-bringup:gfx1250-atom-20260918-ep8 infinity`; a stopped one: `docker start`.
A rebuilt container loses what was added with `docker cp` (rocjitsu prefix, PR #2380 files, §2, §14).
""")
PORTS = remediation("LAUNCH-PORT-BUSY", "a port the launch needs is taken", """
Node 0 needs the master port (--data-parallel-master-port, 29500) and the HTTP port (8000); every
node needs the base port range above --data-parallel-base-port (29700) (§17). Find the owner with
`ss -ltnp 'sport = :<port>'`; if it is a previous attempt of ours, stop it; if it is someone else's,
this node is not free (§3).
""")
DRIFT = remediation("LAUNCH-DRIFT", "nodes are not configured alike", """
All ranks must run the same image with the same environment (§13, §16): compare the named variable
or image on the odd node with the others and make them equal (the values of variables no rule
names are not read - only their presence is compared; look at them on the node).
""")


def _wide_ep(settings) -> bool:
    return platforms.get(settings.platform).wide_ep_launch


def _reads(settings) -> dict:
    if not _wide_ep(settings):  # the launch is the recipe's alone (§30), read from wherever the server is
        return recipe_launch.reads(settings) if settings.recipe else {}
    keep = kept_names(settings.param, settings) | (recipe_launch.kept(settings) if settings.recipe else set())
    return {"container": ContainerInspect(settings.container, keep=tuple(keep),
                                          launch_script=settings.param("launch_script") or None),
            "ranks": rank_envs(settings.container, keep),
            "links": Command(("ip", "-o", "link", "show")),
            "routes": Command(("ip", "-4", "route", "show", "table", "local")),
            "tcp": File("/proc/net/tcp"), "tcp6": File("/proc/net/tcp6"), "hostname": Command(ifnames.HOSTNAME_LOOKUP)}


# ----------------------------------------------------------------------------- per-node judgement

@dataclass
class Source:
    """One environment being judged: the container's, or that of ranks sharing one environment."""

    label: str
    env: dict


def env_sources(container: ContainerView, ranks) -> list:
    """The live ranks' environments where ATOM runs (what is in effect), else the container's."""
    if not ranks:
        return [Source(f"container {container.name}", container.env)]
    groups: dict = {}
    for rank in sorted(ranks, key=lambda r: (-1 if r.rank is None else r.rank, r.pid)):
        groups.setdefault(tuple(sorted(rank.env.items())), []).append(rank)
    return [Source("rank " + ", ".join(f"{r.title} (pid {r.pid})" for r in members), dict(key))
            for key, members in groups.items()]


def _int(flags: dict, flag: str, default: int) -> int:
    try:
        return int(flags.get(flag) or default)
    except ValueError:
        return default


def judge_ports(listeners: list, addresses: set, argv, first: bool, p) -> list:
    """§17: ports the launch binds are free on the nodes that need them (listeners on a wildcard or
    one of the node's own addresses block them)."""
    flags = launch_options(argv or ())
    base = _int(flags, "--data-parallel-base-port", p("base_port"))
    wanted = [(base + i, "--data-parallel-base-port range") for i in range(p("base_port_width"))]
    if first:
        wanted += [(_int(flags, "--data-parallel-master-port", p("master_port")), "--data-parallel-master-port"),
                   (_int(flags, "--port", p("http_port")), "HTTP (served by node 0)")]
    out = []
    for port, why in wanted:
        taken = network.blocking(listeners, port, addresses)
        if taken:
            out.append(fail(f"port {port} ({why}) is already taken on this node by a listener on "
                            f"{', '.join(f'{s.address}:{s.port}' for s in taken)}: the launch cannot bind it (§17)",
                            remediation=PORTS, evidence={"port": port, "listeners": [str(s.address) for s in taken]}))
    return out


@dataclass
class NodeFacts:
    """What the cross-node comparison needs of one node."""

    env: dict
    image_id: str | None
    launch: list | None
    named: set  # variables / flags already named on this node
    stepping: str | None = None
    nccl_selects: frozenset | None = None  # interfaces NCCL_SOCKET_IFNAME selects here (§29)


def judge_node(r, node, first: bool, p) -> tuple:
    """(verdicts, NodeFacts or None) for one node."""
    reading = r["container"]
    settings = node.settings
    if reading.record is None:
        return [fail(f"container {settings.container} does not exist on this node: nothing to launch in (§13)",
                     remediation=CONTAINER)], None
    c = ContainerView.from_record(reading.record)
    verdicts, named = [], set()
    if not c.running:
        verdicts.append(fail(f"container {c.name} is {c.status}, not running: start it (`docker start`; files added "
                             "with docker cp survive a stop, §13)", remediation=CONTAINER,
                             evidence={"status": c.status}))
    if settings.image and c.image != settings.image:
        verdicts.append(fail(f"container {c.name} runs image {c.image}, the inventory expects {settings.image} (§13)",
                             remediation=CONTAINER, evidence={"image": c.image, "expected": settings.image}))
    verdicts += judge_run_options(c, p)
    ranks = parse_rank_envs(r["ranks"].output()) if c.running else None
    sources = env_sources(c, ranks)
    links, routes = network.parse_links(r["links"].output()), network.parse_local_routes(r["routes"].output())
    label, recipe, point = selected(p("profile"), settings)
    rules = launch_rules.all_rules(p, settings, per_variable=not settings.recipe)
    launch, where = _launch(c, reading.script)
    if isinstance(launch, Verdict):
        verdicts.append(launch)
        launch = None
    for n, source in enumerate(sources):
        found = _recipe_rows(recipe, point, source, (launch, where) if n == 0 else (None, ""), p, rules) \
            if settings.recipe else []
        mine = {subject for subject, _ in found}
        skip_here = set(p("ignore")) | mine
        found += judge_env(source.env, rules, settings.stepping, label, skip_here)
        found += ifnames.judge_ifnames(source.env, links, routes, node.address, IFNAME, skip_here)
        for subject, v in found:
            named.add(subject)
            if subject not in mine:  # a recipe row says where it was read itself (the words of `recipe diff`)
                v.message = f"{source.label}: {v.message}"
                v.evidence = {"source": source.label, **v.evidence}
            verdicts.append(v)
    if launch:
        for flag, v in judge_args(launch, settings.gpus_per_node, sources[0].env):
            if flag in named:
                continue
            named.add(flag)
            v.message = f"{where}: {v.message}"
            verdicts.append(v)
    if not ranks:  # a running engine holds its own ports
        listeners = network.parse_proc_net_tcp(r["tcp"].text())  # raises when unreadable: never "free" unread
        if r["tcp6"].exists:
            listeners += network.parse_proc_net_tcp(r["tcp6"].text())
        own = network.own_addresses(routes) | {ipaddress.ip_address(node.address)}
        verdicts += judge_ports(listeners, own, launch, first, p)
    verdicts += judge_hostname(r, node)
    named |= set(p("ignore"))
    return verdicts, NodeFacts(env=sources[0].env, image_id=c.image_id, launch=launch, named=named,
                               stepping=settings.stepping,
                               nccl_selects=ifnames.prefix_selection(sources[0].env, links, p("ignore")))


def _recipe_rows(recipe, point, source: Source, command: tuple, p, rules) -> list:
    """[(subject, Verdict)]: with cluster.recipe declared, one environment and the node's command judged against
    the recipe point through the judgement `recipe diff` prints (k3doctor/recipes/judgement.py; issue 30), with the
    inventory's overrides (``env``, ``ignore``) as the point's own. A subject the recipe names is named once, by
    its recipe row: the wide-EP rows that say the same thing of the same variable or flag (the per-variable
    profile rows, a pair, the log level, an interface left unset, --max-model-len, --served-model-name) step
    aside, so `check` and `recipe diff` use one set of words. The wide-EP rows still speak where the recipe
    cannot: the node's routes (an interface that does not carry data_ip), its GPU count, its stepping's trio,
    pairs and deprecated variables the recipe does not name, run options, ports and the other nodes (§16-§18);
    a variable one of ``rules`` (or the MORI heap row) reads is theirs where the recipe does not name it, never
    the recipe's `extra` (A0's trio is required there, whatever a recipe says)."""
    launch, where = command
    want = launch_rules.expected_env(recipe, point, p("env"), p("ignore"))
    label = where if where.startswith(source.label) else ", ".join(filter(None, (source.label, where)))
    elsewhere = {name for rule in rules for name in rule.reads} | {launch_rules.MORI_HEAP}
    return recipe_launch.judge_wide_ep(recipe, replace(point, env=want), label, source.env, launch, p("ignore"),
                                       elsewhere)


def judge_hostname(r, node) -> list:
    """§29: `getent hosts $(hostname)` not on loopback; a lookup that was not taken is no PASS (ERROR)."""
    try:
        return ifnames.judge_hostname(r["hostname"].output("`getent hosts $(hostname)`"), node.address, IFNAME)
    except (ReadingUnavailable, ParseError) as exc:
        return [error(f"the node's hostname lookup was not read: {exc}")]


def _launch(c: ContainerView, script):
    """(launch argv or None or an ERROR/FAIL verdict, where it came from)."""
    if c.launch:
        return c.launch, f"container {c.name} command"
    if not script:
        return None, ""
    where = f"launch script {script['path']}"
    if script.get("error"):
        return fail(f"{where} named in the inventory: {script['error']} (§17)", remediation=ARGS), where
    if script.get("cut"):
        return error(f"{where} is larger than the 1 MiB read of it: cut off, its server command not judged"), where
    if not script.get("launch"):
        why = "no --data-parallel-size / atom.entrypoints command found"
        return error(f"{where} starts no model server ({why})"), where
    return script["launch"], where


# ----------------------------------------------------------------------------- cross-node judgement

_ABSENT = object()


def judge_env_drift(facts: dict) -> list:
    """Same variables with the same values on every node; an odd node is named with both values.
    Variables a stepping rule judges are left out where the nodes' declared steppings differ."""
    mixed = len({f.stepping for f in facts.values()}) > 1
    per_stepping = {n for rule in DEPRECATED + trio_rules(ROCJITSU_PREFIX) if rule.stepping for n in rule.reads}
    names = sorted({n for f in facts.values() for n in f.env} - (per_stepping if mixed else set()))
    out = []
    for name in names:
        values = {node: f.env.get(name, _ABSENT) for node, f in facts.items()}
        top, odd = majority(values)
        odd = [n for n in odd if name not in facts[n].named]
        if not odd:
            continue
        for node in odd:
            mine, others = _describe(values[node]), _describe(top)
            if top is None:  # no majority: one cluster finding
                groups = {_describe(v): sorted(n for n in values if values[n] == v) for v in set(values.values())}
                out.append(warn(f"{name} differs between nodes with no majority: " + "; ".join(
                    f"{v} on {', '.join(ns)}" for v, ns in groups.items()) + " (§16)", remediation=DRIFT,
                    evidence={"variable": name, **{n: _describe(v) for n, v in values.items()}}))
                break
            out.append(warn(f"{name} is {mine} here, {others} on the other nodes (§16: every rank the same "
                            "environment)", node=node, remediation=DRIFT,
                            evidence={"variable": name, "here": mine, "other nodes": others}))
    return out


def _describe(value) -> str:
    if value is _ABSENT:
        return UNSET
    if value is None:
        return "set (value not read: no rule names it)"
    return repr(value)


def judge_image_drift(facts: dict) -> list:
    top, odd = majority({n: f.image_id for n, f in facts.items()})
    return [fail(f"runs image id {facts[n].image_id}, the other nodes {top}: same image on all nodes (§13)", node=n,
                 remediation=DRIFT, evidence={"image_id": facts[n].image_id, "other nodes": top})
            for n in odd if top is not None]


def _without_rank(argv: list) -> tuple:
    flags = launch_options(argv)
    flags.pop("--data-parallel-rank", None)
    program = tuple(w for w in argv[:next((i for i, w in enumerate(argv) if w.startswith("-")), len(argv))])
    return program, flags


def judge_launch_drift(facts: dict) -> list:
    """§17: the same command on every node except --data-parallel-rank (flags already named are skipped)."""
    with_cmd = {n: f.launch for n, f in facts.items() if f.launch}
    if not with_cmd:
        return []
    out = []
    parsed = {n: _without_rank(argv) for n, argv in with_cmd.items()}
    top, odd = majority({n: program for n, (program, _) in parsed.items()})
    out += [fail(f"launch program is {' '.join(parsed[n][0])}, the other nodes run {' '.join(top)} (§17)", node=n,
                 remediation=ARGS) for n in odd if top is not None]
    flags = sorted({f for _, fl in parsed.values() for f in fl})
    for flag in flags:
        values = {n: fl.get(flag, _ABSENT) for n, (_, fl) in parsed.items()}
        top, odd = majority(values)
        for n in odd:
            if flag in facts[n].named:
                continue
            if top is None:
                out.append(fail(f"launch command {flag} differs between nodes with no majority: " + ", ".join(
                    f"{m} {_flag_value(v)}" for m, v in values.items()) + " (§17)", remediation=ARGS,
                    evidence={m: _flag_value(v) for m, v in values.items()}))
                break
            out.append(fail(f"launch command has {flag} {_flag_value(values[n])}, the other nodes {_flag_value(top)} "
                            "(§17: every node runs the same command except --data-parallel-rank)", node=n,
                            remediation=ARGS, evidence={flag: _flag_value(values[n]), "other nodes": _flag_value(top)}))
    return out


def judge_placement(facts: dict, addresses: dict, gpus: int) -> list:
    """§17, §18: --data-parallel-rank = gpus x the node's place in inventory order, and the master IP is
    node 0's data_ip; judged only when every node's command was read (a missing node shifts places)."""
    nodes, out = list(facts), []
    with_cmd = {n: f.launch for n, f in facts.items() if f.launch}
    if not with_cmd or len(with_cmd) != len(nodes):
        return out
    flags = launch_options(with_cmd[nodes[0]])
    if _int(flags, "--data-parallel-size", 0) != _int(flags, "--data-parallel-size-local", gpus) * len(nodes):
        return out  # not every node of the job was read (unreachable): places are unknown
    for place, n in enumerate(nodes):
        rank = launch_options(with_cmd[n]).get("--data-parallel-rank", UNSET)
        if rank != str(place * gpus):
            facts[n].named.add("--data-parallel-rank")
            out.append(fail(f"--data-parallel-rank is {rank}, node {place} in node order needs {place * gpus} "
                            f"(ranks {', '.join(str(i * gpus) for i in range(len(nodes)))}, §17)", node=n,
                            remediation=ARGS, evidence={"--data-parallel-rank": rank, "expected": place * gpus}))
    master = addresses[nodes[0]]
    for n in nodes:
        ip = launch_options(with_cmd[n]).get("--data-parallel-master-ip", UNSET)
        if ip != master and "--data-parallel-master-ip" not in facts[n].named:
            facts[n].named.add("--data-parallel-master-ip")
            out.append(fail(f"--data-parallel-master-ip is {ip}, must be node 0 ({nodes[0]})'s data-plane address "
                            f"{master} (§17, §18)", node=n, remediation=ARGS,
                            evidence={"--data-parallel-master-ip": ip, "node 0 data_ip": master}))
    return out


def _flag_value(value) -> str:
    if value is _ABSENT:
        return "absent"
    return "(no value)" if value is None else str(value)


@check(CHECK, title="container env, run options, launch command and ports as validated; alike on every node",
       scope="cluster", reads=_reads, params=PARAMS,
       remediation=(ENV, PAIR, INERT, LOG_LEVEL, TRIO, IFNAME, RUN_OPTIONS, PORTS, ARGS, DRIFT, CONTAINER,
                    *recipe_launch.CODES))
def launch_config(per_node, ctx):
    """§13, §16-§18, §2: the validated environment (per profile), pairs, deprecated and inert variables,
    the A0 translation trio, the data-plane interface, run options, free ports, and one launch command
    that differs only in --data-parallel-rank across nodes."""
    verdicts, facts = [], {}
    nodes = [n for n in ctx.nodes.values() if n.name in per_node]
    for place, node in enumerate(nodes):
        def p(name, node=node):
            return node.settings.param(ctx.check, name)
        if not _wide_ep(node.settings):
            verdicts += _recipe_only(per_node[node.name], node)
            continue
        try:
            mine, facts[node.name] = judge_node(per_node[node.name], node, place == 0, p)
        except (ReadingUnavailable, ParseError, ValueError) as exc:
            verdicts.append(error(f"could not judge the launch configuration: {exc}", node=node.name))
            continue
        for v in mine:
            v.node = node.name
        verdicts += mine or [passed(_summary(node, p, per_node[node.name]), node=node.name)]
    facts = {n: f for n, f in facts.items() if f is not None}
    gpus = ctx.settings.gpus_per_node
    addresses = {n.name: n.address for n in nodes if n.name in facts}
    drift = judge_placement(facts, addresses, gpus)  # first: it names the flags the command drift then skips
    drift += judge_env_drift(facts) + judge_image_drift(facts) + judge_launch_drift(facts) + \
        ifnames.fold_into_node_findings(verdicts, ifnames.judge_selection_counts(
            {n: f.nccl_selects for n, f in facts.items() if f.nccl_selects is not None}, IFNAME))
    if drift:  # a node that passed alone but is odd across nodes: its PASS goes
        odd = {v.node for v in drift}
        verdicts = [v for v in verdicts if not (v.status == Status.PASS and (v.node in odd or None in odd))]
    return verdicts + drift


def _recipe_only(r, node) -> list:
    """A platform whose launch is the recipe's alone (§30): the recipe judgement (rules/recipe_launch.py)."""
    if not node.settings.recipe:
        return [skip("no cluster.recipe: the launch has no recipe point to be judged against", node=node.name)]
    try:
        verdicts = recipe_launch.judge(r, node.settings)
    except (ReadingUnavailable, ParseError, ValueError) as exc:
        verdicts = [error(f"could not judge the launch against the recipe: {exc}")]
    for v in verdicts:
        v.node = node.name
    return verdicts


def _summary(node, p, r) -> str:
    ranks = parse_rank_envs(r["ranks"].output())
    where = f"{len(ranks)} running ATOM rank(s)' environment" if ranks else f"{node.settings.container} environment"
    ports = "ports held by the running engine" if ranks else "launch ports free"
    script = r["container"].script
    has_launch = r["container"].record.get("launch") or (script and script["launch"])
    launch = " and launch command as §17" if has_launch else ""
    label = selected(p("profile"), node.settings)[0]
    return (f"{where} as profile {label} (§16), socket interfaces carry {node.address} (§18), run options as "
            f"§13{launch}, {ports}")
