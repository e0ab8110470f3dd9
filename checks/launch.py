"""What the engine will be started with (reference §13, §16-§18; §1/§2 on A0): our container's
environment, run options and launch command, the live environment of ATOM's ranks where they
already run, the data-plane interface and the ports the launch needs. Every rule is a row of a
table below; a wrong value fails silently at launch (TCP fallback at ~4.5 GB/s, a ModelRunner
that dies while HTTP stays up, a rendezvous over the management port), so it is caught here.

Values of variables that no rule names never leave the node: readings keep their names only.
"""
from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from k3doctor import recipes
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
    warn,
)
from k3doctor.model import ifnames, network
from k3doctor.model.container import (
    ROCJITSU_HOOK,
    ROCJITSU_PREFIX,
    ROCJITSU_TRANSLATOR_STEM,
    ContainerView,
    parse_flags,
    parse_rank_envs,
    rank_envs,
)

CHECK = "launch-config"
DATA_IF = recipes.DATA_IF  # must name an interface that carries the node's data_ip (§18)
UNSET = "(unset)"
SOCKET_IFNAMES = ifnames.SOCKET_IFNAMES
# The validated sets (§16, §17, §26) are recipe files (k3doctor/recipes/gfx1250-*.yaml); `profile` names one.
PROFILE_NAMES = tuple(r.aliases[0] if r.aliases else r.name for r in recipes.platform_recipes("gfx1250"))
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
ENV = remediation("LAUNCH-ENV", "environment differs from the validated set", """
Every rank needs the validated set of §16 for the image (Config A / B, §17; the optimized stack's
tiers turn ATOM_UNFUSED_GATHER_KV_B_PROJ off, §26). Set the variable in the container (`docker run
-e`) or in the launch script for every rank, with exactly the value shown. A site that deviates on
purpose says so in the inventory: `checks: {launch-config: {profile: config-b, env: {NAME: value}}}`
(`"*"`: any value, null: must be unset) or `ignore: [NAME]`.
""")
PAIR = remediation("LAUNCH-ENV-PAIR", "variables that only work together are set apart", """
Some variables are pairs (§16): ATOM_USE_CUSTOM_ALL_GATHER=1 needs AITER_CUSTOM_AR_USE_SYMM_MEM=1,
or `assert not ca_comm.disabled` kills the ModelRunner while HTTP stays up - and ATOM main defaults
the first to 1, so set both explicitly. ATOM_MORI_V2_FUSED=1 is ignored without ATOM_MORI_V2=1.
ATOM_UNFUSED_GATHER_KV_B_PROJ=1 refuses the shuffled-KV layout (ATOM_USE_TRITON_MLA_SHUFFLE_KV=0),
which itself needs ATOM_USE_TRITON_MLA=1. ATOM_MEGA_COMBINE_WIRE fp8/fp4 needs AITER #5176, which
the 20260918 image predates. Set the partner named in the finding.
""")
INERT = remediation("LAUNCH-ENV-INERT", "a deprecated or inert variable is set", """
Remove it (§16, §23): MEGA_WIRE was renamed to MEGA_DISPATCH_WIRE and is no longer read - aiter
and ATOM raise at import when the two differ, equal values survive but still remove it.
MEGA_DISPATCH=flydsl is inert with an fp4/fp8 wire (ATOM hard-wires mori; flydsl needs wire bf16).
ATOM_TORCH_PROFILER_DIR is overridden downstream: use the CLI flag --torch-profiler-dir.
HOTSWAP=0 reproduces the `!` bug on A0 and is never a fallback (§1, §2).
ATOM_MLA_MAX_SPLIT_PER_BATCH and ATOM_K3_MOE_CHUNK are no longer needed.
""")
LOG_LEVEL = remediation("LAUNCH-AITER-LOG", "AITER_LOG_LEVEL unset", """
Set AITER_LOG_LEVEL=WARNING before starting the server (§16, §25): without it aiter's kernel logs
flood the server log (ATOM's start script defaults to INFO); InferenceX calls it required for a
3600 s replay.
""")
TRIO = remediation("ROCJITSU-ENV", "translation environment not set the way that works", """
On A0 all three, in this form (§2): LD_LIBRARY_PATH starting with /app/rjprefix/lib (first
position is what makes the populated store reachable), HSA_TOOLS_LIB=
/app/rjprefix/lib/libhsa_hotswap_rocjitsu.so (the hook; pointing it at
librocjitsu_gfx1250_b0_to_a0.so is silently ignored - no OnLoad), HSA_HOTSWAP_VERBOSE=1
(without it the success lines are never printed). Do not combine with the ROCm debug agent
(same HSA tool slot). launch-config reads them from the running ranks where ATOM already runs
(/proc/<pid>/environ, §16), else from the container.
""")
IFNAME = remediation("LAUNCH-IFNAME", "socket interface is not the data-plane NIC", """
MORI_SOCKET_IFNAME, NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME must all name the data-plane NIC -
the interface that carries the node's data_ip (enp1s0f1 on the reference rack, §4, §18). A wrong
or missing interface sends the rendezvous over the management port, or hangs it. Check with
`ip -o -4 addr show dev <name>` on the node.
""")
RUN_OPTIONS = remediation("LAUNCH-RUN-OPTIONS", "container run options differ from the validated run", """
Recreate the container with the validated flags (§13): --network=host (ranks address each other
by the data-plane IP), --ipc=host (/dev/shm shared with the host), --pid=host (the ranks'
environment is read from the host, §16), --device /dev/kfd --device /dev/dri, --shm-size=128g,
--cap-add=SYS_PTRACE --cap-add=SYS_ADMIN, --security-opt seccomp=unconfined, --group-add 39
--group-add 105 (host-specific GIDs, §27), -v /mnt/k3:/models:ro. Run options cannot be changed
on an existing container: `docker rm` it and run it again, then re-copy the rocjitsu prefix and
PR #2380 files (§2, §14).
""")
PORTS = remediation("LAUNCH-PORT-BUSY", "a port the launch needs is taken", """
Node 0 needs the master port (--data-parallel-master-port, 29500) and the HTTP port (8000); every
node needs the base port range above --data-parallel-base-port (29700) (§17). Find the owner with
`ss -ltnp 'sport = :<port>'`; if it is a previous attempt of ours, stop it; if it is someone else's,
this node is not free (§3).
""")
ARGS = remediation("LAUNCH-ARGS", "launch command differs from the validated one", """
Every node runs the same command (§17) except --data-parallel-rank, which is 4 x the node's place
(0, 4, 8, 12 in node order); --data-parallel-master-ip is node 0's data-plane address (§18).
Do not set --max-model-len (ATOM uses 1,048,576; a small value silently truncates the reasoning
budget, §21). Keep --served-model-name moonshotai/Kimi-K3: clients must send exactly it (§22).
--data-parallel-size-local is the node's GPU count (4).
""")
DRIFT = remediation("LAUNCH-DRIFT", "nodes are not configured alike", """
All ranks must run the same image with the same environment (§13, §16): compare the named variable
or image on the odd node with the others and make them equal (the values of variables no rule
names are not read - only their presence is compared; look at them on the node).
""")


