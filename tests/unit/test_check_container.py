"""rocjitsu-store and patch-integrity judged on plain `docker exec` outputs."""
import subprocess

from k3doctor.checks import container as ct
from k3doctor.checks.container import COUNT_TRANSLATED, LOG_RC

from k3doctor.api import Context, judge_safely
from k3doctor.inventory.types import Settings
from k3doctor.readings import CONTAINER_PID, CommandReading, EngineFactCommand, Readings
from k3doctor.registry import REGISTRY
from k3doctor.results import Status

ROCJITSU, PATCH = REGISTRY.checks["rocjitsu-store"], REGISTRY.checks["patch-integrity"]
PREFIX = "/app/rjprefix"
HOOK, TRANSLATOR = f"{PREFIX}/{ct.HOOK}", f"{PREFIX}/{ct.TRANSLATOR}"
STORE = f"{PREFIX}/{ct.STORE}"
GOOD_ENV = {"LD_LIBRARY_PATH": f"{PREFIX}/lib:/opt/rocm/lib", "HSA_TOOLS_LIB": HOOK, "HSA_HOTSWAP_VERBOSE": "1"}
NO_CONTAINER = "Error response from daemon: No such container: k3ep16"
IMAGE = "rocm/fw-bringup:gfx1250-atom-20260918-ep8"


def run(out, rc=0, err=""):
    return CommandReading("docker exec ...", rc, out, err)


def stat_out(sizes):
    return "".join(f"{size} {path}\n" for path, size in sizes.items() if size is not None)


def prefix_readings(hook=129112, translator=8002216, entries=1976, env=None, prefix=True, missing_container=False):
    if missing_container:
        gone = run("", 1, NO_CONTAINER)
        return Readings({"stat": gone, "count": gone, "env": gone})
    sizes = {PREFIX: 4096 if prefix else None, HOOK: hook, TRANSLATOR: translator,
             STORE: 4096 if entries is not None else None}
    missing = [p for p, s in sizes.items() if s is None]
    env_text = "".join(f"{k}={v}\n" for k, v in {"PATH": "/bin", **(GOOD_ENV if env is None else env)}.items())
    return Readings({"stat": run(stat_out(sizes), 1 if missing else 0,
                                 "".join(f"stat: can't stat '{p}': No such file or directory\n" for p in missing)),
                     "count": run(f"{entries or 0}\n"), "env": run(env_text)})


def judge(chk, r, stepping="A0", image=IMAGE, **params):
    settings = Settings(container="k3ep16", stepping=stepping, image=image, checks={chk.name: params})
    return judge_safely(chk.judge, r, Context(chk, settings, node="ct14"))


def bad(verdicts):
    return [(v.status, v.remediation) for v in verdicts if v.status != Status.PASS]


def test_a0_with_required_prefix_and_env_passes():
    [v] = judge(ROCJITSU, prefix_readings())
    assert v.status == Status.PASS
    assert v.message == ("A0: /app/rjprefix hook 129,112 B, translator 8,002,216 B, 1,976 store entries "
                         "(its environment is judged by launch-config)")


def test_a0_with_image_own_prefix_is_named_known_bad():
    [v] = judge(ROCJITSU, prefix_readings(143217, 7531385, 170))
    assert (v.status, v.remediation) == (Status.FAIL, "ROCJITSU-PREFIX")
    assert "image's own rocjitsu prefix" in v.message
    assert "every token will be `!` with HTTP 200" in v.message
    assert "need 129,112 / 8,002,216 / 1,976" in v.message


def test_a0_zero_byte_hook_and_short_store_fail_each():
    verdicts = judge(ROCJITSU, prefix_readings(hook=0, entries=1000))
    assert bad(verdicts) == [(Status.FAIL, "ROCJITSU-PREFIX")] * 2
    assert "0 bytes: interrupted docker cp" in verdicts[0].message
    assert "1000 entries, need 1,976" in verdicts[1].message


def test_a0_prefix_missing_uses_known_issue_string():
    [v] = judge(ROCJITSU, prefix_readings(None, None, None, prefix=False))
    assert v.status == Status.FAIL and "FAIL: HOTSWAP=1 but /app/rjprefix not found" in v.message


def test_a0_container_missing_fails_naming_it():
    [v] = judge(ROCJITSU, prefix_readings(missing_container=True))
    assert v.status == Status.FAIL
    assert v.message.startswith("container k3ep16 does not exist on this node: FAIL: HOTSWAP=1 but /app/rjprefix")


def test_sizes_are_params():
    verdicts = judge(ROCJITSU, prefix_readings(hook=1, translator=2, entries=3), hook_bytes=1, translator_bytes=2,
                     store_entries=3, image_store_entries=-1)
    assert bad(verdicts) == []


