"""Output formats checked by their real consumers: prometheus_client's parser, junitparser, NPD's config rules."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import junitparser
import pytest
from prometheus_client.parser import text_string_to_metric_families

from k3doctor.judging.runner import RunReport
from k3doctor.outputs import OUTPUTS, write_output
from k3doctor.outputs.report import render_junit
from k3doctor.probes.collective_figures import with_sweep_figures
from k3doctor.probes.ualoe_verdicts import pair_figures
from k3doctor.registry import Registry, check, remediation
from k3doctor.results import Result, Status

REPO = Path(__file__).resolve().parents[2]
HOSTILE = 'ct"13\\\n\x00\x1b[31m\x07\udcff\ufffdend'  # quote, backslash, newline, NUL, ESC, BEL, bad byte


def run_report(results, nodes=("ct13", "ct14"), unreachable=None, duration=12.5):
    return RunReport(results=results, nodes=list(nodes), duration_s=duration, unreachable=unreachable or {})


def render(fmt, report, checks=(), verbose=False):
    return OUTPUTS[fmt].render(report, list(checks), verbose)


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(text, name):
    return [(s.labels, s.value) for s in families(text)[name].samples]


def test_prom_one_status_per_check_node_gpu_worst_wins():
    results = [Result("ualink", "ct13", Status.PASS, "ok", gpu=0),
               Result("ualink", "ct13", Status.FAIL, "bad", gpu=1),
               Result("fabric", "ct13", Status.PASS, "pair a", gpu=0),
               Result("fabric", "ct13", Status.WARN, "pair b", gpu=0),  # same place: one series, the worst
               Result("shm", "ct14", Status.ERROR, "unreadable"),
               Result("rack", None, Status.SKIP, "not asked")]
    text = render("prom", run_report(results))
    status = samples(text, "k3doctor_check_status")
    keys = [tuple(sorted(labels.items())) for labels, _ in status]
    assert len(keys) == len(set(keys)) == 5
    by = {(lab["check"], lab["node"], lab["gpu"]): value for lab, value in status}
    assert by == {("ualink", "ct13", "0"): 0, ("ualink", "ct13", "1"): 4, ("fabric", "ct13", "0"): 2,
                  ("shm", "ct14", ""): 3, ("rack", "", ""): 1}
    verdict = {lab["verdict"]: value for lab, value in samples(text, "k3doctor_verdict")}
    assert verdict == {"READY TO LAUNCH": 0, "DO NOT LAUNCH": 1, "INCONCLUSIVE": 0}
    assert samples(text, "k3doctor_run_duration_seconds") == [({}, 12.5)]
    assert families(text)["k3doctor_check_status"].type == "gauge"


def test_prom_label_values_survive_any_node_name():
    report = run_report([Result("shm", HOSTILE, Status.FAIL, HOSTILE)], nodes=[HOSTILE], unreachable={HOSTILE: "x"})
    text = render("prom", report)
    [(labels, value)] = samples(text, "k3doctor_check_status")
    assert value == 4 and labels["node"] == HOSTILE.replace("\udcff", "\\udcff")  # a lone surrogate cannot be UTF-8
    assert samples(text, "k3doctor_node_reachable") == [({"node": labels["node"]}, 0)]
    text.encode("utf-8")  # node_exporter reads UTF-8


def test_prom_carries_busbw_and_fabric_figures_the_probes_add():
    sizes = [{"bytes": 1 << 20, "busbw_gbs": 120.5}, {"bytes": 1 << 30, "busbw_gbs": 351.25}]
    pair = {"pair": "ct13<->ct14", "exporter": "ct13", "importer": "ct14",
            "gbps": {"read": 2029.0, "write": 3192.0, "bidir": 3986.0}}
    results = with_sweep_figures([
        Result("allreduce-probe", None, Status.PASS, "busbw", evidence={"run": "full", "sizes": sizes}),
        Result("ualoe-fabric", "ct13", Status.PASS, "ok", gpu=0, evidence=pair, figures=pair_figures(pair)),
        Result("ualoe-fabric", "ct14", Status.PASS, "ok", gpu=0, evidence=pair, figures=pair_figures(pair))])
    text = render("prom", run_report(results))
    busbw = {lab["bytes"]: v for lab, v in samples(text, "k3doctor_allreduce_busbw_bytes_per_second")}
    assert busbw == {str(1 << 20): 120.5e9, str(1 << 30): 351.25e9}
    fabric = samples(text, "k3doctor_fabric_bandwidth_bytes_per_second")
    assert {lab["direction"]: v for lab, v in fabric} == {"read": 2029e9, "write": 3192e9, "bidir": 3986e9}
    assert len(fabric) == 3 and {lab["pair"] for lab, _ in fabric} == {"ct13<->ct14"}


@pytest.mark.parametrize("statuses,state,code", [
    ([Status.PASS, Status.SKIP], "OK", 0),
    ([Status.PASS, Status.WARN], "WARNING", 1),
    ([Status.PASS, Status.ERROR], "UNKNOWN", 3),
    ([Status.SKIP], "UNKNOWN", 3),  # nothing verified
    ([Status.WARN, Status.ERROR, Status.FAIL], "CRITICAL", 2),
])
def test_nagios_status_line_perfdata_and_exit_code(statuses, state, code):
    results = [Result(f"c{i}", "ct13", s, f"said {s.value} | pipe\nnext") for i, s in enumerate(statuses)]
    report = run_report(results)
    text = render("nagios", report)
    first, *long_output = text.split("\n")
    m = re.fullmatch(r"K3DOCTOR (OK|WARNING|CRITICAL|UNKNOWN) - ([^|]+) \| (.+)", first)
    assert m and m.group(1) == state and OUTPUTS["nagios"].exit_code(report) == code
    perf = dict(re.fullmatch(r"([a-z]+)=([0-9.]+)(s?)(;[0-9.]*){0,4}", item).group(1, 2) for item in m.group(3).split())
    assert float(perf["duration"]) == 12.5 and int(perf["pass"]) == statuses.count(Status.PASS)
    assert int(perf["fail"]) == statuses.count(Status.FAIL) and int(perf["error"]) == statuses.count(Status.ERROR)
    assert all("|" not in line for line in long_output)
    assert len(long_output) == sum(s not in (Status.PASS, Status.SKIP) for s in statuses)


@pytest.mark.parametrize("statuses,code", [([Status.PASS, Status.WARN], 0), ([Status.FAIL, Status.ERROR], 1),
                                           ([Status.ERROR], 2)])
def test_npd_one_short_line_and_its_exit_code(statuses, code):
    long = "x" * 500
    results = [Result("ualink", HOSTILE, s, f"{long}\nsecond line", gpu=1, remediation="CODE") for s in statuses]
    report = run_report(results)
    text = render("npd", report)
    assert "\n" not in text and len(text) <= 200 and OUTPUTS["npd"].exit_code(report) == code
    if code:
        assert text.startswith(("DO NOT LAUNCH: ualink ct", "INCONCLUSIVE: ualink ct"))
    assert "\x00" not in text and "\x1b" not in text


def _go_duration_s(text):
    """Go's time.ParseDuration for the units NPD configs use."""
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text)
    assert parts and text, f"not a Go duration: {text!r}"
    h, m, s = (int(p or 0) for p in parts.groups())
    return h * 3600 + m * 60 + s