@dataclass(frozen=True)
class EnvRule:
    """One environment rule: ``broken(env)`` names a fault of ``subject`` (the variable to fix).

    ``reads`` lists every variable whose value the rule needs; those are the values kept on the
    node. ``message`` is formatted with those values (``(unset)`` where absent) and the params."""

    subject: str
    reads: tuple
    broken: Callable[[dict], bool]
    status: Status
    message: str
    remediation: str
    stepping: str | None = None  # only on silicon declared with this stepping
    profiles: tuple | None = None  # only under these profiles


def _is(name, *values):
    return lambda env: env.get(name) in values


DEPRECATED = (  # §16 "Deprecated / inert", §23, §1
    EnvRule("MEGA_WIRE", ("MEGA_WIRE", "MEGA_DISPATCH_WIRE"),
            lambda e: "MEGA_WIRE" in e and e["MEGA_WIRE"] != e.get("MEGA_DISPATCH_WIRE"), Status.FAIL,
            "MEGA_WIRE={MEGA_WIRE} differs from MEGA_DISPATCH_WIRE={MEGA_DISPATCH_WIRE}: aiter and ATOM raise "
            "`MEGA_WIRE was renamed to MEGA_DISPATCH_WIRE` at import; remove MEGA_WIRE (§16, §0.2)", INERT),
    EnvRule("MEGA_WIRE", ("MEGA_WIRE",), lambda e: "MEGA_WIRE" in e, Status.WARN,
            "MEGA_WIRE={MEGA_WIRE} is still exported beside MEGA_DISPATCH_WIRE: renamed and no longer read; remove it "
            "(§16, §0.2)", INERT),
    EnvRule("MEGA_DISPATCH", ("MEGA_DISPATCH", "MEGA_DISPATCH_WIRE"),
            lambda e: e.get("MEGA_DISPATCH") == "flydsl" and e.get("MEGA_DISPATCH_WIRE") in ("fp4", "fp8"), Status.WARN,
            "MEGA_DISPATCH=flydsl is inert with MEGA_DISPATCH_WIRE={MEGA_DISPATCH_WIRE}: ATOM hard-wires mori for "
            "quantizing wires (flydsl needs wire bf16, 4x the payload) (§16)", INERT),
    EnvRule("ATOM_TORCH_PROFILER_DIR", ("ATOM_TORCH_PROFILER_DIR",), lambda e: "ATOM_TORCH_PROFILER_DIR" in e,
            Status.WARN, "ATOM_TORCH_PROFILER_DIR={ATOM_TORCH_PROFILER_DIR} is ignored (overridden downstream): the "
            "profile directory stays empty while /start_profile answers 200; use --torch-profiler-dir (§23)", INERT),
    EnvRule("HOTSWAP", ("HOTSWAP",), _is("HOTSWAP", "0"), Status.FAIL,
            "HOTSWAP=0 on A0 silicon: no translation, every token `!` with HTTP 200; never a fallback (§1, §2)",
            INERT, stepping="A0"),
    EnvRule("ATOM_MLA_MAX_SPLIT_PER_BATCH", ("ATOM_MLA_MAX_SPLIT_PER_BATCH",),
            lambda e: "ATOM_MLA_MAX_SPLIT_PER_BATCH" in e, Status.WARN,
            "ATOM_MLA_MAX_SPLIT_PER_BATCH={ATOM_MLA_MAX_SPLIT_PER_BATCH} was dropped as redundant; remove it (§16)",
            INERT),
    EnvRule("ATOM_K3_MOE_CHUNK", ("ATOM_K3_MOE_CHUNK",), lambda e: "ATOM_K3_MOE_CHUNK" in e, Status.WARN,
            "ATOM_K3_MOE_CHUNK={ATOM_K3_MOE_CHUNK} is no longer needed (the real bug was an aiter scan that dropped "
            "experts past 512); remove it (§16)", INERT),
)
PAIRS = (  # §16 "Must be set together"
    EnvRule("AITER_CUSTOM_AR_USE_SYMM_MEM", ("ATOM_USE_CUSTOM_ALL_GATHER", "AITER_CUSTOM_AR_USE_SYMM_MEM"),
            lambda e: e.get("ATOM_USE_CUSTOM_ALL_GATHER", "1") == "1" and e.get("AITER_CUSTOM_AR_USE_SYMM_MEM") != "1",
            Status.FAIL, "ATOM_USE_CUSTOM_ALL_GATHER={ATOM_USE_CUSTOM_ALL_GATHER} (ATOM main defaults it to 1) without "
            "AITER_CUSTOM_AR_USE_SYMM_MEM=1 (it is {AITER_CUSTOM_AR_USE_SYMM_MEM}): `assert not ca_comm.disabled` "
            "kills the ModelRunner while HTTP stays up (§16)", PAIR),
    EnvRule("ATOM_MORI_V2", ("ATOM_MORI_V2_FUSED", "ATOM_MORI_V2"),
            lambda e: e.get("ATOM_MORI_V2_FUSED") == "1" and e.get("ATOM_MORI_V2") != "1", Status.FAIL,
            "ATOM_MORI_V2_FUSED=1 is ignored without ATOM_MORI_V2=1 (it is {ATOM_MORI_V2}) (§16)", PAIR),
    EnvRule("ATOM_USE_TRITON_MLA_SHUFFLE_KV", ("ATOM_UNFUSED_GATHER_KV_B_PROJ", "ATOM_USE_TRITON_MLA_SHUFFLE_KV"),
            lambda e: e.get("ATOM_UNFUSED_GATHER_KV_B_PROJ") == "1"
            and e.get("ATOM_USE_TRITON_MLA_SHUFFLE_KV", "0") != "0", Status.FAIL,
            "ATOM_UNFUSED_GATHER_KV_B_PROJ=1 with ATOM_USE_TRITON_MLA_SHUFFLE_KV={ATOM_USE_TRITON_MLA_SHUFFLE_KV}: the "
            "unfused fallback refuses the shuffled-KV layout (NotImplementedError at construction); set it 0 "
            "(§14, §16)",
            PAIR),
    EnvRule("ATOM_USE_TRITON_MLA", ("ATOM_USE_TRITON_MLA_SHUFFLE_KV", "ATOM_USE_TRITON_MLA"),
            lambda e: e.get("ATOM_USE_TRITON_MLA_SHUFFLE_KV") == "1" and e.get("ATOM_USE_TRITON_MLA") != "1",
            Status.FAIL, "ATOM_USE_TRITON_MLA_SHUFFLE_KV=1 requires ATOM_USE_TRITON_MLA=1 "
            "(it is {ATOM_USE_TRITON_MLA}) (§16)", PAIR),
    EnvRule("ATOM_MEGA_COMBINE_WIRE", ("ATOM_MEGA_COMBINE_WIRE",), _is("ATOM_MEGA_COMBINE_WIRE", "fp4", "fp8"),
            Status.FAIL, "ATOM_MEGA_COMBINE_WIRE={ATOM_MEGA_COMBINE_WIRE} requires AITER #5176, which the 20260918 "
            "image predates (§16)", PAIR, profiles=("config-a", "config-b")),
)
LOG_RULES = (
    EnvRule("AITER_LOG_LEVEL", ("AITER_LOG_LEVEL",), lambda e: not e.get("AITER_LOG_LEVEL"), Status.WARN,
            "AITER_LOG_LEVEL is unset: aiter's kernel logs flood the server log (ATOM's start script defaults to "
            "INFO); set WARNING (§16, §25)", LOG_LEVEL),
)


