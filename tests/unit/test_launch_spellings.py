"""A rule that reads a launch finds the option in every spelling the engine accepts (issue 32 item 3): `-` or `_` in
its name, `--opt=value` or `--opt value`, a quoted JSON value with blanks, and `vllm serve` as well as ATOM's
`python -m atom.entrypoints.openai_server`. The launch is taken from the container's real `docker inspect` (the rig's
k3ep16) with its Cmd replaced, through the same record the checks read, and judged by lmcache-ops and launch-config."""
import copy
import json
from pathlib import Path

import pytest
from k3doctor.checks import lmcache

from k3doctor import testing
from k3doctor.views.container import launch_from_argv, launch_from_script, launch_options, record_from_inspect
from k3doctor.readings import CommandReading, ContainerReading
from k3doctor.registry import REGISTRY
from k3doctor.results import Status
from k3doctor.rules.launch import judge_args

INSPECT = json.loads((Path(__file__).with_name("samples") / "docker-inspect-k3ep16-rig.json").read_text())
CUDA_OPS = "@failed ImportError: libcudart.so.13: cannot open shared object file: No such file or directory\n"
JSON = '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}'
ATOM = ["python3", "-m", "atom.entrypoints.openai_server", "--model", "/models/Kimi-K3"]
VLLM = ["vllm", "serve", "/models/Kimi-K3", "--tensor-parallel-size", "8"]

SPELLINGS = {
    "dash, space, JSON with blanks": ATOM + ["--kv-transfer-config", JSON],
    "underscore": ATOM + ["--kv_transfer_config", JSON],
    "underscore, =": ATOM + [f"--kv_transfer_config={JSON}"],
    "dash, =": ATOM + [f"--kv-transfer-config={JSON}"],
    "vllm serve": VLLM + ["--kv-transfer-config", JSON],
    "vllm serve, underscore, compact JSON": VLLM + ["--kv_transfer_config", '{"kv_connector":"LMCacheConnectorV1"}'],
    "/usr/local/bin/vllm serve": ["/usr/local/bin/vllm", "serve", "m", "--kv-transfer-config", JSON],
}


def judge_lmcache(cmd: list):
    a = copy.deepcopy(INSPECT)
    a["Config"]["Entrypoint"], a["Config"]["Cmd"] = None, cmd
    record = record_from_inspect(a, ())
    return testing.judge(REGISTRY.checks[lmcache.CHECK], {
        "container": ContainerReading(record, None), "ops": CommandReading("docker exec k3ep16 sh -c ...", 0,
                                                                           CUDA_OPS, "")})


@pytest.mark.parametrize("cmd", SPELLINGS.values(), ids=SPELLINGS.keys())
def test_lmcache_offload_is_found_in_every_spelling_of_the_launch(cmd):
    """Before: "no LMCache offload in the launch" (PASS) while c_ops fails, for all but the first compact spelling."""
    [v] = judge_lmcache(cmd)
    assert (v.status, v.remediation) == (Status.FAIL, "LMCACHE-NO-NATIVE-OPS"), v.message
    assert "--kv-transfer-config names an LMCache connector" in v.message


def test_a_launch_in_a_script_finds_the_same_option():
    """The launch script path (shlex keeps the quoted JSON one word) reads to the same options."""
    script = f"#!/bin/sh\nexec vllm serve /models/Kimi-K3 --kv_transfer_config '{JSON}' --port 8000\n"
    assert launch_options(launch_from_script(script))["--kv-transfer-config"] == JSON


def test_no_offload_and_other_blank_words_stay_out():
    """A launch without the option still needs no native ops; a blank word that is no option's value is still
    dropped (a script nobody parses here), and a non-server command is no launch."""
    [v] = judge_lmcache(ATOM + ["--trust-remote-code"])
    assert v.status == Status.PASS and "no LMCache offload in the launch" in v.message
    assert launch_from_argv(ATOM + ["echo a b"]) == ATOM
    assert launch_from_argv(["vllm", "--version"]) is None


def test_launch_config_reads_an_underscore_option_too():
    """launch-config's argument rows use the same lookup: `--max_model_len` is --max-model-len (§17, §21)."""
    argv = ATOM + ["--served-model-name", "moonshotai/Kimi-K3", "--data_parallel_size_local=4", "--max_model_len",
                   "65536"]
    found = {flag: v.status for flag, v in judge_args(argv, gpus=4)}
    assert found == {"--max-model-len": Status.FAIL}


def test_the_last_spelling_given_wins():
    assert launch_options(["--max-model-len", "1", "--max_model_len=2", "-tp", "8"]) == {"--max-model-len": "2",
                                                                                         "-tp": "8"}
