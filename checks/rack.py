"""Is the rack actually free? (reference §3): foreign containers, recent foreign creations,
foreign Slurm jobs (§30: pyxis/enroot jobs are not in `docker ps`), GPU processes, resident VRAM.
VRAM is not a free/busy signal on its own: a job whose containers exist but have not loaded weights
reads 0 % on every GPU; only VRAM in use counts, never 0 %."""
from __future__ import annotations

import os
import re

from k3doctor.api import (
    FIND_TOOL,
    Docker,
    Exists,
    Glob,
    Param,
    ParseError,
    ReadingUnavailable,
    beside_tool,
    check,
    error,
    fail,
    passed,
    remediation,
    skip,
    tool,
    tool_script,
    warn,
)
from k3doctor.views.gpu import KFD_PROC_GLOB, card_of, kfd_pids
from k3doctor.parsers.docker_events import container_from_api, event_from_dict
from k3doctor.parsers.rocmsmi import parse_showmemuse, parse_showpids
from k3doctor.parsers.squeue import FORMAT as SQUEUE_FORMAT
from k3doctor.parsers.squeue import NODE_NAME, parse_jobs

CHECK = "rack-free"
WINDOW_MIN = 30
MAX_VRAM_PCT = 10  # InferenceX wait_for_amd_gpu_clean passes at max VRAM% <= 10 (§3)
WATCHED_ACTIONS = ("create", "start")
ENGINE_EVENT_BUFFER = 256  # dockerd answers `--since` only from its last 256 events, kept in memory
GPU_READS = ("kfd", "pids", "memuse", "busy")  # GPU processes and VRAM: there are none to read without amdgpu

RACK_BUSY = remediation("RACK-BUSY", "someone else is on this node", """
Only our own container may exist on a node before launch (§3): not "nothing of mine is
running" but "nothing else at all" - `docker ps -a --format '{{.Names}}'`, every name.
A container that was created but never started reads 0 % on every GPU and will take the
GPUs the moment it starts; a foreign `create`/`start` in the last 30 min is a live campaign
(`docker events --since 30m --filter event=create`). GPU processes (`rocm-smi --showpids`,
/sys/class/kfd/kfd/proc) mean a job holds the GPUs now. Do not launch on top of them and do
not "fix" a later negative KV budget by raising --gpu-memory-utilization (§3 collision
signatures): find the owner (tray ownership changes daily, §4), wait for them to finish, or
pick another node. Never remove another user's container. Under Slurm (§30: pyxis/enroot,
no docker) the node's jobs are `squeue --all --nodelist=localhost`: only the allocation the
launch runs in may be there (`own_slurm_jobs`; the job k3doctor itself runs in is ours).
""")


BUSY_GLOB = "/sys/class/drm/card*/device/gpu_busy_percent"
STALLED = remediation("RACK-STALLED-QUEUE", "a GPU reads 100 % busy with no process on it", """
`gpu_busy_percent` at 100 with no KFD process on the node is not work: a queue the GPU never drains (seen as
"100 %" utilization at idle power, VRAM flat, one CPU core pinned; legacy-rocm-build #6530, §29). A job
launched on it hangs at its first kernel. Confirm with `amd-smi metric --usage --power` (idle power while
100 % busy), then reset the GPU with no device-file holder, or the tray (§11; with gpu_recovery=0 prefer
ForceRestart).
""")
ORPHANED = remediation("RACK-ORPHANED-VRAM", "VRAM is held on a GPU with no owning process", """
VRAM in use with no KFD process (empty /sys/class/kfd/kfd/proc, no GPU process listed) is an orphaned
KFD context (§29; sgl-project/sglang PR #30431): a container stopped without `--init` and with a short
grace killed a rank mid-HIP operation and its ~13-16% VRAM stays stuck. Nothing frees it but a GPU
reset with no device-file holder or a reboot; with gpu_recovery=0 prefer BMC Redfish ForceRestart of the
tray, then perf_setup (§10, §11), to `rocm-smi --gpureset`. Launching on it fails later as
`The memory capacity is unbalanced`.
""")
# §29: processes that open /dev/kfd only to read metrics, at 0 bytes of VRAM: an agent, never a foreign job.
MONITORING_AGENTS = ["gpu-agent", "amd-metrics-exporter", "device-metrics-exporter", "rdcd", "amdsmi-exporter",
                     "node_exporter", "dcgm-exporter", "prometheus"]