def trio_rules(prefix: str) -> tuple:
    """§2: on A0 all three translation variables, in the one form that works."""
    lib, hook = f"{prefix.rstrip('/')}/lib", f"{prefix.rstrip('/')}/{ROCJITSU_HOOK}"
    return (
        EnvRule("LD_LIBRARY_PATH", ("LD_LIBRARY_PATH",),
                lambda e: (e.get("LD_LIBRARY_PATH") or "").split(":")[0].rstrip("/") != lib, Status.FAIL,
                f"LD_LIBRARY_PATH={{LD_LIBRARY_PATH}} must start with {lib} (first position makes the populated store "
                "reachable, §2)", TRIO, stepping="A0"),
        EnvRule("HSA_TOOLS_LIB", ("HSA_TOOLS_LIB",),
                lambda e: ROCJITSU_TRANSLATOR_STEM in (e.get("HSA_TOOLS_LIB") or "").rsplit("/", 1)[-1], Status.FAIL,
                f"HSA_TOOLS_LIB={{HSA_TOOLS_LIB}} points at the translator: silently ignored (it has no OnLoad); "
                f"it must be the hook {hook} (§2)", TRIO, stepping="A0"),
        EnvRule("HSA_TOOLS_LIB", ("HSA_TOOLS_LIB",), lambda e: e.get("HSA_TOOLS_LIB") != hook, Status.FAIL,
                f"HSA_TOOLS_LIB={{HSA_TOOLS_LIB}}, must be {hook}: without the hook nothing is translated and every "
                "token is `!` (§2)", TRIO, stepping="A0"),
        EnvRule("HSA_HOTSWAP_VERBOSE", ("HSA_HOTSWAP_VERBOSE",), lambda e: e.get("HSA_HOTSWAP_VERBOSE") != "1",
                Status.WARN, "HSA_HOTSWAP_VERBOSE={HSA_HOTSWAP_VERBOSE}, set 1: without it the translation success "
                "lines are never printed, so the run cannot be proven (§2)", TRIO, stepping="A0"),
    )


