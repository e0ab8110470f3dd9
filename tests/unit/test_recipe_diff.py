"""`k3doctor recipe diff --script`: the seed's dry-run diff (reference §30) on scripts written the way the
recipe's own is (exports, a `case` per concurrency, bash integer division), through the real CLI and its
JSON read back by json.loads; the script's shell code runs under bash with every other command recorded."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from k3doctor.recipes import diff as recipe_diff

AGENTX = Path(__file__).with_name("samples") / "agentx"
GAPS, FIXED = AGENTX / "kimik3_mi355x_atom_agentic_gaps.sh", AGENTX / "kimik3_mi355x_atom_agentic_fixed.sh"
RECIPE = "kimi-k3-mi355x-agentx"


def diff(script, *args, conc=None, env=None, timeout=60):
    run_env = {k: v for k, v in os.environ.items() if k != "CONC"}
    run_env.update({"CONC": str(conc)} if conc else {})
    run_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "k3doctor.cli", "recipe", "diff", "--script", str(script), *args],
                          capture_output=True, text=True, env=run_env, timeout=timeout)


def test_the_seeds_three_findings_on_the_script_with_its_gaps():
    run = diff(GAPS, "--recipe", RECIPE, "--concurrency", "8", "--format", "json", conc=8)
    assert run.returncode == 1, run.stderr
    [point] = json.loads(run.stdout)["points"]
    assert [(d["name"], d["kind"], d["expected"], d["found"]) for d in point["differences"]] == [
        ("AITER_LOG_LEVEL", "missing", "WARNING", "(unset)"),
        ("LMCACHE_MAX_LOCAL_CPU_SIZE", "other value", "32", "31")]
    dram = point["differences"][1]
    assert "floor(min(3,095,781, 2,861,022) MiB x 1,048,576 x 0.086 x TP 8 / 8 GPUs / 1e9) = floor(257.99) = 257 GB; " \
           "257 // TP 8 = 32 GB per rank; 31 is what dram-utilization 0.085 gives (254 // 8 = 31)" in dram["rule"]
    assert "aggregate handed to a rank hangs" in dram["why"]
    assert [(d["name"], d["found"], d["expected"]) for d in point["deviations"]] == [
        ("OFFLOAD_PROFILE", "(unset)", "upstream 1"),
        ("--spec-decode-acceptance-length", "2.51", "upstream --spec-decode-acceptance-rate 0.77")]
    assert [(n["name"], n["found"]) for n in point["noops"]] == [("--host", "0.0.0.0")]
    assert "AITER_LOG_LEVEL" not in {r["subject"] for r in point["rules"]}  # named once, on its difference


@pytest.mark.parametrize("conc", [1, 4, 8, 10])
def test_the_corrected_script_is_identical_at_every_point(conc):
    run = diff(FIXED, "--recipe", RECIPE, "--concurrency", str(conc), conc=conc)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"== concurrency {conc}: identical on every server flag and every environment variable " \
           "(no-ops and deviations aside)" in run.stdout
    assert "no-op       --host" in run.stdout and "BLOCK" not in run.stdout and "WARN" not in run.stdout


def test_without_a_concurrency_every_point_is_diffed_and_the_best_named():
    run = diff(FIXED, "--recipe", RECIPE, conc=4)
    assert run.returncode == 0 and run.stdout.count("== concurrency") == 4
    assert "best match: concurrency 4 (0 difference(s))" in run.stdout
    report = json.loads(diff(GAPS, "--recipe", RECIPE, "--format", "json", conc=10).stdout)
    assert report["best_concurrency"] == 10 and report["identical"] is False


def test_an_extra_variable_and_a_flag_the_recipe_wants_absent_are_named(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(FIXED.read_text().replace("export ATOM_STATE_CHECKPOINT_DEMAND=0",
                                                "export ATOM_STATE_CHECKPOINT_DEMAND=0\nexport MY_SITE_FLAG=1")
                      .replace("--block-size 128", "--block-size 128 --max-model-len 16384"))
    point = json.loads(diff(script, "--recipe", RECIPE, "--concurrency", "1", "--format", "json",
                            conc=1).stdout)["points"][0]
    assert [(d["name"], d["kind"], d["found"]) for d in point["differences"]] == [
        ("MY_SITE_FLAG", "extra", "1"), ("--max-model-len", "extra", "16384")]


def test_nothing_real_runs_and_wrapped_servers_are_found(tmp_path):
    mark = tmp_path / "touched"
    script = tmp_path / "run.sh"
    script.write_text(f"touch {mark}\nrm -rf {tmp_path}/x\n"
                      "docker run -e AITER_LOG_LEVEL=ERROR --rm img env PYTHONHASHSEED=0 python3 -m "
                      "atom.entrypoints.openai_server --model /models/k3 --tensor-parallel-size 8\n")
    run = diff(script, "--recipe", RECIPE, "--concurrency", "1", "--format", "json")
    assert not mark.exists() and run.returncode == 1
    point = json.loads(run.stdout)["points"][0]
    found = {d["name"]: d["found"] for d in point["differences"]}
    assert found["AITER_LOG_LEVEL"] == "ERROR" and found["PYTHONHASHSEED"] == "0"  # docker -e, env A=1
    rules = {r["rule"]: r for r in point["rules"]}
    assert rules["served-model-name"]["status"] == "WARN"  # served under the path /models/k3


@pytest.mark.parametrize("args, message", [
    (["--recipe", "kimi-k3-mi355x-agnetx"],
     "no recipe 'kimi-k3-mi355x-agnetx' (did you mean 'kimi-k3-mi355x-agentx'?)"),
    (["--recipe", RECIPE, "--concurrency", "16"], "has no point for concurrency 16"),
    (["--recipe", "config-a", "--nodes", "inv.yaml"], "give one of --script FILE or --nodes INVENTORY"),
])
def test_bad_input_is_one_line_and_exit_3(args, message):
    run = diff(FIXED, *args, conc=8)
    assert run.returncode == 3 and message in run.stderr and "Traceback" not in run.stderr


def test_a_bad_recipe_file_is_named_by_line(tmp_path):
    bad = tmp_path / "site.yaml"
    bad.write_text("recipe: site\nplatform: mi355x\npoints:\n  - {concurrency: 8, env: {A: [1]}}\n")
    run = diff(FIXED, "--recipe", str(bad), conc=8)
    assert run.returncode == 3 and f"{bad}:4: points[0].env.A: expected a string" in run.stderr


def test_help_says_the_scripts_shell_code_runs():
    out = subprocess.run([sys.executable, "-m", "k3doctor.cli", "recipe", "diff", "--help"], capture_output=True,
                         text=True, timeout=60).stdout
    assert "ITS SHELL CODE RUNS" in " ".join(out.split())


def test_the_argv_parser_keeps_negative_values_and_bare_flags():
    assert recipe_diff.parse_args(["--state-checkpoint-interval-tokens", "-1", "--enable_prefix_caching",
                                   "--block-size=128"]) == {
        "--state-checkpoint-interval-tokens": "-1", "--enable_prefix_caching": True, "--block-size": "128"}


def test_the_benchmark_clients_environment_is_diffed_where_the_script_starts_it(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(FIXED.read_text().replace("export AIPERF_REQUIRED_SERVER_METRIC_PREFIX=atom:\n", ""))
    point = json.loads(diff(script, "--recipe", RECIPE, "--concurrency", "4", "--format", "json",
                            conc=4).stdout)["points"][0]
    assert [(d["name"], d["kind"], d["where"]) for d in point["differences"]] == [
        ("AIPERF_REQUIRED_SERVER_METRIC_PREFIX", "missing", "client")]
    assert "no server metric starts `atom:`" in point["differences"][0]["why"]
    script.write_text(FIXED.read_text().split("until curl")[0])  # the server only
    run = diff(script, "--recipe", RECIPE, "--concurrency", "4", conc=4)
    assert run.returncode == 0 and "note        no benchmark client (aiperf) was seen" in run.stdout


def test_nodes_mode_reads_the_running_server_and_keeps_unnamed_values_on_the_node(tmp_path):
    """--nodes on the local transport: a fake ATOM entry point runs here with the corrected script's conc-1
    server argv and environment; only the values of variables a rule names come back."""
    package = tmp_path / "atom" / "entrypoints"
    package.mkdir(parents=True)
    for init in (tmp_path / "atom" / "__init__.py", package / "__init__.py"):
        init.write_text("")
    (package / "openai_server.py").write_text("import time\ntime.sleep(120)\n")
    argv = ["-m", "atom.entrypoints.openai_server", "--model", "moonshotai/Kimi-K3", "--host", "0.0.0.0",
            "--server-port", "8888", "--trust-remote-code", "--tensor-parallel-size", "8", "--kv_cache_dtype", "fp8",
            "--block-size", "128", "--max-num-seqs", "32", "--max-num-batched-tokens", "8192",
            "--gpu-memory-utilization", "0.88", "--enable_prefix_caching", "--state-checkpoint-interval-tokens", "-1",
            "--online_quant_config", "{}", "--method", "dspark", "--draft-model", "Inferact/Kimi-K3-DSpark",
            "--num-speculative-tokens", "6", "--spec-decode-acceptance-length", "3.75"]
    env = {"PATH": os.environ["PATH"], "PYTHONNOUSERSITE": "1", "AITER_SITUV2_A4W4": "1",
           "AITER_QUICK_REDUCE_QUANTIZATION": "INT4", "AITER_FLYDSL_STAGE2_FP8": "1",
           "ATOM_MLA_MAX_SPLIT_PER_BATCH": "256", "ATOM_STATE_CHECKPOINT_DEMAND": "0", "ATOM_ENABLE_REPLAYSSM": "0",
           "AITER_SITE_SECRET_TOKEN": "hunter2",  # AITER_LOG_LEVEL missing
           "HF_HUB_CACHE": str(tmp_path / "hub")}  # read by the drafter rule, never an extra of the recipe
    server = subprocess.Popen([sys.executable, *argv], cwd=tmp_path, env=env)
    try:
        inventory = tmp_path / "inv.yaml"
        inventory.write_text("nodes:\n  - {name: here, transport: local}\n")
        time.sleep(0.5)
        run = subprocess.run([sys.executable, "-m", "k3doctor.cli", "recipe", "diff", "--recipe", RECIPE,
                              "--concurrency", "1", "--nodes", str(inventory), "--format", "json"],
                             capture_output=True, text=True, timeout=120)
    finally:
        server.kill()
        server.wait()
    report = json.loads(run.stdout)
    [mine] = [launch for launch in report["launches"] if launch["pid"] == server.pid]
    [point] = mine["points"]
    assert [(d["name"], d["kind"], d["found"]) for d in point["differences"]] == [
        ("AITER_LOG_LEVEL", "missing", "(unset)"),
        ("AITER_SITE_SECRET_TOKEN", "extra", "(set; value not read: no rule names it)")]
    assert "hunter2" not in run.stdout and run.returncode == 1
    assert [n["name"] for n in point["noops"]] == ["--host"]


def test_nodes_mode_takes_the_recipe_and_point_from_the_inventory(tmp_path):
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("cluster: {platform: mi355x, recipe: kimi-k3-mi355x-agentx, concurrency: 8}\n"
                         "nodes:\n  - {name: here, transport: local}\n")
    run = subprocess.run([sys.executable, "-m", "k3doctor.cli", "recipe", "diff", "--nodes", str(inventory),
                          "--format", "json"], capture_output=True, text=True, timeout=120)
    report = json.loads(run.stdout)
    assert report["recipe"] == "kimi-k3-mi355x-agentx"
    assert all([p["concurrency"] for p in launch["points"]] == [8] for launch in report["launches"])
    if not report["launches"]:  # no model server runs here: nothing compared, inconclusive
        assert run.returncode == 2 and report["not_compared"][0]["why"].startswith("no model server process")
    inventory.write_text("nodes:\n  - {name: here, transport: local}\n")
    run = subprocess.run([sys.executable, "-m", "k3doctor.cli", "recipe", "diff", "--nodes", str(inventory)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 3 and "names no cluster.recipe" in run.stderr


def test_a_script_that_stops_early_says_so_without_quoting_its_output(tmp_path):
    run = diff(FIXED, "--recipe", RECIPE, "--concurrency", "8", conc=16)  # the script's `case` has no 16
    assert run.returncode == 3 and "starts no model server" in run.stderr and "the script exited 1" in run.stderr
    assert "no profile for CONC" not in run.stderr  # script output is never quoted into a verdict
    script = tmp_path / "run.sh"
    script.write_text("bash -c 'PYTHONHASHSEED=0 python3 -m atom.entrypoints.openai_server --tensor-parallel-size 8'\n"
                      "while :; do echo flood; done\n")
    run = diff(script, "--recipe", RECIPE, "--concurrency", "1", "--format", "json", "--timeout", "2")
    point = json.loads(run.stdout)["points"][0]
    assert {d["name"]: d["found"] for d in point["differences"]}["PYTHONHASHSEED"] == "0"  # inside bash -c "..."
    assert "the script was still running at the deadline (killed); what it had started is compared" in point["notes"]