# The job k3doctor runs in (`salloc ... k3doctor check`, `srun ... k3doctor node`) is ours, besides any the
# inventory names: the allocation the launch runs in.
_ENV_JOB = os.environ.get("SLURM_JOB_ID", "")
OWN_SLURM_JOB = _ENV_JOB if re.fullmatch(r"[0-9]+", _ENV_JOB) else None
# Slurm's fatal() when a client finds no slurm.conf, no $SLURM_CONF and, asking DNS, no configless server
# (src/common/read_config.c): with "DNS SRV lookup failed" beside it, squeue is installed on a node Slurm does not
# manage. The same fatal() after a configless server was found (its slurmctld not answering) is a failure.
NO_SLURM_CONFIG = ("Could not establish a configuration source", "DNS SRV lookup failed")
# Where a node Slurm manages keeps its configuration (slurm.conf, Debian's old slurm-llnl, slurmd's configless
# caches): with one of them and no squeue, the jobs are unknown, never "no Slurm".
SLURM_CONFIG_FILES = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf", "/run/slurm/conf/slurm.conf",
                      "/var/spool/slurmd/conf-cache/slurm.conf")
# squeue narrows its list by these when set (squeue(1) INPUT ENVIRONMENT VARIABLES): a login profile that sets one
# for the SSH user would hide other users' jobs, partitions or clusters from the check.
SQUEUE_FILTERS = ("SQUEUE_ACCOUNT", "SQUEUE_ALL", "SQUEUE_ARRAY", "SQUEUE_LICENSES", "SQUEUE_LOCAL", "SQUEUE_NAMES",
                  "SQUEUE_PARTITION", "SQUEUE_QOS", "SQUEUE_STATES", "SQUEUE_USERS", "SQUEUE_FEDERATION",
                  "SQUEUE_SIBLING", "SLURM_CLUSTERS")
SQUEUE_SCRIPT = FIND_TOOL + f'unset {" ".join(SQUEUE_FILTERS)}; exec "$t" "$@"'


def job_ids(value, nodes=None) -> str | None:
    """Slurm job ids as `$SLURM_JOB_ID` and squeue's %A print them (plain digits): anything else can never match
    a job, so a typo would make a foreign job of the one meant to be ours."""
    if not all(re.fullmatch(r"[0-9]+", str(v)) for v in value):
        return "a list of Slurm job ids (whole numbers, e.g. [123456])"
    return None


def slurm_node_name(value, nodes=None) -> str | None:
    """The node's name to squeue: one name (`localhost`: the host's, as squeue maps it), never a hostlist, which
    would list other nodes' jobs as this node's, nor an option."""
    return None if NODE_NAME.fullmatch(value) else "one Slurm node name such as gpu17 (no hostlist, no option)"


def _slurm_reads(settings) -> dict:
    """The node's Slurm jobs, who read them, and whether Slurm is configured there; none are taken where the
    jobs are ignored (a health check: `--slurm-drain`), so a node is not asked what no rule reads."""
    return {"slurm": tool_script(settings.tools["squeue"], SQUEUE_SCRIPT, "--noheader", "--all",
                                 f"--nodelist={settings.param('slurm_node')}", "--states=all",
                                 f"--format={SQUEUE_FORMAT}"),
            "slurm_uid": beside_tool(settings.tools["squeue"], "id", "-u"),
            **{f"slurm_conf:{path}": Exists(path) for path in SLURM_CONFIG_FILES}}


def _reads(settings) -> dict:
    window_s = int(settings.param("window_min") * 60)
    return {"docker": Docker(events_since_s=window_s),
            **(_slurm_reads(settings) if settings.param("slurm_jobs") == "judge" else {}),
            "kfd": Glob(KFD_PROC_GLOB),
            "pids": tool(settings.tools["rocm_smi"], "--showpids", container=settings.container),
            "memuse": tool(settings.tools["rocm_smi"], "--showmemuse", container=settings.container),
            "busy": Glob(BUSY_GLOB),
            # who read the process list, where rocm-smi ran (the host, or our container for a `container:` tool)
            "uid": beside_tool(settings.tools["rocm_smi"], "id", "-u", container=settings.container),
            "pidns": beside_tool(settings.tools["rocm_smi"], "readlink", "/proc/self/ns/pid",
                                 container=settings.container)}


