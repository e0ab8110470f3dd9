"""Host resources on every node (reference §12, checklist item 8 of §0.3): host RAM and swap, the
full checkpoint on every node with the same shards at the same sizes, and free space on the Docker
root and the directories a run writes (logs, profiler traces). Sizes, not checksums: fast tier.

A node whose copy differs from the copy the other nodes agree on is named with the files; what the
nodes agree on is then compared once, for the rack, with the shard count and size the inventory
expects (the reference's by default).
"""
from __future__ import annotations

from collections import Counter

from k3doctor.api import ParseError, ReadingUnavailable, check, error, fail, passed, remediation, warn
from k3doctor.views.host import (
    MEMINFO,
    checkpoint,
    checkpoint_listing,
    docker_root_free_space,
    free_space,
    memory,
    shard_number,
    spaces,
)

CHECK = "host-resources"
GIB, GB = 2**30, 10**9
PARAMS = {
    "checkpoint_dir": "/mnt/k3/Kimi-K3",  # §12: validated host path, bind-mounted read-only as /models
    "shards": 96,  # §12
    "checkpoint_bytes": 1_561_000_000_000,  # §12: ~1.42 TiB = 1.561 TB decimal (InferenceX)
    "checkpoint_tolerance_pct": 1.0,  # the reference gives 3-4 digits; 1 % is about one shard
    "min_mem_total_gib": 240,  # §12: ~250 GB (251 GB on another MI455X box), a DIMM short reads less
    "min_swap_gib": 0,  # §12: swap is required; its size is not stated (§27 item 5): 0 = any swap
    "docker_root": "auto",  # auto: the DockerRootDir the engine reports; else a path
    "docker_root_min_free_gb": 20,  # not in the reference: room for docker cp'd files, pip, JIT caches
    "docker_root_warn_free_gb": 373,  # §9, §12: the epcheck image is ~373 GB unpacked; 0 turns it off
    "log_dirs": ["/root/k3ep16-logs"],  # §12: server logs (/logs in the container) and profile_* traces
    "log_min_free_gb": 10,  # not in the reference: logs plus profiler traces (~162 MB/node a wave, §23)
}
_TYPES = {"l": "a broken symlink", "d": "a directory"}
_LISTED = 3  # files named in a message; the evidence has all of them

INCOMPLETE = remediation("CHECKPOINT-INCOMPLETE", "a node's checkpoint copy is missing, short or different", """
The full checkpoint must be on every node, not sharded across them (§12): Kimi-K3 is 96
`*.safetensors` shards, ~1.42 TiB (1.561e12 B), at /mnt/k3/Kimi-K3 on the host, bind-mounted
read-only as /models (model path /models/Kimi-K3). A missing shard, one shorter than on the other
nodes, or a broken symlink is a copy that did not finish (an interrupted rsync/scp, a disk that
filled up): the node fails or hangs while loading, minutes into the cold start. Copy the named
files again from a node whose copy is complete, e.g.
`rsync -aP ct13:/mnt/k3/Kimi-K3/<file> /mnt/k3/Kimi-K3/`, and re-check. A file that no other node
has is not part of the checkpoint the rack agrees on: remove it or copy it everywhere. Only sizes
are compared (fast tier); a copy of the right size with damaged content is not caught here.
""")

UNEXPECTED = remediation("CHECKPOINT-UNEXPECTED", "the checkpoint the nodes agree on is not the expected one", """
Every node holds the same copy, but it does not have the shard count or total size the
inventory expects - by default the validated Kimi-K3 checkpoint: 96 shards, ~1.42 TiB
(1.561e12 B) (§12). A shard missing on every node is named. Either the same incomplete copy
was replicated to all nodes (copy the missing shards from the source, then to every node), or
the directory holds another checkpoint or revision. If this site runs a different checkpoint on
purpose, set host-resources.shards and host-resources.checkpoint_bytes in the inventory.
""")

RAM_LOW = remediation("HOST-RAM-LOW", "host RAM below what the weight load needs", """
These boxes have ~250 GB of host RAM (§12; 251 GB on another MI455X box). Loading the 1.42 TiB
checkpoint peaks well above that, and the container's 128 GiB /dev/shm (§13) is host RAM too. A
node reading noticeably less than its peers has lost memory: a failed or unseated DIMM (check the
BMC/SEL and `dmidecode -t memory`), or a `mem=` kernel argument (/proc/cmdline). Fix the node
or leave it out of the launch. For a site with other boxes set host-resources.min_mem_total_gib.
""")