def selected(profile: str, settings=None):
    """(label, recipe point) judged: the inventory's cluster.recipe (and cluster.concurrency) where given,
    else the `profile` parameter, an alias of a gfx1250 recipe file (§16, §17, §26)."""
    spec = getattr(settings, "recipe", None)
    try:
        recipe = recipes.cached(spec or profile)
    except recipes.RecipeError:
        if spec:
            raise ValueError(f"cluster.recipe {spec}: cannot be read") from None
        raise ValueError(f"{CHECK}.profile must be one of {', '.join(PROFILE_NAMES)}, not {profile!r}") from None
    if not spec and recipe.platform != "gfx1250":
        raise ValueError(f"{CHECK}.profile must be one of {', '.join(PROFILE_NAMES)}, not {profile!r}")
    label = recipe.aliases[0] if recipe.aliases else recipe.name
    return label, recipe, recipe.point(getattr(settings, "concurrency", None))


def expected_env(recipe, point, overrides: dict, ignore) -> dict:
    """The recipe point's variables with the inventory's single-variable overrides applied."""
    want = {**point.env, **{k: (None if v is None else str(v)) for k, v in (overrides or {}).items()}}
    return {k: v for k, v in want.items() if k not in set(ignore or ())}


def profile_rules(want: dict, recipe) -> tuple:
    """One rule per expected variable (§16): present with the value, present at all, or unset."""
    rules = []
    for name, value in want.items():
        status = Status.WARN if name in recipe.tuning else Status.FAIL
        why = f" ({recipe.why[name]})" if name in recipe.why else ""
        if value is None:
            rules.append(EnvRule(name, (name,), lambda e, n=name: n in e, Status.WARN,
                                 f"{name}={{{name}}} is set; this profile wants it unset{why}", ENV))
        elif value in (recipes.ANY, DATA_IF):
            rules.append(EnvRule(name, (name,), lambda e, n=name: n not in e, status,
                                 f"{name} is unset (required{why})" + (
                                     ": the library then picks an interface itself, maybe the management NIC (§18)"
                                     if value == DATA_IF else ""), IFNAME if value == DATA_IF else ENV))
        else:
            rules.append(EnvRule(name, (name,), lambda e, n=name, v=value: e.get(n) != v, status,
                                 f"{name} is {{{name}}}, validated value {value}{why} (§16)", ENV))
    return tuple(rules)


