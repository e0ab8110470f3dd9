"""Inputs that look like real ones but cannot be (issue 32, item 3): each is an ERROR or a clear exit 3, never
a PASS, a FAIL it did not read, or a traceback. The rule behind all of them: a parser returns a value or raises
its ParseError, and an absurd value (links up at 0 Gb/s, 10^32 kB of RAM) is a ParseError, not a figure.

amd-smi xgmi shapes come from the healthy MI355X node in amd-smi's real layout (tests/unit/samples/xgmi/) and
the real capture of a host without XGMI; the lmcache probe output is what the check's own probe prints."""
import json
import os
import re
import subprocess
import sys

import pytest

from k3doctor import localfiles, recipes
from k3doctor.checks.lmcache import parse_probe
from k3doctor.gather import snapshot
from k3doctor.parsers import ParseError
from k3doctor.parsers.common import to_int
from k3doctor.parsers.fsinfo import parse_count, parse_stat
from k3doctor.parsers.meminfo import parse_meminfo
from k3doctor.parsers.xgmi import parse_xgmi
from k3doctor.results import Status
from tests.unit.test_check_xgmi import HEALTHY, judge, sample, with_cell, with_metric
from tests.unit.test_lmcache_ops import OFFLOAD
from tests.unit.test_lmcache_ops import judge as judge_lmcache