NO_SWAP = remediation("HOST-NO-SWAP", "no swap (or less than required) on a node", """
Weight loading peaks well above the ~250 GB of host RAM, so swap is required (§12); without it
the load is OOM-killed on that node. The sources do not state a size (§27 item 5). Add swap,
e.g. `fallocate -l 256G /swapfile && chmod 600 /swapfile && mkswap /swapfile && swapon /swapfile`
(and an /etc/fstab entry so it survives a reboot); `swapon --show` confirms. Set
host-resources.min_swap_gib to require a size.
""")

DISK_FULL = remediation("HOST-DISK-FULL", "too little free space where the run writes", """
The Docker root holds our container's writable layer: files added with `docker cp` (the 1.7 GB
translation prefix on A0, §2; PR #2380 files, §14), pip installs (py-spy, lm_eval) and JIT
caches. A copy that runs out of space leaves 0-byte files that import cleanly and define
nothing (§14). The log directory (/root/k3ep16-logs, /logs in the container, §12, §13) takes the
server logs the launch is judged by (§19) and profiler traces (~162 MB per node a wave, §23).
Free space (`df -h <path>`, `docker system df`; never remove another user's images or
containers), or point the run elsewhere and set host-resources.log_dirs. A configured directory
that does not exist is named too: create it, or set log_dirs to the directories this site uses.
""")

EPCHECK_ROOM = remediation("HOST-DOCKER-ROOT-ROOM", "no room on the Docker root for the epcheck image", """
The single-tray TDM gate runs from the epcheck image, ~373 GB unpacked (§9): check the Docker
root's free space before pulling it (§12). The launch itself can go ahead. Free space on the
Docker root (`docker system df`), or set host-resources.docker_root_warn_free_gb to 0 where
epcheck is already present or not used.
""")


def _reads(settings) -> dict:
    root = settings.param("docker_root")
    reads = {"meminfo": MEMINFO, "checkpoint": checkpoint_listing(settings.param("checkpoint_dir")),
             "docker_root": docker_root_free_space() if root == "auto" else free_space([root])}
    if settings.param("log_dirs"):
        reads["log_dirs"] = free_space(settings.param("log_dirs"))
    return reads


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def _gb(n: int) -> str:
    return f"{n / GB:.1f} GB" if n >= GB else f"{n / 10**6:.1f} MB"


def judge_memory(mem, min_total_gib: float, min_swap_gib: float) -> list:
    """§12: MemTotal at least min_total_gib, SwapTotal > 0 and at least min_swap_gib."""
    evidence = {"MemTotal": mem.mem_total, "MemAvailable": mem.mem_available,
                "SwapTotal": mem.swap_total, "SwapFree": mem.swap_free,
                "min_mem_total_gib": min_total_gib, "min_swap_gib": min_swap_gib}
    verdicts = []
    if mem.mem_total < min_total_gib * GIB:
        verdicts.append(fail(f"host RAM is {_gib(mem.mem_total)} (MemTotal), below min_mem_total_gib {min_total_gib}: "
                             "these boxes have ~250 GB and the weight load peaks well above that (§12)",
                             remediation=RAM_LOW, evidence=evidence))
    if mem.swap_total == 0:
        verdicts.append(fail("no swap (SwapTotal 0): loading the 1.42 TiB checkpoint peaks well above the ~250 GB "
                             "of RAM, so swap is required (§12)", remediation=NO_SWAP, evidence=evidence))
    elif mem.swap_total < min_swap_gib * GIB:
        verdicts.append(fail(f"swap is {_gib(mem.swap_total)} (SwapTotal), below min_swap_gib {min_swap_gib}",
                             remediation=NO_SWAP, evidence=evidence))
    return verdicts or [passed(f"host RAM {_gib(mem.mem_total)}, swap {_gib(mem.swap_total)}", evidence=evidence)]


