"""The rows launch-config judges a launch by (reference §2, §13, §16, §17, §21, §22, §25): the
environment (deprecated and inert variables, pairs that only work together, the A0 translation trio,
the log level, and one row per variable of the recipe point the inventory selects), the container's
run options and the server's arguments. Most of them are the
recipe read as rules; the check in ``checks/launch.py`` reads the node and applies them.

Values of variables that no rule names never leave the node: :func:`kept_names` is the list of the
values that may be read.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from k3doctor import platforms, recipes
from k3doctor.views.container import ROCJITSU_HOOK, ROCJITSU_TRANSLATOR_STEM, ContainerView, launch_options
from k3doctor.registry import remediation
from k3doctor.results import Status, Verdict, fail

CHECK = "launch-config"
DATA_IF = recipes.DATA_IF  # must name an interface that carries the node's data_ip (§18)
UNSET = "(unset)"
# The validated sets (§16, §17, §26) are recipe files of the wide-EP platforms (their platform file says
# `wide_ep_launch: true`: gfx1250, k3doctor/recipes/gfx1250-*.yaml); `profile` names one.
WIDE_EP_RECIPES = tuple(r for name in platforms.names() if platforms.get(name).wide_ep_launch
                        for r in recipes.platform_recipes(name))
PROFILE_NAMES = tuple(r.aliases[0] if r.aliases else r.name for r in WIDE_EP_RECIPES)

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
ARGS = remediation("LAUNCH-ARGS", "launch command differs from the validated one", """
Every node runs the same command (§17) except --data-parallel-rank, which is 4 x the node's place
(0, 4, 8, 12 in node order); --data-parallel-master-ip is node 0's data-plane address (§18).
Do not set --max-model-len (ATOM uses 1,048,576; a small value silently truncates the reasoning
budget, §21). Keep --served-model-name moonshotai/Kimi-K3: clients must send exactly it (§22).
--data-parallel-size-local is the node's GPU count (4). With expert parallelism 32 (the EP32 lever, §17)
set MORI_SHMEM_HEAP_SIZE=16G or more on every rank: EP32 exhausted MORI's old 4 GiB heap (§29).
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
    if not spec and not platforms.get(recipe.platform).wide_ep_launch:
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


def all_rules(p, settings=None, per_variable: bool = True) -> tuple:
    """Every env rule in precedence order: the first rule that names a variable is the one reported.
    ``per_variable=False``: without the recipe point's own rows, which the recipe judgement says instead where the
    inventory declares cluster.recipe (checks/launch.py)."""
    _, recipe, point = selected(p("profile"), settings)
    want = expected_env(recipe, point, p("env"), p("ignore"))
    return DEPRECATED + PAIRS + trio_rules(p("rjprefix")) + LOG_RULES + (profile_rules(want, recipe)
                                                                         if per_variable else ())


def kept_names(p, settings=None) -> set:
    """Variables whose values the rules read: the only values that leave the node. An unknown profile
    reads every wide-EP recipe's names here; the judge then reports the bad parameter for the node."""
    try:
        rules = all_rules(p, settings)
    except ValueError:
        rules = all_rules(lambda name: PROFILE_NAMES[0] if name == "profile" else p(name))
        rules += tuple(rule for recipe in WIDE_EP_RECIPES for rule in profile_rules(recipe.point().env, recipe))
    return {name for rule in rules for name in rule.reads} | {MORI_HEAP}


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


MORI_HEAP = "MORI_SHMEM_HEAP_SIZE"
MORI_HEAP_MIN = 16 * 2**30  # ROCm/MAD PR #168 raised MORI's 4 GiB default to 16 GiB after EP32 ran out (§29)
_SIZE = re.compile(r"^\s*(\d{1,15})\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)


def expert_parallel_size(flags: dict) -> int:
    """The EP world size a launch asks for (§17): data-parallel size x tensor-parallel size with
    --enable-expert-parallel, else 0 (no expert parallelism)."""
    if "--enable-expert-parallel" not in flags:
        return 0
    try:
        return int(flags.get("--data-parallel-size") or 1) * int(
            flags.get("--tensor-parallel-size") or flags.get("-tp") or 1)
    except ValueError:
        return 0


def heap_too_small(value) -> bool:
    """MORI_SHMEM_HEAP_SIZE unset, not a size (bytes, or K/M/G/T binary units) or below 16 GiB."""
    m = _SIZE.match(value or "")
    if m is None:
        return True
    return int(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " ") < MORI_HEAP_MIN


# §17, §21, §22, §29: (flag or variable, broken(flags, gpus_per_node, env), status, message)
ARG_RULES = (
    ("--max-model-len", lambda f, g, e: "--max-model-len" in f, Status.FAIL,
     "--max-model-len {value} is set: ATOM would use 1,048,576; a small value silently truncates the reasoning "
     "budget (§17, §21)"),
    ("--served-model-name", lambda f, g, e: "--served-model-name" not in f, Status.WARN,
     "--served-model-name is missing: the server then answers to its model path and clients sending "
     "moonshotai/Kimi-K3 get 400/404 on every request (§22)"),
    ("--data-parallel-size-local", lambda f, g, e: f.get("--data-parallel-size-local") != str(g), Status.FAIL,
     "--data-parallel-size-local is {value}, the node has {gpus} GPUs (§12, §17)"),
    (MORI_HEAP, lambda f, g, e: expert_parallel_size(f) >= 32 and heap_too_small(e.get(MORI_HEAP)), Status.WARN,
     MORI_HEAP + "={value} with expert parallelism {ep} (the EP32 lever, §17): EP32 exhausted MORI's old 4 GiB "
     "symmetric heap (`Out of heap memory! ... Increase via MORI_SHMEM_HEAP_SIZE`); set it to 16G or more on every "
     "rank (ROCm/MAD PR #168, §29)"),
)


def judge_args(argv: list, gpus: int, env: dict | None = None) -> list:
    """[(flag or variable, Verdict)] for a launch command; ``env`` is the environment it runs with."""
    flags, env = launch_options(argv), env or {}

    def value(flag):
        return (flags if flag.startswith("-") else env).get(flag, UNSET)
    return [(flag, Verdict(status, message.format(value=value(flag), gpus=gpus, ep=expert_parallel_size(flags)),
                           remediation=ARGS, evidence={flag: value(flag)}))
            for flag, broken, status, message in ARG_RULES if broken(flags, gpus, env)]

