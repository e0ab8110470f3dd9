"""launch-config judges an MI355X node's launch against the inventory's recipe point through the one judgement
`recipe diff` prints (k3doctor/recipes/judgement.py; issue 30): from the running server, else the created
container's configuration, else cluster.launch_script; nothing to judge is an ERROR, never a quiet PASS.

The readings are what the node would give: the server reader's output as its shell prints it (servers.py),
`docker inspect` turned into a record by the real reading code, the rig's own statement of §30 (k3rig.mi355x).
"""
import json
import shutil
from pathlib import Path

import pytest
from k3rig import mi355x

from k3doctor import platforms, recipes, testing
from k3doctor.inventory.types import Node, Settings
from k3doctor.judging.causes import explained
from k3doctor.views.container import record_from_inspect
from k3doctor.readings import ContainerReading
from k3doctor.recipes import diff as recipe_diff
from k3doctor.recipes import judgement, sandbox, servers
from k3doctor.results import Result, Status
from tests.unit import test_check_launch as wide  # the wide-EP node's real readings (samples/)

RECIPE = recipes.builtin(mi355x.RECIPE)
MEMTOTAL_KB = 3_221_225_472


def settings(concurrency=8, **kw):
    return Settings(platform="mi355x", recipe=mi355x.RECIPE, concurrency=concurrency, gpus_per_node=8, **kw)


def launch(concurrency=8, env=None, args=None):
    """(argv, env) of the rig's AgentX server at ``concurrency`` with overrides (None: dropped)."""
    full = {**mi355x.server_env(concurrency), **(env or {})}
    return (mi355x.server_argv(concurrency, args or {}), {k: v for k, v in full.items() if v is not None})


def server_text(argv, env, cache=(mi355x.MODEL, mi355x.DRAFT_MODEL), pid=4242, mem_kb=MEMTOTAL_KB):
    """What servers.server_script prints on the node for one server (values of names no rule reads stay there)."""
    keep = servers.kept_names(RECIPE)
    lines = [f"@server {pid}", *argv, "", "@env"] + [f"{k}={v}" if k in keep else k for k, v in env.items()]
    lines += ["@hfcache"] + [f"models--{repo.replace('/', '--')}" for repo in cache] + ["@end"]
    return "\n".join(lines) + f"\n@meminfo {mem_kb}\n"


NO_SERVER = f"@meminfo {MEMTOTAL_KB}\n"


def container(argv, env, status="created"):
    attrs = {"Name": "/k3ep16", "Config": {"Image": RECIPE.image, "Cmd": argv, "Env": [f"{k}={v}" for k, v in
                                                                                        env.items()]},
             "State": {"Running": status == "running", "Status": status}, "HostConfig": {}}
    return ContainerReading(record_from_inspect(attrs, set(servers.kept_names(RECIPE))))


def check(node_readings, concurrency=8, **kw):
    return [v for v in testing.judge("launch-config", {"ct13": node_readings}, settings=settings(concurrency, **kw))]


def not_passing(results):
    return [(r.status.value, r.remediation, r.message) for r in results if r.status not in (Status.PASS,)]


@pytest.mark.parametrize("concurrency", [1, 4, 8, 10])
def test_a_healthy_launch_passes_at_every_point_from_the_server_and_from_the_container(concurrency):
    argv, env = launch(concurrency)
    for readings in ({"server": server_text(argv, env), "container": ContainerReading(None)},
                     {"server": NO_SERVER, "container": container(argv, env)}):
        results = check(readings, concurrency)
        assert not_passing(results) == [], results
        [ok] = results
        assert judgement.IDENTICAL in ok.message and f"concurrency {concurrency}" in ok.message


