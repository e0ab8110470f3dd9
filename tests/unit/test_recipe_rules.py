"""The arithmetic and consistency rules beside the recipes (reference §25, §29, §30), each with the case
that breaks it and the numbers shown."""
import pytest

from k3doctor import recipes
from k3doctor.recipes import rules
from k3doctor.recipes.rules import BLOCK, INFO, PASS, WARN, Launch

AGENTX = recipes.builtin("kimi-k3-mi355x-agentx")
C8 = AGENTX.point(8)
GOOD_ENV = {"LMCACHE_MAX_LOCAL_CPU_SIZE": "32", "OFFLOAD_STATE": "1", "OFFLOAD_GPU_STAGING_CHUNKS": "16",
            "AITER_LOG_LEVEL": "WARNING", "HF_HUB_OFFLINE": "1"}
GOOD_FLAGS = {"--tensor-parallel-size": "8", "--num-speculative-tokens": "2", "--spec-decode-acceptance-length": "2.51",
              "--kv-transfer-config": '{"kv_connector":"lmcache_offload","kv_role":"offload"}',
              "--model": "moonshotai/Kimi-K3", "--draft-model": "Inferact/Kimi-K3-DSpark"}


def judged(env=None, flags=None, drop=(), point=C8, **launch):
    e = {k: v for k, v in {**GOOD_ENV, **(env or {})}.items() if k not in drop and v is not None}
    f = {k: v for k, v in {**GOOD_FLAGS, **(flags or {})}.items() if k not in drop and v is not None}
    return {x.rule: x for x in rules.apply(Launch(flags=f, env=e, **launch), AGENTX, point)}


def test_the_healthy_c8_launch_passes_every_rule_with_its_numbers():
    found = judged()
    assert {r: x.status for r, x in found.items()} == {
        "dram-per-rank": PASS, "pinned-host-memory": PASS, "staging-chunks": PASS, "spec-decode": PASS,
        "draft-model": PASS}
    assert "= 257 GB; 257 // TP 8 = 32 GB per rank" in found["dram-per-rank"].message
    assert "(32 GiB LMCache + 16 GiB state tier) x 8 ranks = 384 GiB pinned" in found["pinned-host-memory"].message


def test_the_dram_budget_formula_matches_the_worked_numbers():
    assert rules.dram_budget_gb(3_095_781, 2_861_022, 0.086, 8, 8) == 257  # §30: 257.99 -> 257 -> 32/rank
    assert rules.dram_budget_gb(3_095_781, 2_861_022, 0.085, 8, 8) == 254  # 254.99 -> 254 -> 31/rank
    assert rules.dram_budget_gb(1_000_000, 2_861_022, 0.5, 4, 8) == 262  # min() picks the host; tp/gpus scales


def test_31_per_rank_names_the_utilization_that_gives_it():
    x = judged({"LMCACHE_MAX_LOCAL_CPU_SIZE": "31"})["dram-per-rank"]
    assert x.status == WARN and "31 is what dram-utilization 0.085 gives (254 // 8 = 31)" in x.message
    assert x.numbers["explained_by_dram_utilization"] == 0.085


@pytest.mark.parametrize("value", ["257", "300"])
def test_the_aggregate_handed_to_a_rank_blocks(value):
    x = judged({"LMCACHE_MAX_LOCAL_CPU_SIZE": value})["dram-per-rank"]
    assert x.status == BLOCK and "hangs partway while pinning; set 32" in x.message


def test_pinned_host_memory_above_80_percent_of_memtotal_blocks():
    x = judged(mem_total_bytes=512 * 2 ** 30, shm_bytes=128 * 2 ** 30)["pinned-host-memory"]
    assert x.status == BLOCK and "+ --shm-size 128 GiB = 512 GiB pinned of 512 GiB MemTotal (100%" in x.message
    assert judged(mem_total_bytes=3 * 2 ** 40)["pinned-host-memory"].status == PASS
    assert judged(mem_total_bytes=600 * 2 ** 30)["pinned-host-memory"].status == PASS  # 384 GiB: 64%