def judge_space(wanted: list) -> list:
    """Free space per file system: ``wanted`` is (Space, role, min_free_bytes, warn_free_bytes) per
    directory. Directories on one file system are judged once, against the largest need among them."""
    verdicts, groups = [], {}
    for space, role, min_free, warn_free in wanted:
        if space.fs is None:
            if role == "Docker root":
                verdicts.append(error(f"the engine's Docker root {space.path} does not exist on this host (a remote "
                                      "or rootless engine?): its free space is unknown"))
            else:
                verdicts.append(warn(f"{role} {space.path} does not exist on this node, so its free space was not "
                                     "checked: create it or set host-resources.log_dirs", remediation=DISK_FULL,
                                     evidence={"path": space.path}))
            continue
        fs = space.fs
        key = (fs.fsid, fs.blocks, fs.block_size) if fs.fsid.strip("0") else ("path", space.path)
        groups.setdefault(key, []).append((space, role, min_free, warn_free))
    fine = []
    for members in groups.values():
        fs = members[0][0].fs
        names = " and ".join(f"{role} {space.path}" for space, role, _, _ in members)
        need = max(members, key=lambda m: m[2])
        room = max(members, key=lambda m: m[3])
        used_pct = round(100 * (fs.blocks - fs.free_blocks) / fs.blocks) if fs.blocks else 0
        evidence = {"paths": [m[0].path for m in members], "available_bytes": fs.available_bytes,
                    "total_bytes": fs.total_bytes, "used_pct": used_pct, "fsid": fs.fsid,
                    "min_free_bytes": need[2], "warn_free_bytes": room[3]}
        where = (f"{_gb(fs.available_bytes)} free on the file system of {names} "
                 f"({_gb(fs.total_bytes)}, {used_pct} % used)")
        if fs.available_bytes < need[2]:
            param = "docker_root_min_free_gb" if need[1] == "Docker root" else "log_min_free_gb"
            verdicts.append(fail(f"only {where}: the {need[1]} needs at least {_gb(need[2])} ({param})",
                                 remediation=DISK_FULL, evidence=evidence))
        elif fs.available_bytes < room[3]:
            verdicts.append(warn(f"{where}: the epcheck image (~373 GB unpacked, §9) does not fit "
                                 f"(docker_root_warn_free_gb {room[3] // GB}); the launch itself can go ahead",
                                 remediation=EPCHECK_ROOM, evidence=evidence))
        else:
            fine.append((where, evidence))
    if fine:
        verdicts.append(passed("; ".join(w for w, _ in fine), evidence={"file systems": [e for _, e in fine]}))
    return verdicts


def consensus(listings: dict) -> dict:
    """name -> size of the checkpoint copy most nodes hold. A name half the nodes have counts when it
    is numbered like a shard (``-00042-of-00096``); of sizes, the most common, then the largest (a
    copy that was cut short is the usual fault, one that grew is not)."""
    sizes: dict = {}
    for cp in listings.values():
        for name, size in cp.files.items():
            sizes.setdefault(name, []).append(size)
    n, out = len(listings), {}
    for name, seen in sizes.items():
        if 2 * len(seen) > n or (2 * len(seen) == n and shard_number(name)):
            counts = Counter(seen)
            top = max(counts.values())
            out[name] = max(s for s, c in counts.items() if c == top)
    return out


def _listed(items: list) -> str:
    more = f" and {len(items) - _LISTED} more" if len(items) > _LISTED else ""
    return ", ".join(items[:_LISTED]) + more


def judge_copy(cp, ref: dict, peers: list) -> list:
    """A node's copy against the rack's (ref): missing, unusable, short/different and extra files."""
    missing = sorted(name for name in ref if name not in cp.files and name not in cp.other)
    unusable = {name: _TYPES.get(t, f"of type {t}") for name, t in sorted(cp.other.items())}
    differs = {name: (cp.files[name], size) for name, size in sorted(ref.items())
               if name in cp.files and cp.files[name] != size}
    extra = sorted(name for name in cp.files if name not in ref)
    evidence = {"path": cp.path, "shards": len(cp.files), "bytes": cp.total_bytes, "missing": missing,
                "unusable": unusable, "size differs (here, elsewhere)": differs, "extra": extra}
    where = "on " + ", ".join(peers) if peers else "elsewhere"
    if not (missing or unusable or differs or extra):
        return [passed(f"checkpoint {cp.path}: {len(cp.files)} shards, {cp.total_bytes:,} B, same sizes as {where}",
                       evidence=evidence)]
    parts = []
    if missing:
        parts.append(f"missing {_listed(missing)}")
    if unusable:
        parts.append(_listed([f"{name} is {what}" for name, what in unusable.items()]))
    if differs:
        parts.append(_listed([f"{name} is {mine:,} B, {theirs:,} B {where}" + (" (cut short)" if mine < theirs else "")
                              for name, (mine, theirs) in differs.items()]))
    if extra:
        parts.append(f"not on the other nodes: {_listed(extra)}")
    return [fail(f"checkpoint {cp.path} ({len(cp.files)} shards, {cp.total_bytes:,} B) differs from the copy "
                 f"{where}: " + "; ".join(parts), remediation=INCOMPLETE, evidence=evidence)]


def _gaps(ref: dict) -> list:
    """Shard names missing from the rack's copy by its own numbering (``-NNNNN-of-MMMMM``)."""
    numbered = [(name, shard_number(name)) for name in ref]
    numbered = [(name, n) for name, n in numbered if n]
    if not numbered:
        return []
    (stem, of), _ = Counter((n[0], n[2]) for _, n in numbered).most_common(1)[0]
    have = {n[1]: name for name, n in numbered if (n[0], n[2]) == (stem, of)}
    first = have[min(have)]
    of_text = first.rsplit("-of-", 1)[1].removesuffix(".safetensors")
    index_text = first[len(stem) + 1:].split("-of-", 1)[0]
    width = len(of_text) if len(index_text) == len(of_text) else 0
    return [f"{stem}-{i:0{width}d}-of-{of_text}.safetensors" for i in range(1, of + 1) if i not in have]


