"""Recipes as data files (reference §16, §17, §26, §30): the shipped ones, the validator, the inventory's
cluster.recipe / cluster.concurrency, and launch-config judged from them."""
import subprocess
import sys

import pytest

from k3doctor import platforms, recipes
from k3doctor.inventory.load import parse_inventory
from k3doctor.inventory.types import InventoryError

NODES = "nodes:\n  - {name: ct13, host: 127.0.0.1}\n"


def test_gfx1250_recipes_are_config_a_and_its_deltas():
    a, b = recipes.builtin("config-a").point(), recipes.builtin("gfx1250-config-b").point()
    assert "NCCL_MNNVL_ENABLE" not in a.env and a.env["ATOM_DP_SESSION_AFFINITY"] is None  # §29: env-versions
    assert {k: v for k, v in b.env.items() if a.env.get(k) != v} == {"ATOM_DP_SESSION_AFFINITY": "1"}
    tier_b = recipes.builtin("optimized-tier-b").point().env
    assert (tier_b["ATOM_UNFUSED_GATHER_KV_B_PROJ"], tier_b["ATOM_USE_FLYDSL_GATHER_KV_B_PROJ"],
            tier_b["AITER_CONFIG_GEMM_BF16"]) == ("0", "1", recipes.ANY)
    assert "ATOM_LOADER_NUM_THREADS" in recipes.builtin("optimized-tier-a").tuning  # inherited


def test_agentx_points_follow_the_reference_table():
    r = recipes.builtin("kimi-k3-mi355x-agentx")
    assert (r.platform, r.concurrencies) == ("mi355x", [1, 4, 8, 10])
    table = {c: (r.point(c).args["--max-num-seqs"], r.point(c).args["--max-num-batched-tokens"],
                 r.point(c).args["--gpu-memory-utilization"], r.point(c).env["ATOM_ENABLE_REPLAYSSM"],
                 r.point(c).args["--state-checkpoint-slots"], r.point(c).env["LMCACHE_MAX_LOCAL_CPU_SIZE"],
                 r.point(c).args["--num-speculative-tokens"], r.point(c).args["--spec-decode-acceptance-length"])
             for c in r.concurrencies}
    assert table == {1: ("32", "8192", "0.88", "0", None, None, "6", "3.75"),
                     4: ("32", "8192", "0.88", "0", None, None, "2", "2.51"),
                     8: ("16", "8192", "0.88", "1", "16", "32", "2", "2.51"),
                     10: ("16", "4096", "0.90", "0", "16", "32", "2", "2.51")}
    assert r.point(8).env["OFFLOAD_PROFILE"] is None and "OFFLOAD_PROFILE" in r.deviations
    assert r.noops["--host"]["same"] == [None, "0.0.0.0"] and r.golden_acceptance_length[2] == 2.51
    with pytest.raises(ValueError, match="say which one"):
        r.point()
    with pytest.raises(ValueError, match="no point for concurrency 16"):
        r.point(16)


@pytest.mark.parametrize("text, problem", [
    ("recipe: x\nplatform: gfx1250\nenv:\n  A: 1\n", "site.yaml:4: env.A: expected a string"),
    ("recipe: x\nplatform: mi300\n", f"site.yaml:2: platform: expected one of {', '.join(platforms.names())}"),
    ("recipe: x\nplatform: gfx1250\nenvs: {}\n", "site.yaml:3: envs: unknown key (did you mean 'env'?)"),
    ("recipe: x\nplatform: gfx1250\npoints:\n  - {env: {}}\n", "site.yaml:4: points[0].concurrency: missing"),
    ("recipe: x\nplatform: gfx1250\npoints:\n  - {concurrency: 1}\n  - {concurrency: 1}\n",
     "site.yaml:5: points[1].concurrency: 1 is already the point at line 4"),
    ("recipe: x\nextends: config-q\n", "site.yaml:2: extends: no recipe 'config-q'"),
    ("platform: gfx1250\n", "site.yaml:1: recipe: missing"),
])
def test_a_bad_recipe_file_is_named_by_file_and_line(tmp_path, text, problem):
    (tmp_path / "site.yaml").write_text(text)
    with pytest.raises(recipes.RecipeError) as info:
        recipes.read_file(str(tmp_path / "site.yaml"))
    assert info.value.problems[0].replace(str(tmp_path) + "/", "").startswith(problem)