FAULTS = {  # the ten launch faults of issue 30's Done-means, as launch overrides at concurrency 8
    "lmcache-aggregate": ({"LMCACHE_MAX_LOCAL_CPU_SIZE": "257"}, {}, "RECIPE-DRAM-PER-RANK", "FAIL"),
    "state-offload-off": ({"OFFLOAD_STATE": None}, {}, "RECIPE-OFFLOAD-TIERS-TOGETHER", "WARN"),
    "staging-chunks-default": ({"OFFLOAD_GPU_STAGING_CHUNKS": None}, {}, "RECIPE-STAGING-CHUNKS", "FAIL"),
    "aiter-log-invalid": ({"AITER_LOG_LEVEL": "VERBOSE"}, {}, "RECIPE-AITER-LOG-LEVEL", "WARN"),
    "al-off-golden": ({}, {"--spec-decode-acceptance-length": "2.54"}, "RECIPE-SPEC-DECODE", "WARN"),
    "length-and-rate": ({}, {"--spec-decode-acceptance-rate": "0.77"}, "RECIPE-SPEC-DECODE", "FAIL"),
    "no-served-name": ({}, {"--model": "/models/Kimi-K3"}, "RECIPE-SERVED-MODEL-NAME", "WARN"),
    "hsa-gfx1250": ({"HSA_OVERRIDE_GFX_VERSION": "12.5.0"}, {}, "RECIPE-HSA-OVERRIDE", "FAIL"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_launch_fault_is_one_finding_with_the_words_and_numbers_of_recipe_diff(fault):
    env_over, args_over, code, status = FAULTS[fault]
    argv, env = launch(8, env_over, args_over)
    d = judgement.diff_point(RECIPE, RECIPE.point(8), servers.resolved(RECIPE, argv, env, {mi355x.MODEL,
                                                                                      mi355x.DRAFT_MODEL},
                                                                       MEMTOTAL_KB * 1024))
    table = recipe_diff.render_table(RECIPE, "node", [d])
    for readings in ({"server": server_text(argv, env), "container": ContainerReading(None)},
                     {"server": NO_SERVER, "container": container(argv, env)}):
        found = not_passing(check(readings))
        assert [(s, c) for s, c, _ in found] == [(status, code)], found
        said = found[0][2].split(": ", 1)[1]
        # the gate's words are the diff's: each part of the finding is a line of the table
        for part in said.split("; "):
            assert part.split(": ", 1)[-1] in table, (part, table)


def test_the_aggregate_lmcache_size_and_the_pinned_host_memory_it_causes_are_one_finding():
    """§25: handing each rank the aggregate also overcommits a smaller host; the first screen names the cause."""
    argv, env = launch(8, {"LMCACHE_MAX_LOCAL_CPU_SIZE": "257"})
    results = check({"server": server_text(argv, env, mem_kb=1024 * 1024 * 1024), "container": ContainerReading(None)})
    assert sorted(r.remediation for r in results if r.status == Status.FAIL) == \
        ["RECIPE-DRAM-PER-RANK", "RECIPE-PINNED-HOST-MEMORY"]
    shown = explained([Result(check="launch-config", node="ct13", gpu=None, status=v.status, message=v.message,
                              remediation=v.remediation, evidence=v.evidence) for v in results])
    assert [(r.status, r.remediation) for r in shown if r.status != Status.PASS] == [
        (Status.FAIL, "RECIPE-DRAM-PER-RANK"), (Status.SKIP, None)]
    assert "DRAM budget" in shown[0].message and "257 // TP 8 = 32 GB per rank" in shown[0].message


def test_dram_over_host_ram_names_the_arithmetic_with_memtotal():
    argv, env = launch(8)
    found = not_passing(check({"server": server_text(argv, env, mem_kb=402653184),
                               "container": ContainerReading(None)}))
    assert [(s, c) for s, c, _ in found] == [("FAIL", "RECIPE-PINNED-HOST-MEMORY")]
    assert "(32 GiB LMCache + 16 GiB state tier) x 8 ranks = 384 GiB pinned of 384 GiB MemTotal" in found[0][2]


def test_a_drafter_missing_from_the_running_servers_hf_cache_is_a_fail():
    argv, env = launch(8)
    found = not_passing(check({"server": server_text(argv, env, cache=(mi355x.MODEL,)),
                               "container": ContainerReading(None)}))
    assert [(s, c) for s, c, _ in found] == [("FAIL", "RECIPE-DRAFT-MODEL")], found


@pytest.mark.parametrize("container_reading, why", [
    (ContainerReading(None), "no container k3ep16"),
    ("unavailable", "no container configuration"),
    (None, "command starts no model server"),
])
def test_nothing_to_judge_with_a_recipe_declared_is_an_error_that_says_what_to_add(container_reading, why):
    if container_reading == "unavailable":
        from k3doctor.readings import Unavailable
        container_reading = Unavailable("Docker engine on ct13 not readable: no such socket")
    elif container_reading is None:
        container_reading = container(["sleep", "infinity"], {})
    [result] = check({"server": NO_SERVER, "container": container_reading})
    assert (result.status, result.remediation) == (Status.ERROR, "RECIPE-NO-LAUNCH"), result
    assert why in result.message and "cluster.launch_script: PATH" in result.message, result.message


def test_without_a_recipe_the_launch_is_not_judged_and_says_so():
    [result] = testing.judge("launch-config", {"ct13": {}}, settings=Settings(platform="mi355x", gpus_per_node=8))
    assert result.status == Status.SKIP and "no cluster.recipe" in result.message


SCRIPT = "/opt/agentx/launch.sh"


def script_text(concurrency=8, env=None, args=None):
    argv, env = launch(concurrency, {"HIP_VISIBLE_DEVICES": None, **(env or {})}, args)  # the runner's, not the script's
    exports = "".join(f"export {k}={json.dumps(v)}\n" for k, v in env.items())
    return "#!/bin/bash\nset -e\n" + exports + " ".join(json.dumps(w) if w.startswith("{") else repr(w) if " " in w
                                                        else w for w in argv) + " &\nwait\n"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed here")
def test_the_launch_script_is_judged_where_nothing_runs_and_no_container_holds_the_server():
    healthy = check({"server": NO_SERVER, "container": ContainerReading(None), "script": script_text()},
                    launch_script=SCRIPT)
    assert not_passing(healthy) == [], healthy
    faulty = check({"server": NO_SERVER, "container": ContainerReading(None),
                    "script": script_text(env={"LMCACHE_MAX_LOCAL_CPU_SIZE": "257"})}, launch_script=SCRIPT)
    [(status, code, message)] = not_passing(faulty)
    assert (status, code) == ("FAIL", "RECIPE-DRAM-PER-RANK") and message.startswith(f"launch script {SCRIPT}")


def test_a_sandbox_that_cannot_run_is_an_error_of_the_launch_check_naming_what_is_missing(monkeypatch):
    def no_bwrap():
        raise sandbox.SandboxError("`recipe diff --script` runs the script in a bubblewrap sandbox and `bwrap` is "
                                   "not installed (package bubblewrap)")
    monkeypatch.setattr(sandbox, "bwrap", no_bwrap)
    [result] = check({"server": NO_SERVER, "container": ContainerReading(None), "script": script_text()},
                     launch_script=SCRIPT)
    assert (result.status, result.remediation) == (Status.ERROR, "RECIPE-NO-LAUNCH"), result
    assert "bwrap" in result.message and SCRIPT in result.message


# "*" flags of the gfx1250 recipes as one healthy node of a one-node job would have them: launch-config judges
# these against the node (its GPUs, its place, its address, its free ports; §17, §18).
WIDE_EP_NODE = {"--data-parallel-size": "4", "--data-parallel-size-local": "4", "--data-parallel-rank": "0",
                "--data-parallel-master-ip": wide.IPS["ct13"], "--data-parallel-master-port": "29500",
                "--data-parallel-base-port": "29700"}


def _point_launch(point, value_of_any="x"):
    """A launch that is exactly the point: "*" any value, True a bare flag, None absent; the data-plane interface
    is the rig's (lo, which carries its node addresses)."""
    def value(v, name=""):
        return WIDE_EP_NODE.get(name, value_of_any) if v == recipes.ANY else "lo" if v == recipes.DATA_IF else v
    env = {k: value(v) for k, v in point.env.items() if v is not None}
    flags = {k: value(v, k) for k, v in point.args.items() if v is not None}
    return env, flags


def _checked(recipe, concurrency, argv, env) -> list:
    """`check`'s launch-config on one node whose server runs ``argv`` with ``env``: on MI355X the server reader's
    own output; on gfx1250 our running container with the server as its command (docker inspect as the rig's)."""
    if not platforms.get(recipe.platform).wide_ep_launch:
        keep = servers.kept_names(recipe)
        text = "\n".join([f"@server 7", *argv, "", "@env", *(f"{k}={v}" if k in keep else k for k, v in env.items()),
                          "@hfcache", "@end", f"@meminfo {MEMTOTAL_KB}"]) + "\n"
        return testing.judge("launch-config", {"ct13": {"server": text, "container": ContainerReading(None)}},
                             settings=Settings(platform=recipe.platform, recipe=recipe.name, concurrency=concurrency))
    settings = Settings(container="k3ep16", image=wide.IMAGE, stepping="B0", gpus_per_node=4, recipe=recipe.name,
                        concurrency=concurrency)
    attrs = wide.attrs()
    attrs["Config"].update(Env=[f"{k}={v}" for k, v in env.items()], Entrypoint=None, Cmd=argv)
    keep = set(wide.CHK.readings_for(settings)["container"].keep)
    readings = {**wide.readings().raw(), "container": ContainerReading(record_from_inspect(attrs, keep), None)}
    return testing.judge("launch-config", {"ct13": readings}, settings=settings,
                         nodes={"ct13": Node("ct13", wide.IPS["ct13"], settings, data_ip=wide.IPS["ct13"])})


SHIPPED_POINTS = [(r.name, p.concurrency) for r in (recipes.builtin(n) for n in sorted(
    f.stem for f in recipes.BUILTIN_DIR.glob("*.yaml"))) for p in r.points]


@pytest.mark.parametrize("name, concurrency", SHIPPED_POINTS)
def test_check_and_recipe_diff_agree_on_every_shipped_recipe_point(name, concurrency):
    """Issue 30: one code path - on every shipped point the healthy launch is identical in both, and a changed
    value, a missing variable and an extra flag are the same rows with the same words in both, through `check`
    itself on every platform: on MI355X from the server reader's own output, on gfx1250 from our container beside
    the wide-EP rows, which step aside where the recipe row names the same variable or flag (--max-model-len)."""
    recipe = recipes.builtin(name)
    point = recipe.point(concurrency)
    env, flags = _point_launch(point)
    first_env = next(iter(env))
    variants = [({}, {}), ({first_env: "changed"}, {}), ({first_env: None}, {}), ({}, {"--max-model-len": "4096"})]
    for env_over, flag_over in variants:
        e = {k: v for k, v in {**env, **env_over}.items() if v is not None}
        argv = ["python3", "-m", "atom.entrypoints.openai_server"] + [
            w for k, v in {**flags, **flag_over}.items() for w in ([k] if v is True else [k, v])]
        resolved = servers.resolved(recipe, argv, e, set(), None)
        [d] = recipe_diff.diff(recipe, resolved, concurrency)
        table = recipe_diff.render_table(recipe, "launch", [d])
        found = [(f.status.value, f.message) for f in judgement.gate_findings(recipe, d)]
        assert bool(found) == recipe_diff.best([d]).matters, (env_over, flag_over, table)
        assert len(found) == len(d.differences) + sum(r["status"] in ("BLOCK", "WARN") for r in d.rules)
        for _, message in found:
            for part in message.split("; "):
                assert part.split(": ", 1)[-1] in table, (part, table)
        where = "container k3ep16 command" if platforms.get(recipe.platform).wide_ep_launch else "server pid 7"
        results = _checked(recipe, concurrency, argv, e)
        assert [(r.status.value, r.message) for r in results if r.status != Status.PASS] == [
            (status, f"{where}: {message}") for status, message in found], table


def test_cluster_launch_script_is_an_absolute_path_on_the_nodes():
    from k3doctor.inventory.load import parse_inventory
    from k3doctor.inventory.types import InventoryError

    base = ("cluster: {platform: mi355x, recipe: kimi-k3-mi355x-agentx, concurrency: 8, launch_script: %s}\n"
            "nodes: [{name: ct13, host: 10.0.0.1}]\n")
    inv = parse_inventory(base % "/opt/agentx/launch.sh")
    assert inv.nodes[0].settings.launch_script == "/opt/agentx/launch.sh"
    with pytest.raises(InventoryError) as bad:
        parse_inventory(base % "launch.sh")
    assert "cluster.launch_script" in str(bad.value.problems) and "absolute path" in str(bad.value.problems)


def test_the_rigs_healthy_wide_ep_launch_is_config_a_and_quiet_with_the_recipe_declared():
    """The rig's healthy gfx1250 node launches Config A (§16, §17: its environment and its §17 command): with
    cluster.recipe gfx1250-config-a declared it is identical to the recipe, flags included, and no row fires -
    NCCL_MNNVL_ENABLE / NCCL_CUMEM_ENABLE, which it sets and the recipe no longer names, are env-versions' (§29)."""
    verdicts = wide.judge(recipe="gfx1250-config-a")
    assert [(v.node, v.status) for v in verdicts] == [(n, Status.PASS) for n in wide.NAMES], wide.findings(verdicts)


@pytest.mark.parametrize("env, args, expected, says", [
    # the recipe row names what a wide-EP row (log level, pair, --max-model-len) also says: named once, by the recipe
    ({"AITER_LOG_LEVEL": None}, {}, [(Status.WARN, "RECIPE-AITER-LOG-LEVEL")],
     "missing AITER_LOG_LEVEL: recipe *, launch (unset)"),
    ({"AITER_CUSTOM_AR_USE_SYMM_MEM": None}, {}, [(Status.FAIL, "RECIPE-DIFFERENCE")],
     "missing AITER_CUSTOM_AR_USE_SYMM_MEM: recipe 1, launch (unset)"),
    ({}, {"--max-model-len": 65536}, [(Status.FAIL, "RECIPE-DIFFERENCE")],
     "extra --max-model-len: recipe (absent), launch 65536 - do not set"),
    # what only the node knows stays the wide-EP row's: an interface that does not exist there
    ({"NCCL_SOCKET_IFNAME": "enp1s0f1"}, {}, [(Status.FAIL, "LAUNCH-IFNAME")], "no such interface"),
])
def test_a_wide_ep_fault_with_the_recipe_declared_is_named_once_on_its_node(env, args, expected, says):
    node = {"ct14": wide.readings(wide.attrs(env=env), script=wide.script_for(1, **args), place=1)}
    verdicts = wide.judge(node, recipe="gfx1250-config-a")
    assert wide.findings(verdicts) == [("ct14", status, code) for status, code in expected], \
        [v.message for v in verdicts if v.status != Status.PASS]
    assert says in wide.only(verdicts).message


# ----------------------------------------------------------------------------- the drafter before launch (§25, §30)

HOST_CACHE = "/srv/hf-hub-cache"  # the node's directory mounted at the container's HF cache


def listing(directory, repos):
    return f"@dir {directory}\n" + "".join(f"models--{r.replace('/', '--')}\n" for r in repos)


@pytest.mark.parametrize("repos, found", [
    ((mi355x.MODEL,), [("FAIL", "RECIPE-DRAFT-MODEL")]),
    ((mi355x.MODEL, mi355x.DRAFT_MODEL), []),
])
def test_a_created_containers_drafter_is_read_in_the_host_directory_its_cache_mount_names(repos, found):
    """Before the container runs, its HF cache is the host directory of the mount that holds it (the engine fact
    readings.CONTAINER_HF_CACHE), read on the node: a drafter missing there is the FAIL of the running state."""
    argv, env = launch(8)
    results = check({"server": NO_SERVER, "container": container(argv, env), "cache": listing(HOST_CACHE, repos)})
    assert [(s, c) for s, c, _ in not_passing(results)] == found, results
    if found:
        assert "not complete in the mounted HF cache" in results[0].message


def test_a_created_container_whose_cache_no_mount_holds_leaves_the_drafter_to_an_info():
    """No mount names the cache (a cache in the image's own layer): nothing on the node says where the drafter
    is, so the rule's INFO (not read here) stands - no FAIL from what was not read."""
    from k3doctor.readings import Unavailable
    argv, env = launch(8)
    results = check({"server": NO_SERVER, "container": container(argv, env),
                     "cache": Unavailable(f"no mount of container k3ep16 holds its HF cache {mi355x.HF_CACHE}")})
    assert not_passing(results) == []


@pytest.mark.parametrize("locked", ["cache", "parent"])
def test_an_hf_cache_this_login_cannot_list_is_not_read_never_a_drafter_missing(locked):
    """The node's own shell (servers.mounted_cache_script) run as an unprivileged login over a cache holding the
    drafter that is 0700, or behind a 0700 parent: `@unreadable`, so the drafter stays the rule's INFO - never "not
    complete in the cache"; as root the same cache lists both repos."""
    import subprocess
    import tempfile

    top = tempfile.TemporaryDirectory(dir="/tmp")  # /tmp: every login can search its way to it
    tmp_path = Path(top.name)
    cache = tmp_path / "hf-hub-cache"
    for repo in (mi355x.MODEL, mi355x.DRAFT_MODEL):
        snapshot = cache / f"models--{repo.replace('/', '--')}" / "snapshots" / "abc"
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text("{}")
    tmp_path.chmod(0o700 if locked == "parent" else 0o755)
    cache.chmod(0o700 if locked == "cache" else 0o755)
    as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "sh", "-c",
                 servers.mounted_cache_script(), "sh", str(cache)]
    said = subprocess.run(as_nobody, capture_output=True, text=True, timeout=30)
    assert said.stdout == f"@dir {cache}\n@unreadable\n", said
    assert servers.parse_caches(said.stdout) == {}
    argv, env = launch(8)
    assert not_passing(check({"server": NO_SERVER, "container": container(argv, env), "cache": said.stdout})) == []
    as_root = subprocess.run(as_nobody[4:], capture_output=True, text=True, timeout=30)  # the same cache, readable
    assert servers.parse_caches(as_root.stdout) == {str(cache): {mi355x.MODEL, mi355x.DRAFT_MODEL}}
    tmp_path.chmod(0o755)
    shutil.rmtree(cache)  # provably absent (its parent searchable): nothing there, the drafter's FAIL stands
    gone = subprocess.run(as_nobody, capture_output=True, text=True, timeout=30)
    assert servers.parse_caches(gone.stdout) == {str(cache): set()}
    top.cleanup()


def test_the_hf_cache_listing_garbled_is_an_error_never_a_verdict_on_the_drafter():
    argv, env = launch(8)
    [result] = check({"server": NO_SERVER, "container": container(argv, env), "cache": "Segmentation fault\n"})
    assert result.status == Status.ERROR and "HF cache listing" in result.message, result


def docker_script(repos_mounted=True, wrapper="docker"):
    """The launch script as a container launch: the HF cache a host directory mounted into the container."""
    argv, env = launch(8, {"HIP_VISIBLE_DEVICES": None, **({"HF_HUB_CACHE": HOST_CACHE} if wrapper == "" else {})})
    exports = "".join(f"export {k}={json.dumps(v)}\n" for k, v in env.items())
    server = " ".join(json.dumps(w) if w.startswith("{") else w for w in argv)
    if wrapper == "":  # a bare launch: the server's HF cache is the node's own path
        run = ""
    elif wrapper == "docker":
        run = (f"docker run --rm --network=host -v {HOST_CACHE}:{mi355x.HF_CACHE}:ro "
               + " ".join(f"-e {k}" for k in env) + f" {RECIPE.image} ")
    else:  # Slurm + pyxis/enroot: srun exports everything, the container sees the mounts named
        run = f"srun --container-image={RECIPE.image} --container-mounts={HOST_CACHE}:{mi355x.HF_CACHE} "
    return "#!/bin/bash\nset -e\n" + exports + run + server + "\n"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed here")
@pytest.mark.parametrize("wrapper", ["docker", "srun", ""])
@pytest.mark.parametrize("repos, found", [
    ((mi355x.MODEL,), [("FAIL", "RECIPE-DRAFT-MODEL")]),
    ((mi355x.MODEL, mi355x.DRAFT_MODEL), []),
])
def test_a_launch_scripts_drafter_is_read_in_the_host_directory_its_mount_names(wrapper, repos, found):
    """The script's `-v HOST:CONTAINER` (or pyxis' --container-mounts) names the host directory behind the server's
    HF cache; the node lists the script's directories (servers.script_caches_script) and the drafter is judged
    there before anything runs."""
    results = check({"server": NO_SERVER, "container": ContainerReading(None), "script": docker_script(wrapper=wrapper),
                     "script_caches": listing(HOST_CACHE, repos) + listing("/opt/other", [mi355x.DRAFT_MODEL])},
                    launch_script=SCRIPT)
    assert [(s, c) for s, c, _ in not_passing(results)] == found, results


def test_the_host_path_behind_a_container_path_is_the_deepest_mount_that_holds_it():
    from k3doctor.views.container import hf_cache_dir, host_path

    mounts = [("/data", "/app"), ("/srv/hf", "/app/hf-hub-cache"), ("/x", "/app/hf")]
    assert host_path("/app/hf-hub-cache/hub", mounts) == "/srv/hf/hub"
    assert host_path("/app/hf-hub-cache", mounts) == "/srv/hf"
    assert host_path("/app/other", mounts) == "/data/other"
    assert host_path("/root/.cache", mounts) is None
    assert hf_cache_dir({"HF_HOME": "/root/.cache/huggingface/"}) == "/root/.cache/huggingface/hub"
    assert hf_cache_dir({"HF_HUB_CACHE": "/c", "HF_HOME": "/h"}) == "/c" and hf_cache_dir({}) is None


@pytest.mark.parametrize("env, expected", [
    # A0's translation trio is required there and named by no recipe: the trio rows judge it, never "extra"
    ({"LD_LIBRARY_PATH": "/app/rjprefix/lib", "HSA_HOTSWAP_VERBOSE": "1",
      "HSA_TOOLS_LIB": "/app/rjprefix/lib/libhsa_hotswap_rocjitsu.so"}, []),
    ({"LD_LIBRARY_PATH": "/app/rjprefix/lib", "HSA_HOTSWAP_VERBOSE": "1",
      "HSA_TOOLS_LIB": "/app/rjprefix/lib/librocjitsu_gfx1250_b0_to_a0.so.0"}, [(Status.FAIL, "ROCJITSU-ENV")]),
    # a deprecated variable: the wide-EP row says why (renamed), not the recipe's bare "extra"
    ({"LD_LIBRARY_PATH": "/app/rjprefix/lib", "HSA_HOTSWAP_VERBOSE": "1",
      "HSA_TOOLS_LIB": "/app/rjprefix/lib/libhsa_hotswap_rocjitsu.so", "MEGA_WIRE": "fp4"},
     [(Status.WARN, "LAUNCH-ENV-INERT")]),
    # §29's EP32 advice (MORI_SHMEM_HEAP_SIZE=16G) is the heap row's to judge; set on this node alone, it is drift
    ({"LD_LIBRARY_PATH": "/app/rjprefix/lib", "HSA_HOTSWAP_VERBOSE": "1",
      "HSA_TOOLS_LIB": "/app/rjprefix/lib/libhsa_hotswap_rocjitsu.so", "MORI_SHMEM_HEAP_SIZE": "16G"},
     [(Status.WARN, "LAUNCH-DRIFT")]),
])
def test_variables_a_wide_ep_row_judges_are_never_a_recipe_extra(env, expected):
    verdicts = wide.judge({"ct16": wide.readings(wide.attrs(env=env), place=2)}, node_steppings={"ct16": "A0"},
                          recipe="gfx1250-config-a")
    assert wide.findings(verdicts) == [("ct16", status, code) for status, code in expected], \
        [v.message for v in verdicts if v.status != Status.PASS]
