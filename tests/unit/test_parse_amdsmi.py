import json

import pytest

from k3doctor.parsers import ParseError
from k3doctor.parsers.amdsmi import parse_fabric, parse_physical_acc_ids, parse_static_vram
from tests.corpus import commands, load

FIXTURE = "amd-smi-fabric-json-nodescraper-fixture.json"

# No real `amd-smi fabric` human capture exists (corpus INDEX "Gaps" 1).  This sample is
# CONSTRUCTED from reference §27 item 1 (one `GPU: <n>` block, nested FABRIC_INFO with
# upper-case keys, LOCAL_ACTIVE_ACCELERATORS as 4 rows x 8, FABRIC_TELEMETRY section) with
# this rack's expected values (§6/§7: one ppod UUID, VPOD_ID 2, ACTIVE; BANDWIDTH 0 Mb/s,
# LATENCY 0 ns, VERSION 4294967295 unpopulated).  GPU 2 shows the "not configured" sentinels.
FABRIC_TEXT = """\
GPU: 0
    BDF: 0001:01:00.0
    FABRIC_INFO:
        BDF: 0001:01:00.1
        VERSION: 4294967295
        ACCELERATOR_ID: 48
        FABRIC_TYPE: UALOE
        BANDWIDTH: 0 Mb/s
        LATENCY: 0 ns
        PPOD_ID: 3e56a1b2-0c4d-4e5f-8a9b-0c1d2e3f878f
        PPOD_SIZE: 64
        VPOD_ID: 2
        VPOD_SIZE: 16
        LOCAL_ACCELERATORS: 51, 50, 49, 48
        LOCAL_ACTIVE_ACCELERATORS:
            48, 49, 50, 51, -, -, -, -
            -, -, -, -, -, -, -, -
            -, -, -, -, -, -, -, -
            -, -, -, -, -, -, -, -
        ADDR_MODE: SOURCE_ALIASING
        ACCEL_STATE: ACTIVE
    FABRIC_TELEMETRY:
        TX_BYTES: N/A

GPU: 1
    BDF: 0002:01:00.0
    FABRIC_INFO: N/A
    FABRIC_TELEMETRY: N/A

GPU: 2
    BDF: 0003:01:00.0
    FABRIC_INFO:
        BDF: 0003:01:00.1
        VERSION: 4294967295
        ACCELERATOR_ID: 4294967295
        FABRIC_TYPE: UALOE
        BANDWIDTH: N/A
        LATENCY: N/A
        PPOD_ID: 99999999-9999-9999-9999-999999999999
        PPOD_SIZE: 0
        VPOD_ID: 0
        VPOD_SIZE: 0
        LOCAL_ACCELERATORS: N/A
        ADDR_MODE: UNKNOWN
        ACCEL_STATE: UNCONFIGURED
"""


def test_fabric_json_fixture():
    gpu0, gpu1 = parse_fabric(load(FIXTURE))
    assert (gpu0.gpu, gpu0.bdf, gpu0.fabric_bdf) == (0, "0001:01:00.0", "0001:01:00.1")
    assert (gpu0.accelerator_id, gpu1.accelerator_id) == (7, 6)
    assert gpu0.fabric_type == "UALOE"
    assert gpu0.ppod_id == gpu1.ppod_id == "4c8fab1c-fb8b-42aa-92ae-ea17ca953bdb"
    assert (gpu0.ppod_size, gpu0.vpod_id, gpu0.vpod_size) == (72, 0, 0)
    assert gpu0.version is None  # 4294967295 = not reported
    assert (gpu0.bandwidth_mbps, gpu0.latency_ns) == (0, 0)  # unpopulated, still a value
    assert gpu0.accel_state == "unknown" and gpu0.addr_mode == "unknown"
    assert gpu0.available


def test_fabric_json_gpu_data_wrapper_and_noise_prefix():
    entries = json.loads(load(FIXTURE))
    noisy = (
        "WARNING: User is missing the following required groups: render, video. "
        "Please add user to these groups.\n"
        "/opt/rocm/libexec/amdsmi_cli/amdsmi_helpers.py:12: SyntaxWarning: invalid escape sequence '\\d'\n"
        '  pattern = re.compile("\\d+")\n'
        + json.dumps({"gpu_data": entries})
    )
    assert [f.accelerator_id for f in parse_fabric(noisy)] == [7, 6]


def test_fabric_json_flat_entries_and_na_info():
    flat = [
        {"gpu": 0, "bdf": "0001:01:00.0", "fabric_info": {
            "accelerator_id": 12, "ppod_id": "00000000-0000-0000-0000-000000000000", "vpod_id": 2,
            "local_accelerators": [15, 14, 4294967295], "accel_state": "READY",
            "bandwidth": {"value": "N/A", "unit": "Mb/s"}}},
        {"gpu": 1, "bdf": "0002:01:00.0", "fabric_info": "N/A"},
    ]
    configured, missing = parse_fabric(json.dumps(flat))
    assert configured.accelerator_id == 12
    assert configured.ppod_id is None and configured.ppod_id_raw == "00000000-0000-0000-0000-000000000000"
    assert configured.local_accelerators == [15, 14]
    assert configured.accel_state == "ready"
    assert configured.bandwidth_mbps is None
    assert not missing.available and missing.bdf == "0002:01:00.0" and missing.ppod_id is None


