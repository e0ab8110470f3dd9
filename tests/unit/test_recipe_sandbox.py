"""`recipe diff --script` contained (issue 31): the script's shell runs in the bubblewrap sandbox
(k3doctor/recipes/sandbox.py), as root and as an unprivileged user; every escape form leaves its canary outside
the sandbox uncreated; what the script starts ends with the run; each launch shape gets its verdict through the
real CLI."""
import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from k3doctor import recipes
from k3doctor.recipes import diff as recipe_diff
from k3doctor.recipes import nodes as recipe_nodes
from k3doctor.recipes import records, sandbox

pytestmark = pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap is not installed")
ROOT = Path(__file__).resolve().parents[2]
FIXED = ROOT / "tests/unit/samples/agentx/kimik3_mi355x_atom_agentic_fixed.sh"
RECIPE = "kimi-k3-mi355x-agentx"
SERVER = "python3 -m atom.entrypoints.openai_server"
# As nobody: k3doctor itself runs as uid 65534 (runuser), with this very interpreter. Where it lives under a
# directory nobody may not enter (a pyenv under /root, mode 700), a private mount namespace (unshare -m, root's)
# puts a tmpfs over that directory with only the interpreter's tree bound back at the same path - nothing on the
# machine changes. (As root, k3doctor drops to uid 65534 before bwrap anyway; this is k3doctor run by a user.)
_AS_NOBODY = r"""set -e
hidden=$1 prefix=$2 holder=$3; shift 3
if [ -n "$hidden" ]; then
    mount --bind "$prefix" "$holder"
    mount -t tmpfs -o mode=755,size=1m k3-nobody-test "$hidden"
    mkdir -p "$prefix"
    mount --bind "$holder" "$prefix"
fi
exec runuser -u nobody -- "$@"
"""


def _closed_ancestor(path: str) -> str:
    """The first directory above ``path`` that others may not enter, else ''."""
    parts = Path(path).parts
    for i in range(2, len(parts) + 1):
        d = Path(*parts[:i])
        if d.is_dir() and not d.stat().st_mode & 0o001:
            return str(d)
    return ""


HOLDER = tempfile.mkdtemp(prefix="k3-nobody-holder-")
atexit.register(os.rmdir, HOLDER)
NOBODY = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _AS_NOBODY, "sh",
          _closed_ancestor(sys.base_prefix), sys.base_prefix, HOLDER]


def _nobody_unavailable() -> str:
    """Why k3doctor cannot be run as nobody here ('' where it can): said in the skip, never silent."""
    if os.geteuid() != 0:
        return "the tests run as a non-root user already: runuser/unshare need root"
    try:
        probe = subprocess.run([*NOBODY, "env", f"PYTHONPATH={ROOT}", sys.executable, "-c",
                                "import os, click, yaml, k3doctor.cli; print(os.geteuid())"],
                               capture_output=True, text=True, timeout=60, cwd=ROOT)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unshare/runuser could not run ({exc})"
    if probe.stdout.strip() != "65534":
        return f"uid nobody could not run this Python with k3doctor: {(probe.stderr.strip() or '?').splitlines()[-1]}"
    return ""


_WHY_NOT_NOBODY = _nobody_unavailable()
USERS = ["root", pytest.param("nobody", marks=pytest.mark.skipif(bool(_WHY_NOT_NOBODY), reason=_WHY_NOT_NOBODY))]