def _age(now: float, then) -> str:
    if then is None:
        return "age unknown"
    seconds = max(0, int(now - then))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def events_span(events: list, now: float, window_s: int) -> str:
    """What the engine's events cover: the whole window, or - when dockerd answered with its whole
    in-memory buffer and the oldest event is inside the window - only back to that event. A full
    buffer is normal on a busy healthy node (every healthcheck and `docker exec` is three events), so
    it narrows what a PASS claims instead of raising a WARN without evidence of a foreign container."""
    oldest = min((ev.time for ev in events), default=now)
    if len(events) < ENGINE_EVENT_BUFFER or oldest <= now - window_s:
        return f"in the last {window_s // 60} min"
    return (f"in the {_age(now, oldest).removesuffix(' ago')} the engine's history holds (dockerd keeps its last "
            f"{ENGINE_EVENT_BUFFER} events; the window asked is {window_s // 60} min)")


def judge_containers(reading, own: str, window_s: int) -> tuple[list, str]:
    """FAIL per foreign container (any state) and per foreign create/start in the window, with the
    span the events cover; events the engine sent that do not parse are an ERROR of their own, so
    the containers are still judged."""
    now = reading.now
    containers = [container_from_api(d) for d in reading.containers]
    try:
        events, unread = [event_from_dict(d) for d in reading.events], []
    except ParseError as exc:
        events, unread = [], [error(f"docker events not readable, so a foreign create/start may be missed: {exc}")]
    recent = {}
    for ev in events:
        if ev.type == "container" and ev.action in WATCHED_ACTIONS and ev.time >= now - window_s \
                and ev.name != own:
            recent.setdefault(ev.name or ev.id[:12], []).append(f"{ev.action} {_age(now, ev.time)}")
    verdicts = []
    for c in containers:
        if c.name == own:
            continue
        events_of = recent.pop(c.name, [])
        evidence = {"name": c.name, "state": c.state, "status": c.status, "image": c.image,
                    "created": _age(now, c.created), "recent events": events_of}
        if c.state == "created":
            what = ("created but never started: it reads 0 % GPU use now and takes the GPUs the moment it "
                    "starts - the exact trap of a VRAM-only check (§3)")
        else:
            what = f"state {c.state} ({c.status})"
        verdicts.append(fail(f"foreign container {c.name} ({c.image}): {what}; created {_age(now, c.created)}",
                             remediation=RACK_BUSY, evidence=evidence))
    for name, what in recent.items():
        verdicts.append(fail(f"foreign container {name} had {', '.join(what)} within the last "
                             f"{window_s // 60} min (since removed): someone else is working this node",
                             remediation=RACK_BUSY, evidence={"name": name, "events": what}))
    return unread + verdicts, events_span(events, now, window_s)


def judge_slurm_jobs(r, own: set) -> tuple[list, str]:
    """(FAIL per Slurm job holding this node that is not ``own``, what the PASS may claim). §30: AgentX nodes
    run the server under Slurm + pyxis/enroot, which `docker ps` never shows; a job allocated and still
    importing its image holds no GPU yet and reads as idle everywhere else. No squeue and no Slurm configuration
    on the node, or a squeue that finds no configuration anywhere: the node runs no Slurm (said so). squeue
    missing beside a Slurm configuration, failing otherwise, or read as a user Slurm may hide jobs from
    (`PrivateData=jobs` shows a non-root caller its own jobs only): an ERROR, as an empty list proves nothing."""
    reading = r["slurm"]
    configured = [path for path in SLURM_CONFIG_FILES if r[f"slurm_conf:{path}"]]
    if reading.tool_missing:
        if configured:
            raise ReadingUnavailable(f"Slurm is configured on this node ({configured[0]}) but squeue was not found "
                                     f"({reading.stderr.strip()[:160]}); set tools.squeue")
        return [], "no Slurm on the node"
    if reading.rc not in (0, None) and all(words in reading.stderr for words in NO_SLURM_CONFIG) and not configured:
        return [], "no Slurm configuration on the node (squeue installed, no slurm.conf nor configless server)"
    verdicts = []
    for job in parse_jobs(reading.output("`squeue --nodelist`")):
        if not job.holds_node or job.job_id in own:
            continue
        gres = f" with {job.gres}" if job.gres else ""
        verdicts.append(fail(f"Slurm job {job.shown} ({job.name}) of {job.user} is {job.state} on this node{gres}: "
                             "the node is allocated to someone else (§30)", remediation=RACK_BUSY,
                             evidence={"job": job.shown, "user": job.user, "state": job.state, "name": job.name,
                                       "gres": job.gres, "own_slurm_jobs": sorted(own)}))
    uid = r["slurm_uid"].output("`id -u`").strip()
    if not verdicts and uid != "0":
        raise ReadingUnavailable(f"squeue was read as uid {uid}, not root: with PrivateData=jobs Slurm lists only "
                                 "that user's jobs, so no foreign job seen is no proof (§29); run as root")
    return verdicts, "no other Slurm job"