def test_the_two_offload_tiers_go_together():
    assert judged(drop=("--kv-transfer-config",))["offload-tiers-together"].subject == "--kv-transfer-config"
    x = judged(drop=("OFFLOAD_STATE",))["offload-tiers-together"]
    assert (x.status, x.subject) == (WARN, "OFFLOAD_STATE") and "KDA recurrent state" in x.message


@pytest.mark.parametrize("chunks", [None, "2", "8", "lots"])
def test_staging_chunks_below_16_block(chunks):
    x = judged({"OFFLOAD_GPU_STAGING_CHUNKS": chunks}, drop=("OFFLOAD_GPU_STAGING_CHUNKS",) if chunks is None else ())
    assert x["staging-chunks"].status == BLOCK and "54.78 MiB" in x["staging-chunks"].message


@pytest.mark.parametrize("level, ok", [("WARNING", True), ("warning", True), ("ERROR", True), ("WARN", False),
                                       (None, False)])
def test_aiter_log_level_is_validated_not_just_present(level, ok):
    found = judged({"AITER_LOG_LEVEL": level}, drop=("AITER_LOG_LEVEL",) if level is None else ())
    assert ("aiter-log-level" not in found) == ok
    if not ok:
        assert found["aiter-log-level"].status == WARN


def test_spec_decode_rate_is_turned_into_an_acceptance_length_against_golden():
    x = judged(flags={"--spec-decode-acceptance-rate": "0.77"}, drop=("--spec-decode-acceptance-length",))
    assert x["spec-decode"].status == WARN
    assert "AL = 1 + rate 0.77 x k 2 = 2.54 for k=2 draft tokens, golden AL 2.51 (rate 0.755)" \
        in x["spec-decode"].message
    assert judged(flags={"--spec-decode-acceptance-rate": "0.755"},
                  drop=("--spec-decode-acceptance-length",))["spec-decode"].status == PASS
    assert judged(flags={"--num-speculative-tokens": "6"})["spec-decode"].status == WARN  # 2.51 is not k=6's 3.75


def test_spec_decode_length_and_rate_exclusive_and_never_on_an_eval_run():
    assert judged(flags={"--spec-decode-acceptance-rate": "0.755"})["spec-decode"].status == BLOCK
    x = judged({"EVAL_ONLY": "true"})["spec-decode"]
    assert x.status == BLOCK and "EVAL_ONLY" in x.message


def test_the_draft_model_must_be_local_or_cached():
    assert judged(drop=("HF_HUB_OFFLINE",))["draft-model"].status == INFO  # not read in --script mode
    assert judged(drop=("HF_HUB_OFFLINE",), hf_cache=set())["draft-model"].status == BLOCK
    assert judged(drop=("HF_HUB_OFFLINE",), hf_cache={"Inferact/Kimi-K3-DSpark"})["draft-model"].status == PASS
    assert judged(flags={"--draft-model": "/models/dspark"}, drop=("HF_HUB_OFFLINE",))["draft-model"].status == PASS


def test_the_served_name_is_what_the_client_sends():
    assert judged(client_flags={"--model": "moonshotai/Kimi-K3"})["served-model-name"].status == PASS
    x = judged(flags={"--model": "/models/Kimi-K3"}, client_flags={"--model": "moonshotai/Kimi-K3"})
    assert x["served-model-name"].status == BLOCK and "all-zero metrics" in x["served-model-name"].message
    assert judged(flags={"--model": "/models/Kimi-K3"})["served-model-name"].status == WARN
    assert judged(flags={"--model": "/models/Kimi-K3", "--served-model-name": "moonshotai/Kimi-K3"},
                  client_flags={"--model": "moonshotai/Kimi-K3"})["served-model-name"].status == PASS


def test_the_pinned_share_limit_is_the_recipes_own(tmp_path):
    (tmp_path / "site.yaml").write_text("recipe: site\nextends: kimi-k3-mi355x-agentx\n"
                                        "host: {pinned_share_limit: 0.5}\n")
    site = recipes.read_file(str(tmp_path / "site.yaml"))
    launch = Launch(flags=dict(GOOD_FLAGS), env=dict(GOOD_ENV), mem_total_bytes=600 * 2 ** 30)
    [x] = [f for f in rules.apply(launch, site, site.point(8)) if f.rule == "pinned-host-memory"]
    assert x.status == BLOCK and "above 50%" in x.message