def test_npd_example_config_is_one_npd_accepts_and_its_command_runs(tmp_path):
    """The checks of NPD's CustomPluginConfig ApplyConfiguration + Validate, then the rule's own command."""
    cfg = json.loads((REPO / "docs" / "npd-k3doctor.json").read_text())
    assert set(cfg) <= {"plugin", "pluginConfig", "source", "conditions", "rules", "metricsReporting"}
    assert cfg["plugin"] == "custom" and cfg["source"]
    plugin = cfg["pluginConfig"]
    assert set(plugin) <= {"invoke_interval", "timeout", "max_output_length", "concurrency",
                           "enable_message_change_based_condition_update", "skip_initial_status"}
    global_timeout = _go_duration_s(plugin["timeout"])
    assert _go_duration_s(plugin["invoke_interval"]) > global_timeout
    conditions = {c["type"] for c in cfg["conditions"]}
    assert all(set(c) <= {"type", "reason", "message"} for c in cfg["conditions"])
    [rule] = cfg["rules"]
    assert set(rule) <= {"type", "condition", "reason", "path", "args", "timeout"}
    assert rule["type"] == "permanent" and rule["condition"] in conditions
    rule_timeout = _go_duration_s(rule["timeout"])
    assert rule_timeout <= global_timeout
    assert rule["path"].endswith("/k3doctor") and rule["args"][rule["args"].index("--format") + 1] == "npd"
    proc = subprocess.run([sys.executable, "-m", "k3doctor.cli", *rule["args"]], capture_output=True,
                          text=True, timeout=rule_timeout, cwd=tmp_path)
    assert proc.returncode in (0, 1, 2), proc.stderr  # NPD: 0 OK, 1 problem, other unknown - never a crash
    assert proc.stdout.count("\n") == 1 and 0 < len(proc.stdout.strip()) <= plugin["max_output_length"]


