"""What was copied into our container (reference §2, §14): the rocjitsu B0->A0 translation
prefix on A0 silicon and the ATOM PR #2380 files. Both arrive by `docker cp`, are lost on
`docker rm`, and fail silently: a wrong prefix gives HTTP 200 with every token `!`, a 0-byte
.py imports cleanly and defines nothing."""
from __future__ import annotations

import re

from k3doctor.api import Param, check, fail, in_container, passed, quote, remediation, skip, warn
from k3doctor.views.container import ROCJITSU_HOOK as HOOK
from k3doctor.views.container import LOG_RC, ROCJITSU_PREFIX, log_through_awk, parse_env
from k3doctor.parsers.fsinfo import STAT_SIZE_FORMAT, parse_count, parse_stat

ROCJITSU, PATCH = "rocjitsu-store", "patch-integrity"
TRANSLATOR = "lib/librocjitsu_gfx1250_b0_to_a0.so.0.3.0"
STORE = "share/rocjitsu/translations/gfx1250-b0-a0/v1"
TRIO = ("LD_LIBRARY_PATH", "HSA_TOOLS_LIB", "HSA_HOTSWAP_VERBOSE")  # the A0 translation environment (§2)
ROCJITSU_PARAMS = {  # §2 table: required prefix, and the image's own (known-bad) one
    "prefix": ROCJITSU_PREFIX, "hook_bytes": 129112, "translator_bytes": 8002216, "store_entries": 1976,
    "image_hook_bytes": 143217, "image_translator_bytes": 7531385, "image_store_entries": 170,
    "log_tail_lines": 200000,  # B0: how much of the container's log to search for translations (§1, §2)
}
TRANSLATED = "outcome=translated"  # the hook's line for each translated code object (§2 runtime proof)
# Counted on the node: the log itself (startup arguments can hold tokens) never leaves it; prints "N RC".
COUNT_TRANSLATED = f"/{TRANSLATED}/{{n++}} /^{LOG_RC}/{{rc=substr($0,{len(LOG_RC) + 1})}} END{{print n+0, rc}}"
ATOM = "/app/ATOM/atom"
PATCH_PARAMS = {  # §14 byte sizes for gfx1250-atom-20260918-ep8
    "required": "auto",  # auto: only for the image tag matching `image_needs_patch` (§0.2); yes | no
    "image_needs_patch": "20260918",
    "files": {f"{ATOM}/model_ops/mla_unfused_gather.py": 7499, f"{ATOM}/utils/envs.py": 47967,
              f"{ATOM}/model_ops/attention_mla.py": 146235},
    "marker": "use_unfused_gather_kv_b_proj",
    "marker_file": f"{ATOM}/model_ops/attention_mla.py",
    "marker_count": 3,
}
def _path_problem(path) -> str | None:
    """A path in the container: absolute, so it never reaches stat or grep as an option."""
    return None if isinstance(path, str) and path.startswith("/") else "an absolute path in the container"


def _sizes_problem(files) -> str | None:
    """patch-integrity.files: absolute paths in the container -> byte sizes."""
    if not all(_path_problem(k) is None and isinstance(v, int) and not isinstance(v, bool) and v >= 0
               for k, v in files.items()):
        return "a mapping of absolute paths in the container to byte sizes"
    return None


_NO_CONTAINER = ("No such container", "is not running")
# what stat/grep say about a file that is not there (busybox "can't stat", coreutils "cannot stat[x]")
_NOT_THERE = re.compile(r"^(stat|grep): .*: (No such file or directory|Not a directory)$")
STAT_MISSING = {1: _NOT_THERE}  # stat exits 1 when any file is missing
GREP_COUNT = {1: None, 2: _NOT_THERE}  # grep -c: 1 = no match (silent), 2 = file missing

STEPPING = remediation("STEPPING-UNDECLARED", "silicon stepping not declared for a node", """
The stepping cannot be read from the board: PCI revision 0x00, rocminfo `ASIC Revision: 0`,
amd-smi `REV_ID: 0x00` on both A0 and B0 (§1). Declare it per node in the inventory
(`stepping: A0` or `stepping: B0`), from site records. A0 needs the B0->A0 translation
prefix (§2); B0 needs none. Confirm after launch with the sanity prompt (§21): A0 without
translation answers `!!!!!!!!`.
""")