def k3doctor(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "k3doctor.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def with_ports(text: str, gpu: int, ports: list) -> str:
    """GPU ``gpu``'s GPU LINK PORT STATUS row set to ``ports`` (the pair table left as it is)."""
    return re.sub(rf"(?m)^(GPU{gpu}   \S+  )[UDX](?:  [UDX]){{7}}$", lambda m: m.group(1) + "  ".join(ports), text)


# ------------------------------------------------------------------------------------------ 1-3: amd-smi xgmi

@pytest.mark.parametrize("gpus", [range(8), [3]])
def test_xgmi_links_up_at_0_gbps_are_an_error_not_a_pass(gpus):
    text = HEALTHY
    for g in gpus:
        text = with_metric(text, g, "0")
    with pytest.raises(ParseError, match=f"GPU{min(gpus)} has links up \\(U\\) at bit_rate 0 Gb/s"):
        parse_xgmi(text)
    [v] = judge(text)
    assert v.status is Status.ERROR and "a link that is up moves bits" in v.message, v.message


def test_0_gbps_on_a_gpu_whose_links_are_all_down_is_judged_as_down():
    text = with_metric(HEALTHY, 4, "0")
    for peer in range(8):
        if peer != 4:
            text = with_cell(with_cell(text, 4, peer, "D"), peer, 4, "D")
    verdicts = judge(text)
    assert {v.status for v in verdicts} == {Status.FAIL} and len(verdicts) == 7
    assert all(v.remediation == "XGMI-LINK-DOWN" for v in verdicts)


def test_a_port_table_all_d_under_a_pair_table_all_u_is_an_error():
    """amd-smi prints both tables from the one status array amdsmi_get_gpu_xgmi_link_status returns (D is its
    AMDSMI_XGMI_LINK_DOWN): every port D while every pair is U is not a reading of any node."""
    text = HEALTHY
    for g in range(8):
        text = with_ports(text, g, ["D"] * 8)
    assert text.count("D  D  D  D  D  D  D  D") == 8
    with pytest.raises(ParseError, match="GPU0's XGMI LINK STATUS row reads 7 U / 0 D / 0 X link\\(s\\), its GPU "
                                         "LINK PORT STATUS 0 U / 8 D / 0 X"):
        parse_xgmi(text)
    [v] = judge(text)
    assert v.status is Status.ERROR and "cannot disagree" in v.message


def test_every_link_down_in_both_tables_is_a_fail_for_every_pair():
    text = HEALTHY
    for a in range(8):
        for b in range(8):
            if a != b:
                text = with_cell(text, a, b, "D")
    verdicts = judge(text)
    assert len(verdicts) == 28 and all(v.status is Status.FAIL and v.remediation == "XGMI-LINK-DOWN"
                                       for v in verdicts)


def test_a_down_port_the_pair_table_does_not_name_is_a_fail_of_that_gpu():
    """§30: a D in either status table is a BLOCK - the unused port of GPU6 reading D instead of X."""
    [v] = judge(with_ports(HEALTHY, 6, ["U"] * 7 + ["D"]))
    assert (v.status, v.gpu, v.remediation) == (Status.FAIL, 6, "XGMI-LINK-DOWN")
    assert v.message == ("GPU6 (0000:e5:00.0) XGMI link down: GPU LINK PORT STATUS reads D on port(s) 7, 1 more "
                         "than its XGMI LINK STATUS row names (§30: a D in either status table)")


@pytest.mark.parametrize("link_type", ["XG#I", "xgmi", "PCIe4", "\ufffdXGMI"])
def test_a_garbled_link_type_is_an_error_not_a_fail(link_type):
    text = with_metric(HEALTHY, 2, "32", link_type)
    with pytest.raises(ParseError, match="GPU2 link_type .* is none of XGMI, PCIE, UNKNOWN, N/A"):
        parse_xgmi(text)
    [v] = judge(text)
    assert v.status is Status.ERROR and v.remediation is None


def test_the_real_capture_without_xgmi_still_parses_with_its_port_table():
    report = parse_xgmi(sample("amd-smi-xgmi-no-xgmi-two-gpus.txt"))
    assert report.ports == {0: ("X",) * 8, 1: ("X",) * 8}
    assert {g.link_type for g in report.gpus.values()} == {"N/A"}


# ------------------------------------------------------------------------------------- 4: the lmcache probe

@pytest.mark.parametrize("line, said", [
    (" @ok /usr/lib/python3/lmcache/c_ops.so\n", ("ok", "/usr/lib/python3/lmcache/c_ops.so")),
    ("\t@ok /x/c_ops.so  \r\n", ("ok", "/x/c_ops.so")),
    ("  @absent\n", ("absent", "")),
    (" @failed ImportError: libcudart.so.13\n", ("failed", "ImportError: libcudart.so.13")),
])
def test_a_probe_line_with_blank_around_it_reads_as_what_it_says(line, said):
    assert parse_probe(line) == said


def test_an_ok_probe_line_with_a_leading_space_passes_and_never_fails_quoting_ok():
    [v] = judge_lmcache(" @ok /x/lmcache/c_ops.so\n", env=OFFLOAD)
    assert v.status is Status.PASS and "@ok" not in v.message, v.message


# ----------------------------------------------------------------------------- 5: meminfo and shared numbers

MEMINFO = ("MemTotal:       263842832 kB\nMemFree:        1234 kB\nSwapTotal:       8388604 kB\n"
           "HugePages_Total:       0\n")


@pytest.mark.parametrize("value, why", [
    ("9" * 5000, "expected a decimal integer"),  # int() raised ValueError (4300-digit limit)
    ("\u0661\u0662\u0663", "expected a decimal integer"),  # Arabic-Indic 123: int() and \d take them
    ("\uff11\uff12", "expected a decimal integer"),  # full-width digits
    ("1" + "0" * 32, "expected a decimal integer"),  # 10^32 kB: more digits than any counter
    (str(2 ** 50 + 1), "above 1125899906842624: no real reading is that large"),
    ("-5", "below 0"),
])
def test_meminfo_numbers_are_ascii_and_bounded_or_a_parse_error(value, why):
    assert parse_meminfo(MEMINFO)["MemTotal"] == 263842832 * 1024
    with pytest.raises(ParseError, match=why):
        parse_meminfo(MEMINFO.replace("263842832", value))


def test_the_shared_number_helper_and_fsinfo_take_ascii_digits_only():
    assert to_int("123", "x") == 123 and to_int(str(2 ** 50), "x", maximum=2 ** 50) == 2 ** 50
    for bad in ("\u0661\u0662", "9" * 5000):
        for parse in (lambda t: to_int(t, "x"), lambda t: parse_count(t + "\n", "wc -l"),
                      lambda t: parse_stat(f"{t} /dev/shm/x\n")):
            with pytest.raises(ParseError, match="expected a decimal integer|unexpected line"):
                parse(bad)
    with pytest.raises(ParseError, match="expected a count"):
        parse_count("N/A\n", "wc -l")


# --------------------------------------------------------------------------------- 6: a damaged readings file

@pytest.mark.parametrize("field, value, said", [
    ("unreachable", ["here"], "unreachable must be a mapping of node name to why it was not read, got ['here']"),
    ("unreachable", {"here": 3}, "unreachable must be a mapping"),
    ("overrides", [1], "overrides must be a list of NAME=VALUE strings"),
    ("nodes", {"here": {}}, "nodes must be a mapping of node name to a list of readings"),
    ("nodes", None, "nodes must be a mapping"),
])
def test_a_readings_file_of_the_wrong_shape_is_one_damaged_line_and_exit_3(tmp_path, field, value, said):
    doc = {"schema": snapshot.SCHEMA, "inventory": "", "overrides": [], "unreachable": {}, "nodes": {}, field: value}
    path = tmp_path / "readings.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(snapshot.SnapshotError, match="damaged readings file"):
        snapshot.load(path.read_text())
    run = k3doctor("judge", str(path))
    assert run.returncode == 3, run
    [line] = run.stderr.strip().splitlines()
    assert run.stdout == "" and line.startswith(f"k3doctor: cannot judge {path}: damaged readings file: {said}")


# ------------------------------------------------------------------------------------------------ 7: recipes

def recipe_problems(tmp_path, text: str) -> list:
    (tmp_path / "site.yaml").write_text(text)
    with pytest.raises(recipes.RecipeError) as info:
        recipes.read_file(str(tmp_path / "site.yaml"))
    return [p.replace(str(tmp_path) + "/", "") for p in info.value.problems]


@pytest.mark.parametrize("key", ["x", "1.5", "-3", "true", "0", "'2'"])
def test_golden_acceptance_length_keys_are_positive_integers(tmp_path, key):
    problems = recipe_problems(tmp_path, f"recipe: s\nplatform: mi355x\ngolden_acceptance_length: {{{key}: 1.5}}\n")
    assert len(problems) == 1 and problems[0].startswith("site.yaml:3: golden_acceptance_length.")
    assert "expected a key that is a positive integer (draft tokens)" in problems[0]


def test_golden_acceptance_length_x_is_exit_3_naming_file_and_key(tmp_path):
    (tmp_path / "site.yaml").write_text("recipe: s\nplatform: mi355x\ngolden_acceptance_length: {x: 1.5}\n")
    (tmp_path / "run.sh").write_text("true\n")
    run = k3doctor("recipe", "diff", "--recipe", str(tmp_path / "site.yaml"), "--script", str(tmp_path / "run.sh"))
    assert run.returncode == 3 and "internal error" not in run.stderr
    assert f"{tmp_path}/site.yaml:3: golden_acceptance_length.x:" in run.stderr


def test_extends_a_recipe_of_another_platform_is_refused(tmp_path):
    [problem] = recipe_problems(tmp_path, "recipe: s\nextends: kimi-k3-mi355x-agentx\nplatform: gfx1250\n")
    assert problem.startswith("site.yaml:3: platform: gfx1250, but it extends kimi-k3-mi355x-agentx, a mi355x recipe")
    (tmp_path / "ok.yaml").write_text("recipe: s\nextends: kimi-k3-mi355x-agentx\nplatform: mi355x\n")
    site = recipes.read_file(str(tmp_path / "ok.yaml"))
    assert site.concurrencies == [1, 4, 8, 10]  # a recipe that extends a multi-point one keeps its points
    assert site.point(8).env == recipes.builtin("kimi-k3-mi355x-agentx").point(8).env


def test_a_concurrency_on_a_single_point_recipe_is_refused_before_the_script_runs(tmp_path):
    with pytest.raises(ValueError, match="gfx1250-config-a has one point, for no particular concurrency: "
                                         "concurrency 7 names none of its points"):
        recipes.builtin("gfx1250-config-a").point(7)
    marker = tmp_path / "ran"
    (tmp_path / "run.sh").write_text(f"touch {marker}\n")
    run = k3doctor("recipe", "diff", "--recipe", "gfx1250-config-a", "--concurrency", "7", "--script",
                   str(tmp_path / "run.sh"))
    assert run.returncode == 3 and "concurrency 7 names none of its points" in run.stderr, run
    run = k3doctor("recipe", "diff", "--recipe", "kimi-k3-mi355x-agentx", "--concurrency", "7", "--script",
                   str(tmp_path / "run.sh"))
    assert run.returncode == 3 and "(it has 1, 4, 8, 10)" in run.stderr, run
    assert not marker.exists()


# ------------------------------------------------------------------------------ 8: --script that is no file

def test_script_on_a_fifo_or_a_device_says_what_it_is_without_blocking(tmp_path):
    fifo = tmp_path / "launch.sh"
    os.mkfifo(fifo)
    assert localfiles.why_not_readable(str(fifo)) == "is a FIFO (named pipe), not a regular file"
    for path, said in ((fifo, "is a FIFO (named pipe), not a regular file"),
                       ("/dev/null", "is a character device, not a regular file"),
                       (tmp_path / "missing.sh", "no such file")):
        run = k3doctor("recipe", "diff", "--recipe", "gfx1250-config-a", "--script", str(path), timeout=30)
        assert run.returncode == 3 and run.stderr.strip() == f"k3doctor: --script {path}: {said}", run
