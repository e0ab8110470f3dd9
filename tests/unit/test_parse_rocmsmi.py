import json

import pytest

from k3doctor.parsers import ParseError
from k3doctor.parsers.rocmsmi import parse_meminfo_vram, parse_showmemuse, parse_showpids
from tests.corpus import load

BANNER = "============================ ROCm System Management Interface ============================\n"
FOOTER = "================================== End of ROCm SMI Log ===================================\n"


def test_showpids_spaces():
    processes = parse_showpids(load("rocm-smi-showpids-spaces.txt"))
    assert len(processes) == 8
    busy = [p for p in processes if p.vram_bytes]
    assert len(busy) == 1
    (engine,) = busy
    assert (engine.pid, engine.name, engine.gpus) == (1168514, "pt_main_thread", 1)
    assert (engine.vram_bytes, engine.sdma_bytes, engine.cu_occupancy) == (177386942464, 0, 4)
    assert {p.name for p in processes if p is not engine} == {"test_ref"}


def test_showpids_tabs_and_name_with_space():
    text = (BANNER + "KFD process information:\n"
            "PID\tPROCESS NAME\tGPU(s)\tVRAM USED\tSDMA USED\tCU OCCUPANCY\t\n"
            "42\tray::Worker 1\t4\t1024\t0\tUNKNOWN\t\n" + FOOTER)
    (process,) = parse_showpids(text)
    assert (process.pid, process.name, process.gpus, process.cu_occupancy) == (42, "ray::Worker 1", 4, None)


def test_showpids_none_running():
    text = BANNER + "===================================== KFD Processes ======================================\n"
    assert parse_showpids(text + "No KFD PIDs currently running\n" + FOOTER) == []


@pytest.mark.parametrize("text", [
    "",
    BANNER + FOOTER,  # neither a table nor "No KFD PIDs"
    BANNER + "PID     PROCESS NAME    GPU(s)  VRAM USED       SDMA USED       CU OCCUPANCY\n"
    "1168514 pt_main_thread  1       17738694\n",  # row cut mid-line
    BANNER + "PID     PROCESS NAME    GPU(s)  VRAM USED       SDMA USED       CU OCCUPANCY\n"
    "1168514 pt_main_thread  1       177386942464    0               4\n",  # no closing rule: truncated
    BANNER + "PID     PROCESS NAME    GPU(s)  VRAM USED       SDMA USED       CU OCCUPANCY\n" + FOOTER,
])
def test_showpids_garbled_raises(text):
    with pytest.raises(ParseError):
        parse_showpids(text)


def test_meminfo_vram_single():
    assert parse_meminfo_vram(load("rocm-smi-showmeminfo-vram-single.txt")) == {0: (4278190080, 108814336)}
    assert 4278190080 // 2**20 == 4080


def test_meminfo_vram_cpx_fragment_reports_full_vram_per_partition():
    vram = parse_meminfo_vram(load("rocm-smi-concise-showmeminfo-mi300x-cpx.txt"))
    assert set(vram) == set(range(7))  # the fragment's GPU[0]..GPU[6]; not the real GPU count
    assert all(total == 206141652992 and used == 297771008 for total, used in vram.values())
    assert vram[0][0] // 2**20 == 196592


def test_meminfo_vram_json():
    text = json.dumps({"card0": {"VRAM Total Memory (B)": "4278190080", "VRAM Total Used Memory (B)": "N/A"}})
    assert parse_meminfo_vram(text) == {0: (4278190080, None)}


def test_no_json_data_warning_raises():
    with pytest.raises(ParseError, match="No JSON data"):
        parse_meminfo_vram(load("rocm-smi-json-no-data-warning-mi300a.txt"))


@pytest.mark.parametrize("text", [
    "",
    BANNER + FOOTER,
    "GPU[0]          : VRAM Total Memory (B): 4278190080\n",  # used line missing: truncated
    "GPU[0]          : VRAM Total Memory (B): lots\nGPU[0]          : VRAM Total Used Memory (B): 1\n",
    '{"card0": {"VRAM Total Memory (B)": "1"',
])
def test_meminfo_garbled_raises(text):
    with pytest.raises(ParseError):
        parse_meminfo_vram(text)


def test_showmemuse():
    text = (BANNER + "============================== Current Memory Use ===============================\n"
            "GPU[0]          : GPU Memory Allocated (VRAM%): 0\n"
            "GPU[0]          : GPU Memory Read/Write Activity (%): 0\n"
            "GPU[1]          : GPU Memory Allocated (VRAM%): 31\n"
            "GPU[1]          : GPU Memory Read/Write Activity (%): N/A\n" + FOOTER)
    assert parse_showmemuse(text) == {0: 0, 1: 31}


def test_showmemuse_garbled_raises():
    with pytest.raises(ParseError):
        parse_showmemuse(BANNER + "GPU[0]          : GPU Memory Read/Write Activity (%): 0\n" + FOOTER)
