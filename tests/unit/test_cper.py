"""gpu-cper-fatal (§31.3): amd-smi ras --cper --severity fatal in the table amdsmi_commands.py prints without
--folder, judged against /proc/stat's btime: newer than boot = FAIL on its GPU, older = INFO, unread = ERROR."""
import pytest

from k3doctor import testing
from k3doctor.parsers import ParseError
from k3doctor.parsers.cper import parse_btime, parse_cper_list
from k3doctor.registry import load_checks
from k3doctor.results import Status

load_checks()
WARNING = "WARNING: No CPER files will be dumped unless --folder=<folder_name> is specified and cper entries exist.\n"
HEADER = "timestamp            gpu_id  severity            \n"
BOOT = 1_764_000_000  # 2025-11-24 16:00:00 UTC
STAT = f"cpu  1 2 3 4\nintr 5\nctxt 6\nbtime {BOOT}\nprocesses 7\n"


def row(stamp, gpu, severity="FATAL"):
    return f"{stamp:<20} {gpu:<7} {severity:<20}\n"


def judge(text, stat=STAT):
    return testing.judge("gpu-cper-fatal", {"cper": text, "stat": stat})


def test_the_documented_tables_parse():
    """The amdsmi CLI doc's rows (YYYY/MM/DD) and the MxGPU doc's (MM/DD/YYYY, lower case, file and AFIDs)."""
    [a] = parse_cper_list(WARNING + HEADER + row("2000/06/27 10:45:13", 0))
    assert (a.gpu, a.severity, a.epoch_s) == (0, "FATAL", 962102713)
    table = ("timestamp                gpu_id   severity                 file_name          list of afids\n"
             "07/10/2025 09:03:09      0        fatal                    fatal-1.cper       24\n"
             "07/10/2025 09:04:15      1        fatal                    fatal-2.cper       24 29\n")
    assert [(c.gpu, c.severity) for c in parse_cper_list(table)] == [(0, "FATAL"), (1, "FATAL")]
    assert parse_cper_list("") == [] and parse_cper_list(WARNING + HEADER) == []
    assert parse_btime(STAT) == BOOT


@pytest.mark.parametrize("text", ["Traceback (most recent call last):\n", "2025/13/45 99:00:00  0  FATAL\n",
                                  "2025/11/24 16:00:00  zero  FATAL\n", HEADER + "\x00\x1b[0;31m\n"])
def test_anything_else_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_cper_list(text)


def test_a_record_newer_than_boot_fails_on_its_gpu_and_an_older_one_is_said():
    verdicts = judge(WARNING + HEADER + row("2025/11/24 01:00:00", 2) + row("2025/11/24 16:05:00", 5)
                     + row("2025/11/24 17:00:00", 5))
    assert [(v.status, v.gpu, v.remediation) for v in verdicts] == [(Status.FAIL, 5, "GPU-CPER-FATAL")]
    assert "2 fatal CPER record(s) since the boot at 2025-11-24 16:00:00 UTC, the last at 2025-11-24 17:00:00" \
        in verdicts[0].message
    [v] = judge(WARNING + HEADER + row("2025/11/24 01:00:00", 2))
    assert v.status == Status.PASS and "INFO: 1 fatal CPER record(s) older than the boot on GPU 2" in v.message
    [v] = judge(WARNING + HEADER)
    assert v.status == Status.PASS and "INFO" not in v.message


@pytest.mark.parametrize("cper, stat", [((1, "", "amd-smi: permission denied"), STAT), (HEADER, "cpu 1 2\n"),
                                        (HEADER, None)])
def test_unread_records_or_boot_time_is_an_error(cper, stat):
    [v] = judge(cper, stat)
    assert v.status == Status.ERROR and v.message.startswith("fatal CPER records not judged")