def judge_gpu_processes(kfd_pids: set, rows: list, agents=()) -> tuple:
    """(FAIL naming every process that holds a KFD context with VRAM - union of sysfs and rocm-smi -, notes on the
    0-byte holders): a KFD holder at 0 bytes of VRAM is a metrics agent or a mere `/dev/kfd` opener, never a
    foreign job (§29, legacy-rocm-build #4411); the allow-listed ``agents`` are named as such."""
    by_pid = {p.pid: p for p in rows}
    verdicts, notes = [], []
    for pid in sorted(kfd_pids | set(by_pid)):
        row = by_pid.get(pid)
        if row is not None and row.vram_bytes == 0:
            kind = "monitoring agent" if row.name in agents else "0-byte KFD holder (not a job)"
            notes.append(f"INFO: {kind} pid {pid} {row.name} holds /dev/kfd at 0 bytes VRAM")
            continue
        name = row.name if row else "(name unknown: not in rocm-smi --showpids)"
        vram = f"{row.vram_bytes / 2**30:.1f} GiB VRAM" if row and row.vram_bytes is not None else "VRAM unknown"
        gpus = f" on {row.gpus} GPU(s)" if row and row.gpus is not None else ""
        verdicts.append(fail(f"GPU process pid {pid} {name}{gpus} holds {vram}: the GPUs are in use",
                             remediation=RACK_BUSY,
                             evidence={"pid": pid, "name": name, "in /sys/class/kfd/kfd/proc": pid in kfd_pids,
                                       "in rocm-smi --showpids": pid in by_pid,
                                       "vram_bytes": row.vram_bytes if row else None}))
    return verdicts, notes


def judge_vram(percent: dict, max_pct: float) -> list:
    """FAIL per GPU above max_pct (someone's weights are resident); a GPU without a value is an
    ERROR. Nothing for GPUs at or below it: a low reading does not make the node free (§3)."""
    verdicts = []
    for gpu, pct in sorted(percent.items()):
        if pct is None:
            verdicts.append(error(f"rocm-smi --showmemuse gave no VRAM% for GPU[{gpu}], so its VRAM use is unknown",
                                  gpu=gpu))
        elif pct > max_pct:
            verdicts.append(fail(f"rocm-smi GPU[{gpu}] has {pct} % VRAM allocated (max_vram_pct {max_pct}) and no "
                                 "process owns it: an orphaned KFD context holds it (§29); 0 % would prove nothing "
                                 "(a created-but-not-loaded job reads 0 %, §3)", gpu=gpu, remediation=ORPHANED,
                                 evidence={"GPU Memory Allocated (VRAM%)": pct, "max_vram_pct": max_pct}))
    return verdicts


def judge_idle_busy(busy: dict, stalled_pct: int) -> list:
    """§29: a GPU at ``stalled_pct`` busy or more while no process holds the node's GPUs is a stalled queue (WARN per
    card); a card without the file says nothing (not every driver has it), an unreadable value is an ERROR."""
    verdicts = []
    for path, reading in sorted(busy.items()):
        if not reading.exists:
            continue
        card, text = card_of(path), reading.text()
        if not text.isdigit() or int(text) > 100:
            verdicts.append(error(f"{path} reads {text[:40]!r}, not a percentage", gpu=card))
        elif int(text) >= stalled_pct:
            verdicts.append(warn(f"card{card} reads {text} % busy (gpu_busy_percent) with no GPU process on the node: "
                                 "a stalled queue, not work (§29)", gpu=card, remediation=STALLED,
                                 evidence={path: int(text), "stalled_pct": stalled_pct}))
    return verdicts


@check(CHECK, title="only our container and Slurm job on the node, no foreign create/start recently, no GPU processes",
       scope="node", remediation=(RACK_BUSY, ORPHANED, STALLED),
       params={"window_min": WINDOW_MIN, "max_vram_pct": MAX_VRAM_PCT, "monitoring_agents": MONITORING_AGENTS,
               "stalled_busy_pct": 100, "own_slurm_jobs": Param([], validate=job_ids),
               # the node's Slurm NodeName where it is not the host's name (`slurmd -N`, NodeHostname)
               "slurm_node": Param("localhost", validate=slurm_node_name),
               # ignore: Slurm's own allocations are no fault (`k3doctor node --slurm-drain`, a health check)
               "slurm_jobs": Param("judge", choices=("judge", "ignore"))},
       reads=_reads, needs={"amdgpu-driver": GPU_READS})  # the containers are judged without the driver