@pytest.fixture
def place():
    """A directory every user may write (so a canary an escape reaches *would* appear, as root or nobody)."""
    d = Path(tempfile.mkdtemp(prefix="k3-sandbox-test-"))
    d.chmod(0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def diff(script, *args, user="root", conc=None, env=None, timeout=150):
    run_env = {k: v for k, v in os.environ.items() if k != "CONC"}
    run_env.update({"CONC": str(conc)} if conc else {})
    run_env.update(env or {})
    prefix = [] if user == "root" else [*NOBODY, "env", *[f"{k}={v}" for k, v in run_env.items()]]
    return subprocess.run([*prefix, sys.executable, "-m", "k3doctor.cli", "recipe", "diff", "--script", str(script),
                           *args], capture_output=True, text=True, env=run_env, timeout=timeout, cwd=ROOT)


def write(place: Path, text: str) -> Path:
    script = place / "run.sh"
    script.write_text(text)
    script.chmod(0o755)
    return script


ESCAPES = {  # escape class of issue 31 -> shell that would create the canary C<n> if it reached the machine
    "PATH changed": "export PATH=/usr/bin:$PATH; touch {c}",
    "PATH for one command": "PATH=/bin touch {c}",
    "source an env file": "echo 'echo x > {c}' > ./envfile; source ./envfile",
    "eval": "eval 'echo x > {c}'",
    "command -p": "command -p touch {c}",
    "hash -p": "hash -p /usr/bin/python3 py; py -c \"open('{c}', 'w')\"; /usr/bin/python3 -c \"open('{c}', 'w')\"",
    "caller's exported function": "module load rocm",
    "command_not_found_handle": "command_not_found_handle() {{ echo x > {c}; }}; no-such-program",
    "redirection": "echo x > {c}",
    "here-doc": "cat > {c} <<EOF\nx\nEOF",
    "sort -o": "sort -o {c} /dev/null",
    "awk print >": "awk 'BEGIN {{ print \"x\" > \"{c}\" }}'",
    "awk system()": "awk 'BEGIN {{ system(\"touch {c}\") }}'",
    "mkdir -p": "mkdir -p {c}",
    "background job outliving the run": "set -m; (for i in $(seq 200000); do :; done; echo x > {c}) &",
}


@pytest.mark.parametrize("user", USERS)
def test_no_escape_reaches_the_machine(place, user):
    canaries = {name: place / f"canary{i}" for i, name in enumerate(ESCAPES)}
    outside = place / "outside.txt"
    outside.write_text("orig\n")
    outside.chmod(0o666)
    body = "\n".join(f"(\n{shell.format(c=canaries[name])}\n) || true" for name, shell in ESCAPES.items())
    script = write(place, f"{body}\nsed -i s/orig/changed/ {outside} || true\n{SERVER} --model m &\n")
    func = {"BASH_FUNC_module%%": "() {  touch %s; }" % canaries["caller's exported function"]}
    run = diff(script, "--recipe", RECIPE, "--concurrency", "1", "--timeout", "3", user=user, env=func)
    assert run.returncode == 1 and "starts no model server" not in run.stderr, run.stderr
    time.sleep(1.5)  # the background job would write after its loop
    assert [name for name, c in canaries.items() if c.exists()] == []
    assert outside.read_text() == "orig\n"
    assert not [p for p in Path("/proc").glob("[0-9]*/cmdline") if str(script).encode() in _read(p)]


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


@pytest.mark.parametrize("user", USERS)
def test_no_network(place, user):
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    port = server.getsockname()[1]
    script = write(place, f"echo hi > /dev/tcp/127.0.0.1/{port} || true\n{SERVER} --model m\n")
    run = diff(script, "--recipe", RECIPE, "--concurrency", "1", "--timeout", "5", user=user)
    assert run.returncode == 1, run.stderr
    with pytest.raises(socket.timeout):
        server.accept()
    server.close()


@pytest.mark.parametrize("bomb", ["f() { f | f & }; f", "while :; do echo flood; done", "yes > big; yes > /tmp/big"])
def test_fork_and_print_bombs_end_by_their_bounds(place, bomb):
    """Outcomes, not times (a loaded 2-core box): the run ends (the subprocess timeout is the only clock), the
    server recorded before the bomb is judged, the output stays small, nothing is left running."""
    script = write(place, f"{SERVER} --model m\n{bomb}\n")
    run = diff(script, "--recipe", RECIPE, "--concurrency", "1", "--timeout", "5", timeout=120)
    assert run.returncode == 1 and "starts no model server" not in run.stdout + run.stderr, run.stdout + run.stderr
    assert len(run.stdout) < 20000
    if "f()" in bomb:
        assert "ERROR the script ran into the process limit (256 processes)" in run.stdout, run.stdout
    time.sleep(0.5)
    assert not [p for p in Path("/proc").glob("[0-9]*/cmdline") if str(script).encode() in _read(p)]


def test_nothing_is_written_outside_the_capped_scratch(place):
    """The sandbox's root, /dev and /dev/shm are no unbounded store in the machine's memory: the root and /dev are
    read-only, /dev/shm is capped like the scratch (16 MiB); what the script wrote comes back as a variable."""
    script = write(place, "for f in /big /dev/big /dev/shm/big /.k3/big; do yes > $f; done\n"
                          "export WROTE=$(cat /big /dev/big /dev/shm/big /.k3/big 2>/dev/null | wc -c)\n"
                          f"{SERVER} --model m\n")
    run = diff(script, "--recipe", RECIPE, "--concurrency", "1", "--format", "json", timeout=120)
    [point] = json.loads(run.stdout)["points"]
    wrote = {d["name"]: d["found"] for d in point["differences"]}["WROTE"]
    assert int(wrote) <= 16 << 20, wrote


def test_a_fork_bomb_before_the_server_is_an_error_naming_the_process_limit(place):
    """The bound hit is said (never exit 3, as if the script were bad input): the server behind the bomb is judged
    where its call got through, else the ERROR says what was not read."""
    script = write(place, f"f() {{ f | f & }}; f\n{SERVER} --model m\n")
    run = diff(script, "--recipe", RECIPE, "--concurrency", "1", "--timeout", "5", timeout=120)
    assert run.returncode in (1, 2) and "ERROR the script ran into the process limit (256 processes)" in run.stdout, \
        run.stdout + run.stderr


def test_a_script_that_kills_every_process_it_can_still_reports(place):
    """The runner is the sandbox's PID 1: `kill -KILL -1` from the script cannot end it, so what was recorded is read."""
    run = diff(_fixed(place, before="builtin kill -KILL -1 || true\n"), "--recipe", RECIPE, "--concurrency", "1",
               conc=1)
    assert run.returncode == 0 and "identical on every server flag" in run.stdout, run.stdout + run.stderr


def _fixed(place, old=SERVER, new=SERVER, before=""):
    return write(place, FIXED.read_text().replace("set -euo pipefail\n", f"set -euo pipefail\n{before}")
                 .replace(old, new))


EXPORTED_AT_1 = ["PYTHONNOUSERSITE", "AITER_LOG_LEVEL", "AITER_SITUV2_A4W4", "AITER_QUICK_REDUCE_QUANTIZATION",
                 "AITER_FLYDSL_STAGE2_FP8", "ATOM_MLA_MAX_SPLIT_PER_BATCH", "ATOM_STATE_CHECKPOINT_DEMAND",
                 "ATOM_ENABLE_REPLAYSSM"]


@pytest.mark.parametrize("shape, new, before, code, through", [
    ("exec", f"exec {SERVER}", "", 0, None),
    ("command -v preflight", SERVER, "command -v python3 >/dev/null || exit 1\n", 0, None),
    ("absolute path after PATH change", f"PATH=/nowhere /usr/bin/{SERVER}", "", 0, None),
    ("nohup, timeout, numactl, taskset", f"nohup timeout 3600 numactl --cpunodebind=0 taskset -c 0-63 {SERVER}", "",
     0, None),
    ("docker run without -e", f"docker run --rm --network host img:tag {SERVER}", "", 1, "docker run"),
    ("docker run with -e", "docker run --rm " + " ".join(f"-e {n}" for n in EXPORTED_AT_1) + f" img {SERVER}", "",
     0, None),
    ("srun --export=NONE", f"srun --export=NONE -N 1 {SERVER}", "", 1, "srun"),
    ("srun --export=ALL,VAR=", f"srun --export=ALL,AITER_LOG_LEVEL=WARNING {SERVER}", "", 0, None),
    ("env -i", f"env -i PATH=/usr/bin {SERVER}", "", 1, "env"),
    ("path built at run time", SERVER.replace("python3", '"$p"'), "p=/op; p=${p}t/venv/bin/python3\n", 0, None),
    ("ssh", f"ssh node1 {SERVER}", "", 1, "ssh"),
    ("pkill/pgrep lines", SERVER, "pkill -f atom.entrypoints.openai_server || true\n"
     "pgrep -af atom.entrypoints.openai_server || true\n", 0, None),
])
def test_each_launch_shape_gets_its_verdict(place, shape, new, before, code, through):
    run = diff(_fixed(place, new=new, before=before), "--recipe", RECIPE, "--concurrency", "1", "--format", "json",
               conc=1)
    assert run.returncode == code, run.stdout + run.stderr
    if through:
        point = json.loads(run.stdout)["points"][0]
        missing = {d["name"]: d["found"] for d in point["differences"] if d["kind"] == "missing"}
        assert missing["AITER_LOG_LEVEL"] == f"(unset: the script exports it, {through} does not pass it)"


def test_a_program_the_sandbox_cannot_have_is_named_never_a_silent_no_server(place):
    """A path built at run time under a directory the sandbox keeps for itself (/lib) cannot be made a recorder:
    the ERROR names it, exit 2 (not read), not "starts no model server" as if the script had none."""
    script = write(place, "p=/li; p=${p}b/k3/python3\n$p -m atom.entrypoints.openai_server --model m\n")
    run = diff(script, "--recipe", RECIPE, "--concurrency", "1")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "ERROR the script tried to run a program that does not exist inside the sandbox: /lib/k3/python3" \
        in run.stdout


def test_a_line_that_only_names_the_entry_point_is_no_server(place):
    run = diff(write(place, "pkill -f atom.entrypoints.openai_server\nwatch pgrep -af atom.entrypoints\n"),
               "--recipe", RECIPE, "--concurrency", "1")
    assert run.returncode == 3 and "starts no model server" in run.stderr and "pkill" in run.stderr


def test_two_servers_are_each_judged(place):
    script = _fixed(place, new=f"{SERVER} --model other &\n{SERVER}")
    run = diff(script, "--recipe", RECIPE, "--concurrency", "1", conc=1)
    assert run.returncode == 1 and "server 1 of 2" in run.stdout and "server 2 of 2" in run.stdout
    assert "the script starts 2 model servers: each is judged" in run.stdout


def test_the_callers_exported_functions_and_locale_are_no_difference(place):
    env = {"BASH_FUNC_module%%": "() {  eval $(/usr/bin/lmod bash \"$@\"); }", "BASH_FUNC_ml%%": "() {  module ml; }",
           "LC_NUMERIC": "de_DE.UTF-8", "LC_ALL": "de_DE.UTF-8"}
    run = diff(FIXED, "--recipe", RECIPE, "--concurrency", "8", conc=8, env=env)
    assert run.returncode == 0 and "identical on every server flag" in run.stdout, run.stdout + run.stderr


@pytest.mark.parametrize("timeout", ["nan", "inf", "-1", "0"])
def test_the_timeout_is_finite(timeout):
    run = diff(FIXED, "--recipe", RECIPE, "--timeout", timeout, conc=1)
    assert run.returncode == 3 and "Traceback" not in run.stderr


def test_past_the_call_bound_an_error_says_so(place):
    """The recorder is O(1) (~2,100 calls take seconds, not minutes); --timeout is only a generous ceiling for a
    loaded box. The server's call is the 2,101st: not judged, and the ERROR says so (exit 2, never "no server")."""
    script = write(place, f"for i in $(seq 2100); do curl -s localhost; done\n{SERVER} --model m\n")
    run = diff(script, "--recipe", RECIPE, "--concurrency", "1", "--timeout", "240", timeout=300)
    assert run.returncode == 2 and "ERROR the script made more than 2000 program calls (2101)" in run.stdout, \
        run.stdout + run.stderr


SECRETS = ("hf_abcdefghijklmnopqrstuvwx", "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY",
           "hunter2pw", "sk-abcdefghijklmnopqrstuvwxyz")


def test_secrets_are_never_printed_in_script_mode(place):
    script = _fixed(place, new=f"{SERVER} --api-key {SECRETS[4]} --hf-token {SECRETS[0]}",
                    before=f"export HF_TOKEN={SECRETS[0]} AWS_ACCESS_KEY_ID={SECRETS[1]}\n"
                           f"export AWS_SECRET_ACCESS_KEY={SECRETS[2]}\n"
                           f"export LMCACHE_REMOTE_URL=redis://user:{SECRETS[3]}@cache:6379\necho {SECRETS[3]} >&2\n")
    for fmt in ("table", "json"):
        run = diff(script, "--recipe", RECIPE, "--concurrency", "1", "--format", fmt, conc=1)
        assert run.returncode == 1 and "<redacted>" in run.stdout
        assert not [s for s in SECRETS if s in run.stdout + run.stderr]


def test_secret_flags_are_never_printed_in_nodes_mode():
    recipe = recipes.load(RECIPE)
    found = recipe_nodes.resolved(recipe, ["python3", "-m", "atom.entrypoints.openai_server", "--api-key",
                                           SECRETS[4]], {"LMCACHE_REMOTE_URL": f"redis://u:{SECRETS[3]}@h:1"}, set(),
                                  None)
    text = recipe_diff.to_json(recipe, "node", recipe_diff.diff(recipe, found, 1))
    assert "<redacted>" in text and not [s for s in SECRETS if s in text]


def _script_for(point, level="WARNING") -> str:
    """A launch that sets exactly what the recipe point names (a real NIC name for the placeholder; for "*" any
    value, but AITER_LOG_LEVEL a level aiter knows, which the aiter-log-level rule judges (§16, §29))."""
    value = {recipes.ANY: "x", recipes.DATA_IF: "ens51f0np0"}
    chosen = {n: value.get(v, v) for n, v in point.env.items() if v is not None}
    chosen.update({"AITER_LOG_LEVEL": level} if "AITER_LOG_LEVEL" in point.env else {})
    lines = [f"export {n}='{v}'" for n, v in chosen.items() if v is not None]
    args = [a for n, v in point.args.items() if v is not None
            for a in ([n] if v is True else [n, f"'{value.get(v, v)}'"])]
    return "\n".join(lines + [f"{SERVER} {' '.join(args)}"]) + "\n"


@pytest.mark.parametrize("name", ["gfx1250-config-a", "gfx1250-config-b", "gfx1250-optimized-tier-a",
                                  "gfx1250-optimized-tier-b"])
def test_the_gfx1250_recipes_with_a_real_nic_name_are_identical(place, name):
    recipe = recipes.load(name)
    point = recipe.points[0]
    args = ["--recipe", name] + (["--concurrency", str(point.concurrency)] if point.concurrency else [])
    run = diff(write(place, _script_for(point)), *args)
    assert run.returncode == 0 and "identical on every server flag" in run.stdout, run.stdout + run.stderr
    assert "<data-plane interface> taken as any non-empty interface name" in run.stdout


@pytest.mark.parametrize("level, kind", [(None, "missing"), ("WARN", "rule")])
def test_a_gfx1250_launch_without_a_valid_aiter_log_level_warns_once(place, level, kind):
    """§16: AITER_LOG_LEVEL is absent from the wide-EP recipe's env but wanted set (WARN if unset); §29: the value
    must be a level aiter knows. Named once: on its difference, or as the rule's finding."""
    point = recipes.load("gfx1250-config-a").points[0]
    run = diff(write(place, _script_for(point, level)), "--recipe", "gfx1250-config-a", "--format", "json")
    assert run.returncode == 1, run.stdout + run.stderr
    [judged] = json.loads(run.stdout)["points"]
    missing = [d["name"] for d in judged["differences"]]
    warned = [r["subject"] for r in judged["rules"] if r["status"] == "WARN"]
    assert (missing, warned) == ((["AITER_LOG_LEVEL"], []) if kind == "missing" else ([], ["AITER_LOG_LEVEL"]))


def test_a_record_cut_short_or_a_full_store_is_an_error():
    """The record store filled (the recorder's OVERFLOW mark, or a record without its END): said, with the count."""
    whole = b"R 1-1.rec 8\nK3REC\x002\x00curl\x00-s\x001\x00A=1\x000\x00END\x00"
    cut = b"R 2-1.rec 3\nK3REC\x002\x00curl\x00"
    for data in (b"X 0\nO\nE\n\x00" + whole + b"END\n", b"X 0\nE\n\x00" + whole + cut + b"END\n"):
        ran = records.parse_records(data, {})
        assert [c.argv for c in ran.calls] == [["curl", "-s"]] and ran.calls[0].env == {"A": "1"}
        assert ran.errors == ["the sandbox's record store (32 MiB) filled after 1 program calls: the calls past "
                              "that were not recorded, a launch among them is not compared"]
    assert records.parse_records(b"X 0\nE\n\x00" + whole + b"END\n", {}).errors == []


@pytest.mark.skipif(not shutil.which("ldd"), reason="no ldd to compare with")
def test_the_libraries_bound_are_what_ldd_lists():
    """The tools' libraries come from each tool's own ld.so (fast); they must be exactly ldd's."""
    out = subprocess.run(["ldd", *sorted(set(sandbox._tools().values()))], capture_output=True, text=True).stdout
    listed = {w for line in out.splitlines() for w in line.split() if w.startswith("/") and not w.endswith(":")}
    assert {p for p in listed if os.path.exists(p)} <= set(sandbox._libraries())
