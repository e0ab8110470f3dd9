"""Environment rules of reference §29 that hold for some software versions only (issue 21 items 1, 2).

Each row names the variables it reads, the test a value fails, the version range it applies to (a
side of one ``EDGES`` entry, or every version) and its severity and remediation.  Where the node's
version cannot be told (not read, or the edge's release not known) a row applies as if on its strict
side and its finding says so.  The first row that fires for a variable is the one reported, so the
strict, version-bounded row of a variable comes before its everlasting one.
"""
from __future__ import annotations

from dataclasses import dataclass

from k3doctor.views.versions import Edge, parse_version, side

# Where the §29 rules change.  The release that first shipped a PR is not in the sources: None (unknown,
# strict) unless the reference gives it; a site sets them (``version_edges: {rccl-8444: "7.2"}``).
EDGES = {
    "rccl-8444": Edge("rccl", None, "rocm-systems PR #8444 (2026-07-11: MNNVL and cuMem auto-enabled on gfx1250)"),
    "rccl-9464": Edge("rccl", None, "rocm-systems PR #9464 (2026-07-29: RCCL_USE_AMD_SMI_LIB no longer disables "
                                    "UALoE)"),
    "rocm-7.13": Edge("rocm", (7, 13), "ROCm 7.13 (MSCCL/MSCCL++ removed by PR #4340, NPKit by PR #7046)"),
    "atom-dspark-config": Edge("atom", None, "ATOM ecb8e6dae (2026-07-15: DSpark variables moved to --dspark-config)"),
    "aiter-4153": Edge("aiter", None, "aiter #4153 (2026-07-09: stale JIT locks broken by aiter itself)"),
    "rocm-7.14": Edge("rocm", (7, 14), "ROCm 7.14 (expandable_segments hangs Tensor.to('cuda') in hsaKmtMemoryVaMap, "
                                      "pytorch/pytorch #192259)"),
}
AITER_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")  # aiter/__init__.py, aiter #1795
MSCCL_NPKIT = ("RCCL_MSCCL_*", "RCCL_MSCCLPP_*", "MSCCLPP_ENABLE_CLIP", "NPKIT_DUMP_DIR")
DSPARK_MOVED = ("ATOM_DSPARK_CONFIDENCE_SCHEDULE", "ATOM_DSPARK_DEBUG_SCHEDULE", "ATOM_DSPARK_DISABLE_SPS_CALIB",
                "ATOM_DSPARK_Q_BUCKETS", "ATOM_DSPARK_RAGGED", "ATOM_DSPARK_RAGGED_GRAPH_SIZES")