def _all_rules(p, settings=None) -> tuple:
    """Every env rule in precedence order: the first rule that names a variable is the one reported."""
    _, recipe, point = selected(p("profile"), settings)
    want = expected_env(recipe, point, p("env"), p("ignore"))
    return DEPRECATED + PAIRS + trio_rules(p("rjprefix")) + LOG_RULES + profile_rules(want, recipe)


def kept_names(p, settings=None) -> set:
    """Variables whose values the rules read: the only values that leave the node. An unknown profile
    reads every gfx1250 recipe's names here; the judge then reports the bad parameter for the node."""
    try:
        rules = _all_rules(p, settings)
    except ValueError:
        rules = _all_rules(lambda name: PROFILE_NAMES[0] if name == "profile" else p(name))
        rules += tuple(rule for recipe in recipes.platform_recipes("gfx1250")
                       for rule in profile_rules(recipe.point().env, recipe))
    return {name for rule in rules for name in rule.reads}


def _reads(settings) -> dict:
    keep = kept_names(settings.param, settings)
    return {"container": ContainerInspect(settings.container, keep=tuple(keep),
                                          launch_script=settings.param("launch_script") or None),
            "ranks": rank_envs(settings.container, keep),
            "links": Command(("ip", "-o", "link", "show")),
            "routes": Command(("ip", "-4", "route", "show", "table", "local")),
            "tcp": File("/proc/net/tcp"), "tcp6": File("/proc/net/tcp6")}


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


def _shown(env: dict, name: str) -> str:
    if name not in env:
        return UNSET
    return "(value not read)" if env[name] is None else env[name]


def judge_env(env: dict, rules, stepping, profile: str, ignore=()) -> list:
    """[(subject, Verdict)] for one environment; a variable is named by its first broken rule only."""
    named, out = set(), []
    for rule in rules:
        if rule.subject in named or rule.subject in ignore:
            continue
        if (rule.stepping and rule.stepping != stepping) or (rule.profiles and profile not in rule.profiles):
            continue
        if rule.broken(env):
            named.add(rule.subject)
            values = {n: _shown(env, n) for n in rule.reads}
            out.append((rule.subject, Verdict(rule.status, rule.message.format(**values), remediation=rule.remediation,
                                              evidence={**values, "profile": profile})))
    return out


def _caps(values) -> set:
    return {str(v).upper().removeprefix("CAP_") for v in values or ()}


