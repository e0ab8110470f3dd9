import pytest

from k3doctor.parsers import ParseError
from k3doctor.parsers.rocmsmi import parse_showmemuse, parse_showpids
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


def test_showmemuse():
    text = (BANNER + "============================== Current Memory Use ===============================\n"
            "GPU[0]          : GPU Memory Allocated (VRAM%): 0\n"
            "GPU[0]          : GPU Memory Read/Write Activity (%): 0\n"
            "GPU[1]          : GPU Memory Allocated (VRAM%): 31\n"
            "GPU[1]          : GPU Memory Read/Write Activity (%): N/A\n" + FOOTER)
    assert parse_showmemuse(text, gpus=2) == {0: 0, 1: 31}


def test_showmemuse_garbled_raises():
    with pytest.raises(ParseError, match="no 'GPU Memory Allocated"):
        parse_showmemuse(BANNER + "GPU[0]          : GPU Memory Read/Write Activity (%): 0\n" + FOOTER, gpus=1)


def memuse(*percents):
    return (BANNER + "============================== Current Memory Use ===============================\n"
            + "".join(f"GPU[{g}]\t\t: GPU Memory Allocated (VRAM%): {p}\n"
                      f"GPU[{g}]\t\t: GPU Memory Read/Write Activity (%): 0\n" for g, p in enumerate(percents))
            + FOOTER)


def test_showmemuse_cut_before_a_busy_gpu_is_not_a_partial_answer():
    full = memuse(0, 0, 95, 0)
    assert parse_showmemuse(full, gpus=4) == {0: 0, 1: 0, 2: 95, 3: 0}
    with pytest.raises(ParseError, match="cut off"):
        parse_showmemuse(full[: full.index("GPU[2]")], gpus=4)  # cut at a line boundary: no end line


def test_showmemuse_must_cover_every_gpu_of_the_node():
    with pytest.raises(ParseError, match=r"covers GPU\[0\], GPU\[1\], not GPU\[2\], GPU\[3\]"):
        parse_showmemuse(memuse(0, 0), gpus=4)  # complete log, but half the node
    gap = memuse(0, 0, 0, 0).replace("GPU[2]", "GPU[5]")
    with pytest.raises(ParseError, match=r"not GPU\[2\]"):
        parse_showmemuse(gap, gpus=4)
    assert parse_showmemuse(memuse(*[0] * 8), gpus=4) == dict.fromkeys(range(8), 0)  # partitioned: more is judged


@pytest.mark.parametrize("value", ["-95", "nan", "inf", "1e999", "0x5f", "1_000", "250", "9" * 5000])
def test_showmemuse_absurd_percentages_raise(value):
    with pytest.raises(ParseError):
        parse_showmemuse(memuse(0, value), gpus=2)


@pytest.mark.parametrize("garble", [
    lambda text: text + text,  # two answers glued
    lambda text: text.replace("GPU[1]\t\t: GPU Memory Allocated (VRAM%): 0\n",
                              "GPU[1]\t\t: GPU Memory Allocated (VRAM%): 0\n" * 2),  # a line printed twice
    lambda text: text + "GPU[1]\t\t: GPU Memory Allocated (VRAM%): 0\n",  # text after the end line
    lambda text: text.rstrip("\n"),  # cut mid-line (inside the end line)
])
def test_showmemuse_glued_or_cut_raises(garble):
    with pytest.raises(ParseError):
        parse_showmemuse(garble(memuse(0, 0)), gpus=2)


def test_showpids_no_pids_counts_only_as_the_whole_answer():
    table = load("rocm-smi-showpids-spaces.txt")
    after_table = table.replace("=" * 90 + "\n", "No KFD PIDs currently running\n" + "=" * 90 + "\n", 1)
    with pytest.raises(ParseError, match="No KFD PIDs"):
        parse_showpids(after_table)
    before_table = table.replace("KFD process information:\n",
                                 "No KFD PIDs currently running\nKFD process information:\n")
    with pytest.raises(ParseError, match="No KFD PIDs"):
        parse_showpids(before_table)
    without_end = BANNER + "No KFD PIDs currently running\n"
    with pytest.raises(ParseError, match="cut off"):
        parse_showpids(without_end)


def test_showpids_cut_inside_the_table_raises_even_at_a_line_boundary():
    table = load("rocm-smi-showpids-spaces.txt")
    with pytest.raises(ParseError, match="cut off"):
        parse_showpids(table[: table.index("3714485")])


def test_json_no_data_warning_is_no_answer():
    with pytest.raises(ParseError):
        parse_showmemuse(load("rocm-smi-json-no-data-warning-mi300a.txt"), gpus=1)