RCCL_TUNING = ("RCCL_DDA_*", "RCCL_CE_*", "RCCL_IGNORE_ARCH_TABLE", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS")
MORI_WIDE_EP_WARN = ("MORI_VPOD_ID", "MORI_CCO_FABRIC_CROSSNODE_LSA", "MORI_CCO_FABRIC_LENIENT")



def _devices(value) -> list | None:
    """The entries of a ``*_VISIBLE_DEVICES`` list (``0,1,2``; ROCr also takes GPU UUIDs), None when unset/unread."""
    return None if value is None or not value.strip() else [d.strip() for d in value.split(",")]


def hip_past_rocr(hip, env: dict) -> bool:
    """§31.3: HIP_VISIBLE_DEVICES indexes the list ROCR_VISIBLE_DEVICES left, so an index >= its length names
    no GPU (a partial allocation that sees none). Quiet unless both lists were read and every HIP entry is an index."""
    rocr, hip = _devices(env.get("ROCR_VISIBLE_DEVICES")), _devices(hip)
    if rocr is None or hip is None or not all(d.isascii() and d.isdigit() for d in hip):
        return False
    return any(int(d) >= len(rocr) for d in hip)


# The tests a variable can fail: name -> fails(present, value, env); value None when unset or not read; env the
# whole environment, for a test of one variable against another (ALSO_READ names what else it reads).
TESTS = {
    "unset": lambda present, v, env: not present,
    "set": lambda present, v, env: present,
    "0": lambda present, v, env: present and (v or "").strip() == "0",
    "1": lambda present, v, env: present and (v or "").strip() == "1",
    "not an aiter log level": lambda present, v, env: bool(v) and v.strip().upper() not in AITER_LOG_LEVELS,
    "under /dev/shm": lambda present, v, env: bool(v) and (v.rstrip("/") == "/dev/shm" or v.startswith("/dev/shm/")),
    "expandable segments on":
        lambda present, v, env: bool(v) and "expandable_segments:true" in v.replace(" ", "").lower(),
    "an index past the ROCr list": lambda present, v, env: hip_past_rocr(v, env),
}
ALSO_READ = {"an index past the ROCr list": ("ROCR_VISIBLE_DEVICES",)}


@dataclass(frozen=True)
class EnvVersionRule:
    """One row: ``variables`` (``NAME*`` = every variable with that prefix) failing ``test`` on ``applies``."""

    id: str
    variables: tuple
    test: str  # a key of TESTS
    applies: str  # "always" | "before <edge>" | "since <edge>"
    status: str  # fail | warn | info
    section: str
    message: str  # {name} and {value} are filled in, {env[NAME]} from the environment
    remediation: str

    @property
    def edge(self) -> str | None:
        return None if self.applies == "always" else self.applies.split()[1]

    def holds(self, found: dict, edges: dict) -> tuple:
        """(does the row apply on this node, why, as said in the finding)."""
        if self.edge is None:
            return True, "every version"
        where, why = side(edges[self.edge], found)
        return (where is None or where == self.applies.split()[0]), why

    def matches(self, name: str) -> bool:
        return any(name.startswith(v[:-1]) if v.endswith("*") else name == v for v in self.variables)


RULES = tuple(EnvVersionRule(*row) for row in (
    ("ENV-MNNVL-OFF", ("NCCL_MNNVL_ENABLE",), "0", "always", "fail", "§29, §8",
     "{name}=0 turns MNNVL off on every RCCL: the collectives fall back to TCP (~4.5 GB/s)", "ENV-RCCL-FABRIC"),
    ("ENV-MNNVL-UNSET", ("NCCL_MNNVL_ENABLE",), "unset", "before rccl-8444", "fail", "§29, §0.2",
     "{name} is unset and this RCCL predates auto-MNNVL: it tries MNNVL only when told (TCP fallback)",
     "ENV-RCCL-FABRIC"),
    ("ENV-CUMEM-OFF", ("NCCL_CUMEM_ENABLE",), "0", "always", "fail", "§29, §28",
     "{name}=0: no VMM, no MNNVL - with it every collective failed at ncclCommInitRank", "ENV-RCCL-FABRIC"),
    ("ENV-CUMEM-UNSET", ("NCCL_CUMEM_ENABLE",), "unset", "before rccl-8444", "fail", "§29, §0.2",
     "{name} is unset and this RCCL predates auto-cuMem on gfx1250: MNNVL needs it", "ENV-RCCL-FABRIC"),
    ("ENV-AMD-SMI-LIB-UALOE-OFF", ("RCCL_USE_AMD_SMI_LIB",), "1", "before rccl-9464", "fail", "§29",
     "{name}=1 on an RCCL before #9464 silently disables UALoE (amd-smi leaves fabric_info.version at "
     "0xFFFFFFFF: `unexpected fabric info version 4294967295`), whatever RCCL's own WARN advises",
     "ENV-RCCL-FABRIC"),
    ("ENV-AMD-SMI-LIB", ("RCCL_USE_AMD_SMI_LIB",), "1", "always", "warn", "§29",
     "{name}=1: not needed (RCCL reads the fabric through sysfs); it is what disabled UALoE before #9464",
     "ENV-RCCL-FABRIC"),
    ("ENV-MSCCL-NPKIT-REMOVED", MSCCL_NPKIT, "set", "since rocm-7.13", "warn", "§29",
     "{name} is set but MSCCL/MSCCL++ and NPKit are removed from RCCL: inert", "ENV-INERT-VERSIONED"),
    ("ENV-CHECK-POINTERS-RENAMED", ("NCCL_CHECK_POINTERS",), "set", "since rocm-7.13", "warn", "§29",
     "{name} is set but was renamed NCCL_CHECK_MODE: inert", "ENV-INERT-VERSIONED"),
    ("ENV-DSPARK-MOVED", DSPARK_MOVED, "set", "since atom-dspark-config", "warn", "§30",
     "{name} is set but ATOM reads DSpark settings from --dspark-config / --dspark-debug now: inert",
     "ENV-INERT-VERSIONED"),
    ("ENV-AITER-LOG-LEVEL", ("AITER_LOG_LEVEL",), "not an aiter log level", "always", "warn", "§29, §25",
     "{name}={value} is not DEBUG, INFO, WARNING or ERROR: aiter says `Invalid AITER_LOG_LEVEL` and logs at INFO "
     "(the flood the variable is set against)", "ENV-AITER-LOG-VALUE"),
    ("ENV-TMPDIR-SHM", ("TMPDIR",), "under /dev/shm", "always", "warn", "§29, §15",
     "{name}={value} is under /dev/shm: it broke HIP children on MI355X (hipErrorInvalidValue / SIGSEGV in "
     "libamdhip64.so) and spends the shm budget", "ENV-TMPDIR"),
    ("ENV-HIP-EXPANDABLE-SEGMENTS", ("PYTORCH_HIP_ALLOC_CONF",), "expandable segments on", "since rocm-7.14", "warn",
     "§29", "{name}={value}: on ROCm 7.14 expandable segments hang `Tensor.to('cuda')` in hsaKmtMemoryVaMap "
     "(pytorch/pytorch #192259)", "ENV-HIP-ALLOC"),
    ("ENV-RCCL-TUNING", RCCL_TUNING, "set", "always", "info", "§29",
     "{name} is set: non-default RCCL tuning (gfx1250's own defaults are CE AllReduce, DDA LL128 and saturated P2P "
     "channels; RCCL_IGNORE_ARCH_TABLE=1 reverts them)", "ENV-RCCL-TUNING"),
    ("ENV-MORI-FABRIC-DISABLE", ("MORI_CCO_FABRIC_DISABLE",), "1", "always", "fail", "§29",
     "{name}=1: MORI's cco runs host-only (LSA + RDMA), the whole job leaves the UALink fabric", "ENV-MORI"),
    ("ENV-MORI-MANUAL", MORI_WIDE_EP_WARN[:1], "set", "always", "warn", "§29",
     "{name}={value}: manual vPOD grouping overrides the sysfs grouping and must be set on all ranks or none",
     "ENV-MORI"),
    ("ENV-MORI-LENIENT", MORI_WIDE_EP_WARN[1:], "1", "always", "warn", "§29",
     "{name}=1 in a wide-EP environment: cross-node LSA / lenient mapping skips hipMemSetAccess failures",
     "ENV-MORI"),
    ("ENV-HIP-PAST-ROCR", ("HIP_VISIBLE_DEVICES",), "an index past the ROCr list", "always", "fail", "§31.3",
     "{name}={value} with ROCR_VISIBLE_DEVICES={env[ROCR_VISIBLE_DEVICES]}: HIP indexes the GPUs ROCr left, so an "
     "index at or past their count names no GPU", "ENV-VISIBLE-DEVICES"),
))


def names_read(rules=RULES) -> tuple:
    """The variables whose values the rows need (only those values leave the node)."""
    return tuple(sorted({v for rule in rules for v in (*rule.variables, *ALSO_READ.get(rule.test, ()))
                         if not v.endswith("*")}))


def judge(env: dict, found: dict, edges: dict, rules=RULES) -> list:
    """[(rule, variable, value, why the version range holds)] for one environment; one row per variable.

    ``env``: name -> value (None: present, value not read)."""
    out, named = [], set()
    for rule in rules:
        candidates = {n for n in env if rule.matches(n)} | {v for v in rule.variables if not v.endswith("*")}
        for name in sorted(candidates - named):
            if not TESTS[rule.test](name in env, env.get(name), env):
                continue
            applies, why = rule.holds(found, edges)
            if applies:
                named.add(name)
                out.append((rule, name, env.get(name), why))
    return out


def edges_from(site) -> dict:
    """The built-in edges with a site's ``version_edges`` (edge name -> first version with the change)."""
    if not isinstance(site, dict):
        raise ValueError(f"got {site!r}")
    edges = dict(EDGES)
    for name, text in site.items():
        if name not in EDGES:
            raise ValueError(f"no edge {name!r}")
        version = None if text is None else parse_version(str(text))
        if text is not None and version is None:
            raise ValueError(f"{name}: {text!r} is not a version")
        edges[name] = Edge(EDGES[name].component, version, EDGES[name].what)
    return edges


def edges_problem(value, nodes) -> str | None:
    """A ``version_edges`` parameter's problem, said when the inventory is read."""
    try:
        edges_from(value)
    except ValueError as exc:
        return f"a mapping of edge name ({', '.join(EDGES)}) to a version such as \"7.2\" ({exc})"
    return None