# §13: (what the finding says, ok(container, params), what was read)
RUN_RULES = (
    ("--network=host (ranks address each other by the node's data-plane IP, §18)",
     lambda c, p: c.host.get("NetworkMode") == "host", lambda c: c.host.get("NetworkMode")),
    ("--ipc=host (RCCL and mori share the host's /dev/shm, §15)",
     lambda c, p: c.host.get("IpcMode") == "host", lambda c: c.host.get("IpcMode")),
    ("--pid=host (the ranks' live environment is read from the host, §16)",
     lambda c, p: c.host.get("PidMode") == "host", lambda c: c.host.get("PidMode")),
    ("--device /dev/kfd", lambda c, p: c.host.get("Privileged") or "/dev/kfd" in c.host.get("Devices", []),
     lambda c: c.host.get("Devices")),
    ("--device /dev/dri", lambda c, p: c.host.get("Privileged") or any(
        d == "/dev/dri" or str(d).startswith("/dev/dri/") for d in c.host.get("Devices", [])),
     lambda c: c.host.get("Devices")),
    ("--shm-size=128g", lambda c, p: (c.host.get("ShmSize") or 0) >= p("shm_bytes"), lambda c: c.host.get("ShmSize")),
    ("--cap-add=SYS_PTRACE --cap-add=SYS_ADMIN",
     lambda c, p: c.host.get("Privileged") or _caps(c.host.get("CapAdd")) >= {"SYS_PTRACE", "SYS_ADMIN"},
     lambda c: c.host.get("CapAdd")),
    ("--security-opt seccomp=unconfined", lambda c, p: c.host.get("Privileged") or any(
        str(o).replace(":", "=") == "seccomp=unconfined" for o in c.host.get("SecurityOpt") or ()),
     lambda c: c.host.get("SecurityOpt")),
    ("--group-add 39 --group-add 105 (host-specific GIDs, §27)",
     lambda c, p: {str(g) for g in c.host.get("GroupAdd") or ()} >= {str(g) for g in p("group_add")},
     lambda c: c.host.get("GroupAdd")),
    ("the model bind-mounted read-only (-v /mnt/k3:/models:ro, §12)",
     lambda c, p: any(m["destination"] == p("model_mount") and m["rw"] is False for m in c.mounts),
     lambda c: [f"{m['source']}:{m['destination']}:{'rw' if m['rw'] else 'ro'}" for m in c.mounts]),
)


def judge_run_options(c: ContainerView, p) -> list:
    return [fail(f"container {c.name} runs without {what} (§13)", remediation=RUN_OPTIONS,
                 evidence={"read": read(c)}) for what, ok, read in RUN_RULES if not ok(c, p)]


# §17, §21, §22: (flag, broken(flags, gpus_per_node), status, message)
ARG_RULES = (
    ("--max-model-len", lambda f, g: "--max-model-len" in f, Status.FAIL,
     "--max-model-len {value} is set: ATOM would use 1,048,576; a small value silently truncates the reasoning "
     "budget (§17, §21)"),
    ("--served-model-name", lambda f, g: "--served-model-name" not in f, Status.WARN,
     "--served-model-name is missing: the server then answers to its model path and clients sending "
     "moonshotai/Kimi-K3 get 400/404 on every request (§22)"),
    ("--data-parallel-size-local", lambda f, g: f.get("--data-parallel-size-local") != str(g), Status.FAIL,
     "--data-parallel-size-local is {value}, the node has {gpus} GPUs (§12, §17)"),
)


def judge_args(argv: list, gpus: int) -> list:
    flags = parse_flags(argv)
    return [(flag, Verdict(status, message.format(value=flags.get(flag, UNSET), gpus=gpus), remediation=ARGS,
                           evidence={flag: flags.get(flag, UNSET)}))
            for flag, broken, status, message in ARG_RULES if broken(flags, gpus)]


def _int(flags: dict, flag: str, default: int) -> int:
    try:
        return int(flags.get(flag) or default)
    except ValueError:
        return default