def test_b0_passes_with_info_without_a_prefix_or_container():
    [v] = judge(ROCJITSU, prefix_readings(None, None, None, prefix=False, env={}), stepping="B0")
    assert v.status == Status.PASS and "translation not needed" in v.message
    [v] = judge(ROCJITSU, prefix_readings(missing_container=True), stepping="B0")
    assert v.status == Status.PASS


# §2 runtime proof line shapes (stderr of the server, prefix [hsa-hotswap-rj])
HOOK_LOG = "[hsa-hotswap-rj] installed eager gfx1250 B0-to-A0 hook\n"
TRANSLATED_LOG = ("[hsa-hotswap-rj] eager translation source_id=fnv1a64:0123456789abcdef input_revision=b0 "
                  "output_revision=a0 outcome=translated changed=12\n")


def with_log(r, log, rc=0):
    """The B0 log reading as the node answers it: the real awk program counting over the log's text."""
    counted = subprocess.run(["awk", COUNT_TRANSLATED], input=f"{log}\n{LOG_RC}{rc}\n", capture_output=True,
                             text=True, timeout=30, check=True).stdout
    return Readings({**r.raw(), "log": run(counted, 0, "")})


def test_b0_with_the_populated_prefix_active_is_the_validated_signature_before_launch():
    """§1: the populated prefix with HSA_TOOLS_LIB still set performs 0 translations on B0: not a fault."""
    for r in (prefix_readings(), with_log(prefix_readings(), HOOK_LOG * 16)):
        [v] = judge(ROCJITSU, r, stepping="B0")
        assert v.status == Status.PASS and "validated B0 signature" in v.message
    [v] = judge(ROCJITSU, with_log(prefix_readings(), HOOK_LOG), stepping="B0")
    assert "1,976-entry prefix active and no translation in the container log" in v.message
    [v] = judge(ROCJITSU, with_log(prefix_readings(), "Error: configured logging driver does not support reading",
                                   rc=1), stepping="B0")
    assert v.status == Status.PASS and "container log was not readable" in v.message
    [v] = judge(ROCJITSU, prefix_readings(env={}), stepping="B0")
    assert v.status == Status.PASS and "1976-entry prefix present but inactive" in v.message


def test_b0_warns_only_when_translations_actually_happened():
    [v] = judge(ROCJITSU, with_log(prefix_readings(), HOOK_LOG + TRANSLATED_LOG * 3), stepping="B0")
    assert (v.status, v.remediation) == (Status.WARN, "ROCJITSU-ON-B0")
    assert "3 `outcome=translated` line(s) in the container log" in v.message and "untested" in v.message
    assert v.evidence["outcome=translated lines"] == 3


def test_b0_reads_the_container_log_a0_does_not():
    b0 = ROCJITSU.readings_for(Settings(container="k3ep16", stepping="B0"))
    assert b0["log"].argv[:2] == ("sh", "-c") and "docker logs --tail 200000 -- k3ep16 2>&1" in b0["log"].argv[2]
    # only where the engine knows the container: no docker CLI on a node without it
    assert (type(b0["log"]), b0["log"].fact, b0["log"].container) == (EngineFactCommand, CONTAINER_PID, "k3ep16")
    assert "log" not in ROCJITSU.readings_for(Settings(container="k3ep16", stepping="A0"))


def test_undeclared_stepping_fails_asking_to_declare_it():
    [v] = judge(ROCJITSU, prefix_readings(), stepping=None)
    assert (v.status, v.remediation) == (Status.FAIL, "STEPPING-UNDECLARED")
    assert "cannot be read from the board" in v.message


def test_docker_cli_missing_is_an_error():
    gone = run("", 127, "sh: docker: not found")
    [v] = judge(ROCJITSU, Readings({"stat": gone, "count": gone, "env": gone}))
    assert v.status == Status.ERROR and "command not found" in v.message


def test_reads_quote_the_store_dir_and_name_the_container():
    specs = ROCJITSU.readings_for(Settings(container="k3 ep", checks={"rocjitsu-store": {"prefix": "/x y/"}}))
    assert specs["stat"].argv[:3] == ("docker", "exec", "k3 ep")
    assert specs["count"].argv[-1] == "ls -A '/x y/share/rocjitsu/translations/gfx1250-b0-a0/v1' 2>/dev/null | wc -l"


MLA = "/app/ATOM/atom/model_ops/attention_mla.py"
FILES = {"/app/ATOM/atom/model_ops/mla_unfused_gather.py": 7499, "/app/ATOM/atom/utils/envs.py": 47967,
         MLA: 146235}  # §14, for gfx1250-atom-20260918-ep8 (literal: not the check's own table)