PREFIX = remediation("ROCJITSU-PREFIX", "wrong or missing rocjitsu prefix on A0 silicon", """
A0 silicon runs the image's B0 code objects only through the B0->A0 translation prefix in
the container at /app/rjprefix (§2): hook libhsa_hotswap_rocjitsu.so 129,112 B, translator
librocjitsu_gfx1250_b0_to_a0.so.0.3.0 8,002,216 B, 1,976 entries in
share/rocjitsu/translations/gfx1250-b0-a0/v1. The image's own prefix (143,217 / 7,531,385 /
170) installs the hook but its store is nearly empty: nothing is translated and every token
is `!` while HTTP 200, finish_reason stop and sane throughput are reported (§1).
Re-install the site's prefix archive with `docker cp` (424 MB, unpacks to 1.7 GB; outside
that cluster ask AMD for it by these sizes) and re-verify the sizes: `docker cp` is lost on
`docker rm`, and an interrupted copy leaves 0-byte files (§14). `FAIL: HOTSWAP=1 but
/app/rjprefix not found` means the same. Never fall back to HOTSWAP=0 on A0: any number
produced without translation is void.
""")

ON_B0 = remediation("ROCJITSU-ON-B0", "populated translation prefix active on B0 silicon", """
The 20260918 image ships B0 code objects, so B0 silicon needs no translation (§0.2, §1).
A populated (1,976-entry) prefix active on B0 was never tested and may rewrite valid B0
objects for A0 (§27 item 7): drop the three translation exports (LD_LIBRARY_PATH entry,
HSA_TOOLS_LIB, HSA_HOTSWAP_VERBOSE) or remove the prefix, then rerun the accuracy gate (§21).
""")

PATCH_BAD = remediation("PATCH-2380", "ATOM PR #2380 files missing, truncated or wrong", """
On the 20260918 / Triton 3.8 image the fused Triton gather_kv_b_proj aborts LLVM on chunked-
prefill shapes; PR #2380's unfused fallback avoids it, and without the patch
ATOM_UNFUSED_GATHER_KV_B_PROJ silently does nothing (§14). Apply the PR's diff (runtime files
only, `filterdiff -i 'atom/*'`) to /app/ATOM - never check out the PR branch - insert the
envs.py block by hand after ATOM_USE_FLYDSL_GATHER_KV_B_PROJ (the hunk fails on this image),
then verify: mla_unfused_gather.py 7,499 B, envs.py 47,967 B, attention_mla.py 146,235 B,
`grep -c use_unfused_gather_kv_b_proj attention_mla.py` = 3. A 0-byte file is an interrupted
`docker cp` (host reset, BMC watchdog): it imports cleanly and defines nothing - copy again.
Files added with `docker cp` are lost on `docker rm`: re-verify after every rebuild and reboot.
Not for the optimized stack (Triton >= 3.9 + AITER #6121, §0.2).
""")


class ContainerMissing(Exception):
    """`docker exec` could not run in our container: it does not exist or is not running."""


def exec_stdout(reading, container: str, tolerated=None) -> str:
    """stdout of a `docker exec`; ContainerMissing when docker says so, ReadingUnavailable otherwise.

    ``tolerated`` maps a non-zero rc of the tool to the pattern every stderr line must match
    (None: stderr empty): docker's own failures (daemon down, socket permission) also exit 1,
    and must not read as "the files are missing"."""
    if not reading.timed_out and any(s in reading.stderr for s in _NO_CONTAINER):
        state = "is not running" if "is not running" in reading.stderr else "does not exist"
        raise ContainerMissing(f"container {container} {state} on this node")
    if not reading.timed_out and reading.rc in (tolerated or {}) and _only_tool(reading.stderr, tolerated[reading.rc]):
        return reading.stdout
    return reading.output()


def _only_tool(stderr: str, pattern) -> bool:
    lines = stderr.strip().splitlines()
    if pattern is None:
        return not lines
    return bool(lines) and all(pattern.match(line) for line in lines)


def _bytes(n) -> str:
    return "missing" if n is None else f"{n:,} B"


# ----------------------------------------------------------------------------- rocjitsu-store

def _rocjitsu_paths(settings) -> tuple:
    prefix = settings.param("prefix").rstrip("/")
    return prefix, f"{prefix}/{HOOK}", f"{prefix}/{TRANSLATOR}", f"{prefix}/{STORE}"


def _rocjitsu_reads(settings) -> dict:
    c = settings.container
    prefix, hook, translator, store = _rocjitsu_paths(settings)
    reads = {"stat": in_container(c, "stat", "-c", STAT_SIZE_FORMAT, "--", prefix, hook, translator, store),
             "count": in_container(c, "sh", "-c", f"ls -A {quote(store)} 2>/dev/null | wc -l"),
             # only the translation trio leaves the container: its environment holds tokens
             "env": in_container(c, "sh", "-c", f"env | grep -E '^({'|'.join(TRIO)})=' || true")}
    if settings.stepping == "B0":  # the only evidence that would make an active prefix on B0 worth a WARN
        reads["log"] = log_through_awk(c, settings.param("log_tail_lines"), COUNT_TRANSLATED)
    return reads