def test_fabric_text_form_constructed_from_reference_27():
    gpu0, gpu1, gpu2 = parse_fabric(FABRIC_TEXT)
    assert (gpu0.gpu, gpu0.bdf, gpu0.fabric_bdf) == (0, "0001:01:00.0", "0001:01:00.1")
    assert gpu0.accelerator_id == 48
    assert gpu0.ppod_id == "3e56a1b2-0c4d-4e5f-8a9b-0c1d2e3f878f"
    assert (gpu0.vpod_id, gpu0.vpod_size, gpu0.ppod_size) == (2, 16, 64)
    assert gpu0.local_accelerators == [51, 50, 49, 48]
    assert gpu0.accel_state == "active" and gpu0.addr_mode == "source_aliasing"
    assert (gpu0.bandwidth_mbps, gpu0.latency_ns, gpu0.version) == (0, 0, None)
    assert gpu1.gpu == 1 and not gpu1.available
    assert gpu2.accelerator_id is None
    assert gpu2.ppod_id is None and gpu2.ppod_id_raw == "99999999-9999-9999-9999-999999999999"
    assert gpu2.local_accelerators is None
    assert gpu2.bandwidth_mbps is None and gpu2.accel_state == "unconfigured"


@pytest.mark.parametrize("text", [
    "",
    "   \n",
    '[\n    {\n        "gpu": 0,\n        "fabric": {\n            "gpu": 0,\n',  # truncated JSON
    "WARNING: User is missing the following required groups: render, video.\n",  # stderr only
    "[]",
    '[{"bdf": "0001:01:00.0"}]',  # no GPU index
    '[{"gpu": 0, "bdf": "0001:01:00.0"}]',  # no fabric info at all
    '[{"gpu": 0, "fabric_info": {"bandwidth": "10 Gb/s", "vpod_id": 1}}]',  # unexpected unit
    '[{"gpu": 0, "fabric_info": {"vpod_id": "two"}}]',
])
def test_fabric_garbled_raises(text):
    with pytest.raises(ParseError):
        parse_fabric(text)