def judge_rack_copy(ref: dict, nodes: int, shards: int, expected_bytes: int, tolerance_pct: float) -> list:
    """The copy the nodes agree on against the expected shard count and total size (§12)."""
    total = sum(ref.values())
    gaps = _gaps(ref)
    evidence = {"shards": len(ref), "bytes": total, "expected shards": shards, "expected bytes": expected_bytes,
                "tolerance_pct": tolerance_pct, "missing by numbering": gaps}
    low, high = expected_bytes * (1 - tolerance_pct / 100), expected_bytes * (1 + tolerance_pct / 100)
    parts = []
    if len(ref) != shards:
        parts.append(f"{len(ref)} shards, expected {shards}")
    if gaps:
        parts.append(f"missing on every node: {_listed(gaps)}")
    if not low <= total <= high:
        parts.append(f"{total:,} B in all, expected {expected_bytes:,} B ± {tolerance_pct:g} %")
    if parts:
        return [fail(f"the checkpoint copy the {nodes} node(s) agree on is not the expected one: " + "; ".join(parts)
                     + " (§12: 96 shards, ~1.42 TiB)", remediation=UNEXPECTED, evidence=evidence)]
    return [passed(f"checkpoint on {nodes} node(s): {len(ref)} shards, {total:,} B, as expected ({shards} shards, "
                   f"{expected_bytes:,} B ± {tolerance_pct:g} %)", evidence=evidence)]


def judge_node(r, param) -> tuple:
    """(verdicts, Checkpoint or None) of one node: memory and free space judged here, the checkpoint
    copy returned for the comparison across nodes (None when absent or unreadable, said in a verdict)."""
    verdicts = []

    def attempt(source, fn):
        try:
            return fn()
        except (ReadingUnavailable, ParseError) as exc:
            verdicts.append(error(f"{source} not readable: {exc}"))
            return None

    mem = attempt("/proc/meminfo", lambda: memory(r["meminfo"]))
    if mem:
        verdicts += judge_memory(mem, param("min_mem_total_gib"), param("min_swap_gib"))
    wanted = [(s, "Docker root", param("docker_root_min_free_gb") * GB, param("docker_root_warn_free_gb") * GB)
              for s in attempt("Docker root free space", lambda: spaces(r["docker_root"], 1)) or []]
    if param("log_dirs"):
        wanted += [(s, "log directory", param("log_min_free_gb") * GB, 0)
                   for s in attempt("log directory free space",
                                    lambda: spaces(r["log_dirs"], len(param("log_dirs")), "stat -f")) or []]
    verdicts += judge_space(wanted) if wanted else []
    cp = attempt(f"checkpoint listing of {param('checkpoint_dir')}",
                 lambda: checkpoint(r["checkpoint"], param("checkpoint_dir")))
    if cp and not cp.present:
        verdicts.append(fail(f"no checkpoint directory {cp.path} on this node: the full checkpoint must be on every "
                             "node (§12)", remediation=INCOMPLETE, evidence={"path": cp.path}))
    return verdicts, cp if cp and cp.present else None


@check(CHECK, title="host RAM and swap, the checkpoint identical on every node, free space on Docker root and logs",
       scope="cluster", reads=_reads, params=PARAMS,
       remediation=(INCOMPLETE, UNEXPECTED, RAM_LOW, NO_SWAP, DISK_FULL, EPCHECK_ROOM),
       each_node=lambda r, ctx: judge_node(r, ctx.settings.param))
def host_resources(per_node, ctx):
    """§12, checklist item 8: what a node must have besides its GPUs before a launch - ~250 GB of
    RAM plus swap, the full 96-shard checkpoint with the same sizes as every other node, and free
    space on the Docker root and the log directory. Each source is judged on its own, so one that
    cannot be read (ERROR) never hides what the others found. ``per_node``: node -> :func:`judge_node`'s
    (verdicts, checkpoint), taken as soon as the node is read."""
    verdicts, listings = [], {}
    for node, (mine, cp) in per_node.items():
        verdicts += [_on(v, node) for v in mine]
        if cp:
            listings[node] = cp
    if listings:
        ref = consensus(listings)
        for node, cp in listings.items():
            verdicts += [_on(v, node) for v in judge_copy(cp, ref, [n for n in listings if n != node])]
        verdicts += judge_rack_copy(ref, len(listings), ctx.param("shards"), ctx.param("checkpoint_bytes"),
                                    ctx.param("checkpoint_tolerance_pct"))
    return verdicts


def _on(verdict, node: str):
    verdict.node = node
    return verdict