def read_prefix(r, settings) -> dict:
    """What the container holds: sizes, store entry count, environment (raises ContainerMissing)."""
    c = settings.container
    prefix, hook, translator, store = _rocjitsu_paths(settings)
    sizes = parse_stat(exec_stdout(r["stat"], c, STAT_MISSING))
    return {"prefix": prefix, "prefix_present": prefix in sizes, "hook_path": hook, "translator_path": translator,
            "hook": sizes.get(hook), "translator": sizes.get(translator),
            "entries": parse_count(exec_stdout(r["count"], c), "store entry count") if store in sizes else None,
            "env": parse_env(exec_stdout(r["env"], c))}


def env_active(found: dict) -> bool:
    env = found["env"]
    return env.get("HSA_TOOLS_LIB") == found["hook_path"] or \
        env.get("LD_LIBRARY_PATH", "").split(":")[0].rstrip("/") == f"{found['prefix']}/lib"


def judge_a0(found: dict, p) -> list:
    """§2: exact sizes and count; the image's own prefix named as such; environment in its working form."""
    evidence = {"hook": _bytes(found["hook"]), "translator": _bytes(found["translator"]),
                "store entries": found["entries"],
                **{k: found["env"].get(k) for k in TRIO}}
    prefix = found["prefix"]
    if not found["prefix_present"]:
        return [fail(f"{prefix} not found in the container (known issue `FAIL: HOTSWAP=1 but {prefix} not found`; "
                     "lost on docker rm): A0 silicon cannot run the image's B0 objects", remediation=PREFIX,
                     evidence=evidence)]
    image_own = (found["hook"] == p("image_hook_bytes") or found["translator"] == p("image_translator_bytes")
                 or found["entries"] == p("image_store_entries"))
    verdicts = []
    if image_own:
        verdicts.append(fail(
            f"{prefix} is the image's own rocjitsu prefix (hook {_bytes(found['hook'])}, translator "
            f"{_bytes(found['translator'])}, {found['entries']} store entries; need {p('hook_bytes'):,} / "
            f"{p('translator_bytes'):,} / {p('store_entries'):,}): nothing gets translated and every token will "
            "be `!` with HTTP 200 (§1, §2)", remediation=PREFIX, evidence=evidence))
    else:
        for what, got, want in (("hook libhsa_hotswap_rocjitsu.so", found["hook"], p("hook_bytes")),
                                ("translator librocjitsu_gfx1250_b0_to_a0.so.0.3.0", found["translator"],
                                 p("translator_bytes"))):
            if got != want:
                why = " (0 bytes: interrupted docker cp, §14)" if got == 0 else ""
                verdicts.append(fail(f"{what} is {_bytes(got)}, need {want:,} B{why}", remediation=PREFIX,
                                     evidence=evidence))
        if found["entries"] != p("store_entries"):
            verdicts.append(fail(f"translation store has {found['entries']} entries, need {p('store_entries'):,} "
                                 "(a near-empty store translates nothing: every token `!`)", remediation=PREFIX,
                                 evidence=evidence))
    return verdicts


@check(ROCJITSU, title="A0: rocjitsu translation prefix of the right sizes and active; B0: none active",
       scope="node", remediation=(PREFIX, ON_B0, STEPPING), reads=_rocjitsu_reads,
       params={**ROCJITSU_PARAMS,
               "prefix": Param(ROCJITSU_PARAMS["prefix"], validate=lambda v, nodes: _path_problem(v))})
def rocjitsu_store(r, ctx):
    """§1, §2: running the other stepping's code objects does not crash - it answers `!` with HTTP 200."""
    stepping = ctx.settings.stepping
    if stepping is None:
        return fail("silicon stepping not declared for this node; it cannot be read from the board (§1): set "
                    "`stepping: A0` or `stepping: B0` in the inventory", remediation=STEPPING)
    try:
        found = read_prefix(r, ctx.settings)
    except ContainerMissing as exc:
        if stepping == "B0":
            return passed(f"B0 silicon: translation not needed (§1); {exc}, nothing to inspect")
        return fail(f"{exc}: FAIL: HOTSWAP=1 but {_rocjitsu_paths(ctx.settings)[0]} not found - the prefix lives in "
                    "the container (§2)", remediation=PREFIX)
    if stepping == "A0":
        return judge_a0(found, ctx.param) or passed(
            f"A0: {found['prefix']} hook {found['hook']:,} B, translator {found['translator']:,} B, "
            f"{found['entries']:,} store entries (its environment is judged by launch-config)")
    if found["entries"] == ctx.param("store_entries") and env_active(found):
        return judge_b0_active(found, r.get("log"))
    present = f"{found['entries']}-entry prefix present but inactive" if found["prefix_present"] else "no prefix"
    return passed(f"B0 silicon: translation not needed (§1, §0.2); {present}")


