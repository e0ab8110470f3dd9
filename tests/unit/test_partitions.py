"""gpu-partitions (§31.3, §31.4): amd-smi static --partition in the shapes amdsmi_commands.py prints (JSON
``partition: {compute_partition, memory_partition, partition_id}``; human ``PARTITION:`` block), judged for
uniformity and for the layout the platform's engine needs."""
import json

import pytest

from k3doctor import testing
from k3doctor.inventory.types import Settings
from k3doctor.parsers import ParseError
from k3doctor.parsers.amdsmi import parse_partitions
from k3doctor.registry import load_checks
from k3doctor.results import Status

load_checks()


def output(modes, partition_id=True):
    return json.dumps({"gpu_data": [{"gpu": g, "partition": {"compute_partition": c, "memory_partition": m,
                                                             **({"partition_id": 0} if partition_id else {})}}
                                    for g, (c, m) in enumerate(modes)]})


def judge(text, platform="mi355x", **params):
    return testing.judge("gpu-partitions", {"partitions": text}, settings=Settings(platform=platform), **params)


def test_both_output_forms_parse_and_na_is_none():
    assert parse_partitions(output([("SPX", "NPS1"), ("N/A", "N/A")], partition_id=False)) == {
        0: ("SPX", "NPS1"), 1: (None, None)}
    human = "GPU: 0\n    PARTITION:\n        COMPUTE_PARTITION: CPX\n        MEMORY_PARTITION: NPS4\n" \
            "        PARTITION_ID: 0\n\n"
    assert parse_partitions(human) == {0: ("CPX", "NPS4")}


@pytest.mark.parametrize("text", [output([("SPX", "NPS3")]), output([("XPX", "NPS1")]),
                                  json.dumps([{"gpu": 0, "vram": {}}]), "", "Traceback (most recent call last):\n"])
def test_anything_else_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_partitions(text)


def test_a_half_applied_change_names_the_odd_gpus():
    """legacy #4439: CPX on some GPUs, N/A on the others - each odd GPU is named once, against the majority."""
    verdicts = judge(output([("SPX", "NPS1")] * 6 + [("CPX", "NPS1"), ("N/A", "N/A")]))
    assert [(v.status, v.gpu) for v in verdicts] == [(Status.FAIL, 6), (Status.FAIL, 7)]
    assert "GPU 6 reads CPX/NPS1 while 6 GPU(s) read SPX/NPS1" in verdicts[0].message
    assert all(v.remediation == "GPU-PARTITION" for v in verdicts)


def test_uniform_but_not_the_platforms_layout_fails_and_a_site_may_expect_another():
    [v] = judge(output([("CPX", "NPS4")] * 8))
    assert v.status == Status.FAIL and "engine needs SPX/NPS1" in v.message
    [v] = judge(output([("CPX", "NPS4")] * 8), expected_partition="cpx/nps4")
    assert v.status == Status.PASS and "CPX/NPS4 as the engine needs" in v.message
    [v] = judge(output([("CPX", "NPS4")] * 8), platform="gfx1250")  # no layout named there: uniform is enough
    assert v.status == Status.PASS


def test_healthy_no_partitions_and_unread():
    [v] = judge(output([("SPX", "NPS1")] * 8))
    assert v.status == Status.PASS and "all 8 GPU(s) in SPX/NPS1" in v.message
    [v] = judge(output([("N/A", "N/A")] * 4))
    assert v.status == Status.PASS and "no compute/memory partitions" in v.message
    [v] = judge((1, "", "amd-smi: error"))
    assert v.status == Status.ERROR and v.message.startswith("partitions not read")