def patch_readings(sizes=None, marker="3\n", exists=True):
    if not exists:
        gone = run("", 1, NO_CONTAINER)
        return Readings({"stat": gone, "marker": gone})
    sizes = {**FILES, **(sizes or {})}
    missing = [p for p, s in sizes.items() if s is None]
    return Readings({"stat": run(stat_out(sizes), 1 if missing else 0,
                                 "".join(f"stat: cannot statx '{p}': No such file or directory\n" for p in missing)),
                     "marker": run(marker)})


def test_patch_at_expected_sizes_passes():
    [v] = judge(PATCH, patch_readings())
    assert v.status == Status.PASS and "is the 20260918 / Triton 3.8 image" in v.message


def test_zero_byte_file_fails_even_though_it_would_import():
    path = "/app/ATOM/atom/model_ops/mla_unfused_gather.py"
    [v] = judge(PATCH, patch_readings({path: 0}))
    assert (v.status, v.remediation) == (Status.FAIL, None)  # runner adds PATCH-2380
    assert v.message == f"{path} is 0 bytes (interrupted docker cp): it imports cleanly and defines nothing (§14)"


def test_wrong_size_missing_file_and_marker_count():
    env_py = "/app/ATOM/atom/utils/envs.py"
    verdicts = judge(PATCH, patch_readings({env_py: None}, marker="2\n"))
    assert [(v.status, v.message) for v in verdicts] == [
        (Status.FAIL, f"{env_py} is missing, expected 47,967 B"),
        (Status.FAIL, f"{MLA} has 2 `use_unfused_gather_kv_b_proj` line(s), expected 3 (patch not applied or "
                      "applied twice)")]


def test_other_image_skips_with_reason_and_required_overrides():
    [v] = judge(PATCH, patch_readings(), image="rocm/atom:optimized-triton39")
    assert v.status == Status.SKIP and "PR #2380 applies only there" in v.message
    assert judge(PATCH, patch_readings(sizes={MLA: 0}), image="other", required="yes")[0].status == Status.FAIL
    [v] = judge(PATCH, patch_readings(), image=None)
    assert v.status == Status.SKIP and "declares no `image:`" in v.message
    assert judge(PATCH, patch_readings(), required="no")[0].status == Status.SKIP


def test_patch_container_missing_fails():
    [v] = judge(PATCH, patch_readings(exists=False))
    assert v.status == Status.FAIL and v.message.startswith("container k3ep16 does not exist on this node: the PR")


def test_garbled_stat_is_an_error():
    r = patch_readings()
    r._results["stat"] = run("12 /a\nnot a stat line\n")
    assert judge(PATCH, r)[0].status == Status.ERROR


DAEMON_DOWN = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
SOCKET_DENIED = ("permission denied while trying to connect to the Docker daemon socket at "
                 "unix:///var/run/docker.sock: connect: permission denied")


def test_docker_failing_with_exit_1_is_an_error_not_missing_files():
    for err in (DAEMON_DOWN, SOCKET_DENIED):
        gone = run("", 1, err)
        [v] = judge(PATCH, Readings({"stat": gone, "marker": gone}))
        assert v.status == Status.ERROR and err[:40] in v.message
        [v] = judge(ROCJITSU, Readings({"stat": gone, "count": gone, "env": gone}))
        assert v.status == Status.ERROR and err[:40] in v.message


def test_only_the_tools_own_missing_file_lines_are_tolerated():
    mla_missing = f"grep: {MLA}: No such file or directory"
    r = patch_readings({MLA: None})
    r._results["marker"] = run("", 2, mla_missing)
    assert [(v.status, v.message) for v in judge(PATCH, r)] == [(Status.FAIL, f"{MLA} is missing, expected 146,235 B")]
    r._results["marker"] = run("", 2, f"{mla_missing}\n{DAEMON_DOWN}")
    assert judge(PATCH, r)[0].status == Status.ERROR
    r = patch_readings()
    r._results["marker"] = run("", 1, DAEMON_DOWN)  # grep's own exit 1 (no match) is silent
    assert judge(PATCH, r)[0].status == Status.ERROR
    r._results["marker"] = run("0\n", 1)
    assert "has 0 `use_unfused_gather_kv_b_proj` line(s)" in judge(PATCH, r)[0].message
    r = patch_readings({MLA: None})
    r._results["stat"] = run(r["stat"].stdout, 1, f"{r['stat'].stderr}{DAEMON_DOWN}\n")
    assert judge(PATCH, r)[0].status == Status.ERROR
    r._results["stat"] = run(r["stat"].stdout, 1, "")  # stat never fails silently
    assert judge(PATCH, r)[0].status == Status.ERROR