@pytest.fixture
def registry():
    reg = Registry()
    code = remediation("HOSTILE-FIX", "a fix", "Replace the card, then rerun.", registry=reg)
    for name, scope in (("node-check", "node"), ("gpu-check", "gpu")):
        check(name, title=name, scope=scope, remediation=code, registry=reg)(lambda r, c: None)
    return reg


def test_junit_parses_with_unique_cases_per_check_node_gpu_and_hostile_text(tmp_path, registry):
    hostile_node = "ct\x0113\udc80"
    results = [Result("node-check", "ct13", Status.FAIL, HOSTILE, remediation="HOSTILE-FIX"),
               Result("node-check", hostile_node, Status.PASS, "ok"),
               Result("gpu-check", "ct13", Status.PASS, "fine", gpu=0),
               Result("gpu-check", "ct13", Status.ERROR, "bad \x00 read", gpu=1),
               Result("gpu-check", "ct13", Status.PASS, "pair two", gpu=1),  # same place: same testcase
               Result("gpu-check", "ct14", Status.SKIP, "not asked", gpu=0)]
    report = run_report(results, nodes=["ct13", "ct14", hostile_node])
    path = tmp_path / "junit.xml"
    path.write_text(render_junit(report, registry.ordered(), registry.remediations), encoding="utf-8")
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = list(xml) if isinstance(xml, junitparser.JUnitXml) else [xml]
    cases = [case for suite in suites for case in suite]
    names = [(c.classname, c.name) for c in cases]
    assert len(names) == len(set(names)) == 5
    by = {(c.classname, c.name): c for c in cases}
    assert set(by) == {("k3doctor.node-check", "ct13"), ("k3doctor.node-check", "ct\\x0113\\x80"),
                       ("k3doctor.gpu-check", "ct13 gpu0"), ("k3doctor.gpu-check", "ct13 gpu1"),
                       ("k3doctor.gpu-check", "ct14 gpu0")}
    [failure] = by[("k3doctor.node-check", "ct13")].result
    assert isinstance(failure, junitparser.Failure) and failure.type == "FAIL"
    assert "HOSTILE-FIX: a fix" in failure.text and "Replace the card, then rerun." in failure.text
    assert "\\x00\\x1b[31m\\x07\\xff" in failure.text and failure.message.startswith('ct"13\\')
    [err] = by[("k3doctor.gpu-check", "ct13 gpu1")].result
    assert isinstance(err, junitparser.Error) and "bad \\x00 read" in err.message
    [skipped] = by[("k3doctor.gpu-check", "ct14 gpu0")].result
    assert isinstance(skipped, junitparser.Skipped)
    assert by[("k3doctor.gpu-check", "ct13 gpu0")].is_passed
    suite = suites[0]
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (5, 1, 1, 1)