def rack_free(r, ctx):
    """§3: "nothing of mine is running" is not "free"; each source is judged on its own so one
    unreadable source (ERROR) never hides what the others found. Resident VRAM is reported only
    when no GPU process was named: a named process already explains it and blocks the node."""
    own, window_s = ctx.settings.container, int(ctx.param("window_min") * 60)
    verdicts = []

    def attempt(source, fn, default):
        try:
            return fn()
        except (ReadingUnavailable, ParseError) as exc:
            verdicts.append(error(f"{source} not readable, so the rack may not be free: {exc}"))
            return default

    found, span = attempt("docker engine", lambda: judge_containers(r["docker"], own, window_s), ([], ""))
    verdicts += found
    if ctx.param("slurm_jobs") == "judge":
        own = {str(int(job)) for job in ctx.param("own_slurm_jobs")} | ({OWN_SLURM_JOB} if OWN_SLURM_JOB else set())
        jobs, slurm = attempt("Slurm job list", lambda: judge_slurm_jobs(r, own), ([], ""))
        verdicts += jobs
        span += f", {slurm}" if slurm else ""
    withheld = r.not_evaluated(*GPU_READS)
    if withheld:  # the prerequisite's FAIL names the cause; say once what was not judged
        return verdicts + [skip(f"GPU processes and VRAM {withheld}")] + ([] if verdicts else [passed(
            f"only {own} (or nothing) on this node, no foreign create/start {span}")])
    pids = attempt(KFD_PROC_GLOB, lambda: kfd_pids(r["kfd"]), set())
    rows = attempt("rocm-smi --showpids", lambda: parse_showpids(r["pids"].output("`rocm-smi --showpids`")), None)
    if rows == [] and not pids:
        verdicts += unprivileged(r.get("uid")) or namespaced(r.get("pidns"))
    processes, notes = judge_gpu_processes(pids, rows or [], set(ctx.param("monitoring_agents")))
    verdicts += processes
    vram = attempt("rocm-smi --showmemuse", lambda: judge_vram(parse_showmemuse(
        r["memuse"].output("`rocm-smi --showmemuse`"), ctx.settings.gpus_per_node), ctx.param("max_vram_pct")), [])
    verdicts += [] if processes else vram
    if not processes and not pids:  # busy with nothing running: a stalled queue (§29)
        verdicts += attempt(BUSY_GLOB, lambda: judge_idle_busy(r["busy"], ctx.param("stalled_busy_pct")), [])
    if not verdicts:
        verdicts.append(passed(f"only {own} (or nothing) on this node, no foreign create/start {span}, "
                               f"no GPU processes, VRAM at most {ctx.param('max_vram_pct')} % "
                               "per GPU (low VRAM alone would not prove the node free, §3)"
                               + "".join(f"; {note}" for note in notes)))
    return verdicts


def unprivileged(uid_reading) -> list:
    """§29: "no processes" from a caller that may not see them (amd-smi/rocm-smi without rights, rocm-systems
    PR #9281) is no proof the GPUs are free: an ERROR unless the list was taken as root."""
    try:
        uid = (uid_reading.output() if uid_reading is not None else "").strip()
    except ReadingUnavailable as exc:
        return [error(f"the GPU process list is empty but who read it is unknown ({exc}): not proof the GPUs are "
                      "free (§29)")]
    if uid == "0":
        return []
    return [error(f"the GPU process list is empty but was read as uid {uid or 'unknown'}, not root: processes of other "
                  "users are not listed to it (§29); run as root (`sudo: true` in the inventory)")]


INIT_PID_NS = "pid:[4026531836]"  # PROC_PID_INIT_INO (0xEFFFFFFC, include/linux/proc_ns.h): the host's namespace


def namespaced(pidns_reading) -> list:
    """§29: "no processes" read inside a PID namespace (a container, rocm-systems PR #3752) sees only that
    namespace's processes: an ERROR unless the list was taken in the host's own PID namespace."""
    try:
        ns = (pidns_reading.output() if pidns_reading is not None else "").strip()
    except ReadingUnavailable as exc:
        return [error(f"the GPU process list is empty but the PID namespace it was read in is unknown ({exc}): not "
                      "proof the GPUs are free (§29)")]
    if ns == INIT_PID_NS:
        return []
    return [error(f"the GPU process list is empty but was read in PID namespace {ns or 'unknown'}, not the host's "
                  f"{INIT_PID_NS}: processes outside it are not listed (§29); read it on the host, not in a container")]