def judge_ports(listeners: list, addresses: set, argv, first: bool, p) -> list:
    """§17: ports the launch binds are free on the nodes that need them (listeners on a wildcard or
    one of the node's own addresses block them)."""
    flags = parse_flags(argv or ())
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
    rules = _all_rules(p, settings)
    label = selected(p("profile"), settings)[0]
    for source in sources:
        found = judge_env(source.env, rules, settings.stepping, label, set(p("ignore")))
        found += ifnames.judge_ifnames(source.env, links, routes, node.address, IFNAME, set(p("ignore")))
        for subject, v in found:
            named.add(subject)
            v.message = f"{source.label}: {v.message}"
            v.evidence = {"source": source.label, **v.evidence}
            verdicts.append(v)
    launch, where = _launch(c, reading.script)
    if isinstance(launch, Verdict):
        verdicts.append(launch)
        launch = None
    if launch:
        for flag, v in judge_args(launch, settings.gpus_per_node):
            named.add(flag)
            v.message = f"{where}: {v.message}"
            verdicts.append(v)
    if not ranks:  # a running engine holds its own ports
        listeners = network.parse_proc_net_tcp(r["tcp"].text())  # raises when unreadable: never "free" unread
        if r["tcp6"].exists:
            listeners += network.parse_proc_net_tcp(r["tcp6"].text())
        own = network.own_addresses(routes) | {ipaddress.ip_address(node.address)}
        verdicts += judge_ports(listeners, own, launch, first, p)
    named |= set(p("ignore"))
    return verdicts, NodeFacts(env=sources[0].env, image_id=c.image_id, launch=launch, named=named,
                               stepping=settings.stepping,
                               nccl_selects=ifnames.prefix_selection(sources[0].env, links, p("ignore")))


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

def _odd(values: dict):
    """(majority value, [odd nodes]) for {node: value}; (None, []) when all agree or there is no majority."""
    counts = Counter(values.values())
    if len(counts) < 2:
        return None, []
    (top, n), (_, second) = counts.most_common(2)
    if n == second:
        return None, sorted(values)
    return top, [node for node, v in values.items() if v != top]


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
        top, odd = _odd(values)
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
    top, odd = _odd({n: f.image_id for n, f in facts.items()})
    return [fail(f"runs image id {facts[n].image_id}, the other nodes {top}: same image on all nodes (§13)", node=n,
                 remediation=DRIFT, evidence={"image_id": facts[n].image_id, "other nodes": top})
            for n in odd if top is not None]


def _without_rank(argv: list) -> tuple:
    flags = parse_flags(argv)
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
    top, odd = _odd({n: program for n, (program, _) in parsed.items()})
    out += [fail(f"launch program is {' '.join(parsed[n][0])}, the other nodes run {' '.join(top)} (§17)", node=n,
                 remediation=ARGS) for n in odd if top is not None]
    flags = sorted({f for _, fl in parsed.values() for f in fl})
    for flag in flags:
        values = {n: fl.get(flag, _ABSENT) for n, (_, fl) in parsed.items()}
        top, odd = _odd(values)
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
    flags = parse_flags(with_cmd[nodes[0]])
    if _int(flags, "--data-parallel-size", 0) != _int(flags, "--data-parallel-size-local", gpus) * len(nodes):
        return out  # not every node of the job was read (unreachable): places are unknown
    for place, n in enumerate(nodes):
        rank = parse_flags(with_cmd[n]).get("--data-parallel-rank", UNSET)
        if rank != str(place * gpus):
            facts[n].named.add("--data-parallel-rank")
            out.append(fail(f"--data-parallel-rank is {rank}, node {place} in node order needs {place * gpus} "
                            f"(ranks {', '.join(str(i * gpus) for i in range(len(nodes)))}, §17)", node=n,
                            remediation=ARGS, evidence={"--data-parallel-rank": rank, "expected": place * gpus}))
    master = addresses[nodes[0]]
    for n in nodes:
        ip = parse_flags(with_cmd[n]).get("--data-parallel-master-ip", UNSET)
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
       remediation=(ENV, PAIR, INERT, LOG_LEVEL, TRIO, IFNAME, RUN_OPTIONS, PORTS, ARGS, DRIFT, CONTAINER))
def launch_config(per_node, ctx):
    """§13, §16-§18, §2: the validated environment (per profile), pairs, deprecated and inert variables,
    the A0 translation trio, the data-plane interface, run options, free ports, and one launch command
    that differs only in --data-parallel-rank across nodes."""
    verdicts, facts = [], {}
    nodes = [n for n in ctx.nodes.values() if n.name in per_node]
    for place, node in enumerate(nodes):
        def p(name, node=node):
            return node.settings.param(ctx.check, name)
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