def translations_logged(log) -> int | None:
    """`outcome=translated` lines in the container's log (counted on the node), None when it was not read."""
    if log is None or not log.ok:
        return None
    words = log.stdout.split()
    if len(words) != 2 or not words[0].isdigit() or words[1] != "0":  # docker logs failed, or garbled
        return None
    return int(words[0])


def judge_b0_active(found: dict, log):
    """§1: the populated prefix active on B0 is the validated Appendix A configuration - the hook attaches
    and translates nothing. Only translations that actually happened are worth a WARN (§1, §27 item 7)."""
    evidence = {"store entries": found["entries"], "HSA_TOOLS_LIB": found["env"].get("HSA_TOOLS_LIB"),
                "LD_LIBRARY_PATH": found["env"].get("LD_LIBRARY_PATH")}
    translated = translations_logged(log)
    if translated:
        return warn(f"B0 silicon with the populated {found['entries']:,}-entry prefix active and {translated} "
                    f"`{TRANSLATED}` line(s) in the container log: B0 code objects were rewritten for A0, an untested "
                    "configuration (§1, §27 item 7)", remediation=ON_B0,
                    evidence={**evidence, f"{TRANSLATED} lines": translated})
    seen = ("no translation in the container log" if translated == 0
            else "the container log was not readable, so no translation is known")
    return passed(f"B0 silicon with the populated {found['entries']:,}-entry prefix active and {seen}: the validated "
                  "B0 signature, not a fault (§1)", evidence=evidence)


# ----------------------------------------------------------------------------- patch-integrity

def _patch_reads(settings) -> dict:
    c = settings.container
    return {"stat": in_container(c, "stat", "-c", STAT_SIZE_FORMAT, "--", *settings.param("files")),
            "marker": in_container(c, "grep", "-c", "--", settings.param("marker"), settings.param("marker_file"))}


def patch_needed(required: str, image, needs: str) -> tuple:
    """(needed?, why) from the `required` param and the image tag (§0.2: PR #2380 is 20260918-only)."""
    if required == "yes":
        return True, "patch-integrity.required=yes"
    if required == "no":
        return False, "patch-integrity.required=no"
    if image is None:
        return False, ("the inventory declares no `image:`, so whether PR #2380 is needed is unknown; declare it "
                       "or set patch-integrity.required=yes")
    if needs in image:
        return True, f"image {image} is the {needs} / Triton 3.8 image"
    return False, (f"image {image} is not the {needs} / Triton 3.8 image: PR #2380 applies only there "
                   "(§0.2, §14); set patch-integrity.required=yes to check anyway")


@check(PATCH, title="ATOM PR #2380 files at their exact sizes with 3 markers (20260918 image only)",
       scope="node", remediation=PATCH_BAD, reads=_patch_reads,
       params={**PATCH_PARAMS, "required": Param("auto", choices=("auto", "yes", "no")),
               "files": Param(PATCH_PARAMS["files"], validate=lambda files, nodes: _sizes_problem(files)),
               "marker_file": Param(PATCH_PARAMS["marker_file"], validate=lambda v, nodes: _path_problem(v))})
def patch_integrity(r, ctx):
    """§14: a 0-byte file from an interrupted `docker cp` passes every import check; sizes do not lie.
    Whether the patch is needed follows the inventory's image tag (§0.2)."""
    c, p = ctx.settings.container, ctx.param
    needed, why = patch_needed(p("required"), ctx.settings.image, p("image_needs_patch"))
    if not needed:
        return skip(why)
    try:
        sizes = parse_stat(exec_stdout(r["stat"], c, STAT_MISSING))
        count = exec_stdout(r["marker"], c, GREP_COUNT)
    except ContainerMissing as exc:
        return fail(f"{exc}: the PR #2380 files are lost with it (docker rm, §13, §14)")
    evidence = {path: _bytes(sizes.get(path)) for path in p("files")}
    verdicts = []
    for path, want in p("files").items():
        got = sizes.get(path)
        if got == 0:
            verdicts.append(fail(f"{path} is 0 bytes (interrupted docker cp): it imports cleanly and defines "
                                 "nothing (§14)", evidence=evidence))
        elif got != want:
            verdicts.append(fail(f"{path} is {_bytes(got)}, expected {want:,} B", evidence=evidence))
    marker_file = p("marker_file")
    if sizes.get(marker_file):
        got = parse_count(count, f"grep -c {p('marker')}")
        evidence[f"grep -c {p('marker')}"] = got
        if got != p("marker_count"):
            verdicts.append(fail(f"{marker_file} has {got} `{p('marker')}` line(s), expected {p('marker_count')} "
                                 "(patch not applied or applied twice)", evidence=evidence))
    return verdicts or passed(f"PR #2380 files at their expected sizes, {p('marker_count')} markers ({why})",
                              evidence=evidence)