def test_a_site_recipe_extends_a_shipped_one(tmp_path):
    (tmp_path / "site.yaml").write_text("recipe: site-b\nextends: config-b\nenv: {NCCL_P2P_LEVEL: NVL}\n"
                                        "why: {NCCL_P2P_LEVEL: our switch}\n")
    r = recipes.read_file(str(tmp_path / "site.yaml"))
    assert (r.platform, r.point().env["NCCL_P2P_LEVEL"], r.point().env["ATOM_DP_SESSION_AFFINITY"]) == \
        ("gfx1250", "NVL", "1")
    assert r.why["NCCL_P2P_LEVEL"] == "our switch" and "ENABLE_CK" in r.why


def _inventory(cluster: str, path="inv.yaml"):
    return parse_inventory(f"cluster: {{{cluster}}}\n" + NODES, path)


def test_inventory_recipe_and_concurrency(tmp_path):
    inv = _inventory("platform: mi355x, recipe: kimi-k3-mi355x-agentx, concurrency: 8")
    assert (inv.cluster.platform, inv.cluster.recipe, inv.cluster.concurrency) == ("mi355x", "kimi-k3-mi355x-agentx", 8)
    assert inv.nodes[0].settings.concurrency == 8
    assert _inventory("").cluster.platform == "gfx1250" and _inventory("").cluster.recipe is None
    for cluster, problem in [
            ("platform: mi355x, recipe: kimi-k3-mi355x-agentx", "inv.yaml:1: cluster.recipe: recipe "
             "kimi-k3-mi355x-agentx has points for concurrency 1, 4, 8, 10: say which one is launched"),
            ("platform: mi355x, recipe: kimi-k3-mi355x-agentx, concurrency: 16", "inv.yaml:1: cluster.concurrency: "
             "recipe kimi-k3-mi355x-agentx has no point for concurrency 16"),
            ("recipe: kimi-k3-mi355x-agentx, concurrency: 8", "inv.yaml:1: cluster.recipe: kimi-k3-mi355x-agentx "
             "runs on gfx950 only (a mi355x recipe); platform gfx1250 is gfx1250"),
            ("recipe: config-q", "inv.yaml:1: cluster.recipe: no recipe 'config-q'"),
            ("concurrency: 4", "inv.yaml:1: cluster.concurrency: needs cluster.recipe")]:
        with pytest.raises(InventoryError) as info:
            _inventory(cluster)
        assert info.value.problems[0].startswith(problem), info.value.problems
    (tmp_path / "site.yaml").write_text("recipe: site\nplatform: gfx1250\nenv:\n  A: [1]\n")
    with pytest.raises(InventoryError) as info:
        _inventory("recipe: ./site.yaml", str(tmp_path / "inv.yaml"))
    assert info.value.problems == [f"{tmp_path}/site.yaml:4: env.A: expected a string (\"*\": any value) or null "
                                   "(must be unset), got [1]"]
    (tmp_path / "site.yaml").write_text("recipe: site\nextends: config-b\n")
    assert _inventory("recipe: ./site.yaml", str(tmp_path / "inv.yaml")).cluster.recipe == str(tmp_path / "site.yaml")


def test_a_bad_recipe_in_the_inventory_exits_3_with_its_line(tmp_path):
    (tmp_path / "site.yaml").write_text("recipe: site\nplatform: gfx1250\nargs:\n  --port: 8000\n")
    (tmp_path / "inv.yaml").write_text("cluster: {recipe: site.yaml}\n" + NODES)
    run = subprocess.run([sys.executable, "-m", "k3doctor.cli", "check", "--nodes", str(tmp_path / "inv.yaml")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 3 and f"{tmp_path}/site.yaml:4: args.--port: expected a string" in run.stderr
    assert "Traceback" not in run.stderr


def test_a_shipped_recipe_is_parsed_once_and_each_caller_gets_its_own_copy():
    """Parsed once per run (libyaml, cached): an edit by one caller never reaches the next one's rules."""
    first = recipes.builtin("kimi-k3-mi355x-agentx")
    first.points[0].env["K3DOCTOR_TEST_EDIT"] = "1"
    again = recipes.builtin("kimi-k3-mi355x-agentx")
    assert "K3DOCTOR_TEST_EDIT" not in again.points[0].env and again == recipes.read_file(str(again.path))
    recipes.builtin_names()["edited"] = None
    assert "edited" not in recipes.builtin_names()