def test_fabric_truncated_corpus_json_raises():
    text = load(FIXTURE)
    with pytest.raises(ParseError, match="truncated"):
        parse_fabric(text[: len(text) // 2])


def test_static_vram_human_without_vram_block_is_unknown():
    assert parse_static_vram(load("amd-smi-static-mi350x.txt")) == {0: None}
    human, _ = commands("amd-smi-static-mi300x-blog.txt")
    assert parse_static_vram(human) == {0: None}  # tolerates "[output truncated]"


def test_static_vram_json_from_blog_jq_fragment():
    _, vram = commands("amd-smi-static-mi300x-blog.txt")  # `jq '.[0]["vram"]'` output
    as_list = json.dumps([{"gpu": 0, "vram": json.loads(vram)}])
    assert parse_static_vram(as_list) == {0: 196592}
    assert parse_static_vram(json.dumps({"gpu_data": [{"gpu": 3, "vram": json.loads(vram)}]})) == {3: 196592}


def test_static_vram_human_432_gib_board():
    text = (
        "GPU: 0\n    ASIC:\n        MARKET_NAME: AMD Instinct MI455X\n"
        "    VRAM:\n        TYPE: HBM\n        VENDOR: N/A\n        SIZE: 442368 MB\n        BIT_WIDTH: 24576\n"
        "GPU: 1\n    VRAM: N/A\n"
        "AI_NIC: 0\n    BDF: 0000:e2:00.0\n"
    )
    assert parse_static_vram(text) == {0: 432 * 1024, 1: None}  # §12: 442,368 MB = 432 GiB


@pytest.mark.parametrize("text", ["", "amd-smi: command not found\n", '[{"gpu": 0, "vram": {"size": "12 TB"}}]'])
def test_static_vram_garbled_raises(text):
    with pytest.raises(ParseError):
        parse_static_vram(text)


STATIC_432 = ("GPU: 0\n    VRAM:\n        TYPE: HBM\n        SIZE: 442368 MB\n"
              "GPU: 1\n    VRAM:\n        SIZE: 442368 MB\n")


def test_only_real_static_output_counts_as_static():
    list_output = load("amd-smi-list-ainic-mi210.txt")
    with pytest.raises(ParseError, match="not amd-smi static output"):
        parse_static_vram(list_output)  # GPU: 0 with BDF/UUID/KFD_ID: `amd-smi list`
    with pytest.raises(ParseError, match="not amd-smi static output"):
        parse_static_vram(FABRIC_TEXT)
    with pytest.raises(ParseError, match="not amd-smi static output"):
        parse_static_vram(json.dumps([{"gpu": 0, "bdf": "0000:05:00.0"}]))
    with pytest.raises(ParseError, match="not amd-smi static output"):
        parse_static_vram(STATIC_432 + "GPU: 2\n")  # cut right after the next block's first line


def test_duplicate_gpu_index_raises_instead_of_overwriting():
    with pytest.raises(ParseError, match="GPU 0 listed twice"):
        parse_static_vram(STATIC_432.replace("GPU: 1", "GPU: 0"))
    entry = {"gpu": 0, "vram": {"size": {"value": 442368, "unit": "MB"}}}
    with pytest.raises(ParseError, match="GPU 0 listed twice"):
        parse_static_vram(json.dumps([entry, {**entry, "vram": {"size": {"value": 294912, "unit": "MB"}}}]))
    with pytest.raises(ParseError, match="listed twice"):
        parse_fabric(FABRIC_TEXT.replace("GPU: 2", "GPU: 1"))


def test_human_static_cut_mid_line_or_with_a_repeated_line_raises():
    with pytest.raises(ParseError, match="mid-line"):
        parse_static_vram(STATIC_432[: STATIC_432.rindex("442368") + 3])  # SIZE: 442 (MB lost)
    with pytest.raises(ParseError, match="printed twice"):
        parse_static_vram(STATIC_432.replace("        SIZE: 442368 MB\n", "        SIZE: 442368 MB\n" * 2, 1))


@pytest.mark.parametrize("size", ['"-442368"', '"0x6c000"', '"1_000"', '"9e999"', "1e999",
                                  '"' + "9" * 5000 + '"'])
def test_absurd_vram_sizes_raise(size):
    with pytest.raises(ParseError):
        parse_static_vram(f'[{{"gpu": 0, "vram": {{"size": {{"value": {size}, "unit": "MB"}}}}}}]')


STATIC_ASIC_TEXT_27_1 = """GPU: 0
    ASIC:
        MARKET_NAME: AMD Instinct MI455X
        OAM_ID: 0
        PHYSICAL_ACC_ID: 15
    BUS:
        BDF: 0001:01:00.0
GPU: 1
    ASIC:
        MARKET_NAME: AMD Instinct MI455X
        OAM_ID: 1
        PHYSICAL_ACC_ID: N/A
    BUS:
        BDF: 0002:01:00.0
"""


def test_physical_acc_id_text_and_json_across_amd_smi_versions():
    """§29: 27.1 prints PHYSICAL_ACC_ID (`static --asic`); N/A / UINT32_MAX / NOT_SUPPORTED without a UALoE session;
    26.x wraps JSON in {"gpu_data": [...]}, older a bare list; before 27.1 the key does not exist."""
    assert parse_physical_acc_ids(STATIC_ASIC_TEXT_27_1) == {0: ("0001:01:00.0", 15), 1: ("0002:01:00.0", None)}
    entries = [{"gpu": 0, "asic": {"physical_acc_id": 15}, "bus": {"bdf": "0001:01:00.0"}},
               {"gpu": 1, "asic": {"physical_acc_id": "NOT_SUPPORTED"}, "bus": {"bdf": "0002:01:00.0"}},
               {"gpu": 2, "asic": {"physical_acc_id": 4294967295}, "bus": {"bdf": "0003:01:00.0"}}]
    want = {0: ("0001:01:00.0", 15), 1: ("0002:01:00.0", None), 2: ("0003:01:00.0", None)}
    assert parse_physical_acc_ids(json.dumps({"gpu_data": entries})) == want
    assert parse_physical_acc_ids(json.dumps(entries)) == want
    assert parse_physical_acc_ids(json.dumps({"gpu_data": [{"gpu": 0, "asic": {"oam_id": 0}}]})) == {}  # 26.x


@pytest.mark.parametrize("text", ["", "\n", json.dumps({"gpu_data": [{"gpu": 0, "bus": {"bdf": "0001:01:00.0"}}]}),
                                  json.dumps({"gpu_data": [{"gpu": 0, "asic": {"physical_acc_id": "seven"}}]})])
def test_physical_acc_id_empty_or_garbled_raises(text):
    """rc 0 with empty output is never "no GPUs" (§29); a GPU without ASIC is not static --asic output."""
    with pytest.raises(ParseError):
        parse_physical_acc_ids(text)


def test_static_from_amd_smi_26_1_with_ifwi_instead_of_vbios_is_static_output():
    """§29: amd-smi 26.1.0 (ROCm 7.1) renamed `static --vbios` to `--ifwi`; a block whose only section is IFWI is
    still static output (VRAM unknown, never a ParseError that would turn a healthy node into an ERROR)."""
    ifwi = "GPU: 0\n    IFWI:\n        NAME: AMD MI455X\n        BUILD_DATE: 2026/09/18 10:00\n"
    assert parse_static_vram(ifwi) == {0: None}
    assert parse_static_vram(json.dumps({"gpu_data": [{"gpu": 0, "ifwi": {"version": "00154951"}}]})) == {0: None}
    with pytest.raises(ParseError, match="not amd-smi static output"):
        parse_static_vram(ifwi.replace("IFWI", "FIRMWARE_BLOB"))