def test_output_file_is_replaced_atomically_and_keeps_its_mode(tmp_path, monkeypatch):
    target = tmp_path / "k3doctor.prom"
    target.write_text("old\n")
    os.chmod(target, 0o644)
    write_output(str(target), "new", private=False)
    assert target.read_text() == "new\n" and (target.stat().st_mode & 0o777) == 0o644
    assert os.listdir(tmp_path) == ["k3doctor.prom"]

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(click.ClickException, match="No space left on device"):  # one line, not a traceback
        write_output(str(target), "newer", private=False)
    assert target.read_text() == "new\n" and os.listdir(tmp_path) == ["k3doctor.prom"]  # untouched, no temp file


def test_cli_format_choices_come_from_the_registry_and_prom_goes_to_the_file(tmp_path):
    help_text = subprocess.run([sys.executable, "-m", "k3doctor.cli", "check", "--help"], capture_output=True,
                               text=True, timeout=60).stdout
    assert "[" + "|".join(OUTPUTS) + "]" in help_text.replace("\n", "").replace(" ", "")
    target = tmp_path / "k3doctor.prom"
    proc = subprocess.run([sys.executable, "-m", "k3doctor.cli", "check", "--only", "shm-clean", "--format", "prom",
                           "-o", str(target)], capture_output=True, text=True, timeout=120)
    assert proc.stdout == "" and proc.returncode in (0, 1, 2), proc.stderr
    status = samples(target.read_text(), "k3doctor_check_status")
    assert [lab["check"] for lab, _ in status] == ["shm-clean"]
    assert os.listdir(tmp_path) == ["k3doctor.prom"] and (target.stat().st_mode & 0o777) == 0o644


def test_output_never_replaces_a_device_a_pipe_or_a_symlink(tmp_path):
    """-o through a device node (a /dev/null of our own), a FIFO and a symlink: written through / to the link's
    target; renaming a regular file over /dev/null as root would capture every other program's writes."""
    import stat
    import threading

    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    write_output(str(null), "report", private=True)
    assert stat.S_ISCHR(null.stat().st_mode)

    real, link = tmp_path / "real.txt", tmp_path / "link.txt"
    real.write_text("old\n")
    link.symlink_to(real.name)
    write_output(str(link), "report", private=True)
    assert link.is_symlink() and real.read_text() == "report\n"

    fifo, got = tmp_path / "fifo", []
    os.mkfifo(fifo)
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_output(str(fifo), "report", private=True)
    reader.join(10)
    assert got == ["report\n"] and stat.S_ISFIFO(fifo.stat().st_mode)
    assert sorted(os.listdir(tmp_path)) == ["fifo", "link.txt", "null", "real.txt"]


@pytest.mark.parametrize("path, said", [
    ("", "needs a file name"),
    ("/proc/version", "kernel interface file"),
    ("/sys/kernel/new-file", "kernel interface file"),
])
def test_output_paths_no_report_can_go_to_are_refused_before_the_run(path, said):
    proc = subprocess.run([sys.executable, "-m", "k3doctor.cli", "check", "--only", "shm-clean", "-o", path],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3 and said in proc.stderr and proc.stdout == "", proc.stderr
    assert proc.stderr.count("\n") == 1


def test_a_link_into_proc_is_refused_and_a_full_device_is_one_line(tmp_path):
    link = tmp_path / "report.txt"
    link.symlink_to("/proc/version")
    proc = subprocess.run([sys.executable, "-m", "k3doctor.cli", "check", "--only", "shm-clean", "-o", str(link)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3 and "kernel interface file" in proc.stderr, proc.stderr
    full = tmp_path / "full"
    os.mknod(full, 0o20666, os.makedev(1, 7))
    with pytest.raises(click.ClickException, match="No space left"):
        write_output(str(full), "report")
