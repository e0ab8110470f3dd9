"""The check-author API: a check written in one file (the manual's own example, docs/writing-a-check.md) is registered in a
temporary registry, judged through k3doctor.testing and by the runner alike, with no other edit."""
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from k3doctor import api, testing
from k3doctor.inventory.load import localhost_inventory
from k3doctor.inventory.overrides import OverrideError, apply_overrides
from k3doctor.judging import runner
from k3doctor.readings import Command, CommandReading, Exists, File, FileReading, Glob
from k3doctor.registry import REGISTRY, Registry, RegistryError, check
from k3doctor.results import Status, fail, passed, warn

PAGE = Path(__file__).resolve().parents[2] / "docs" / "writing-a-check.md"


def readme_blocks() -> list:
    """The python blocks of the manual's "Writing a check" page: the check file, then its test."""
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)


def load_check_file(path: Path):
    spec = importlib.util.spec_from_file_location(f"throwaway_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def ifoe(tmp_path):
    """The manual's check, from its own file, in a registry of its own."""
    source, _ = readme_blocks()[:2]
    path = tmp_path / "ifoe.py"
    path.write_text(source, encoding="utf-8")
    with testing.temporary_registry() as reg:
        load_check_file(path)
    return reg


HEALTHY = {"ifoe": "live\n", "kfd": True, "states": {f"/sys/class/drm/card{n}/device/ualink/accel_state": "active\n"
                                                     for n in range(4)}}


def test_a_check_in_one_file_registers_in_the_temporary_registry_only(ifoe):
    assert set(ifoe.checks) == {"ifoe-loaded"} and "ifoe-loaded" not in REGISTRY.checks
    assert set(ifoe.remediations) == {"IFOE-MISSING", "IFOE-NO-CARDS"}
    assert "IFOE-MISSING" not in REGISTRY.remediations


def test_the_check_is_judged_on_plain_readings(ifoe):
    [ok] = testing.judge("ifoe-loaded", HEALTHY, registry=ifoe)
    assert (ok.status, ok.message) == (Status.PASS, "ifoe live")
    [missing] = testing.judge("ifoe-loaded", {**HEALTHY, "ifoe": None}, registry=ifoe)
    assert (missing.status, missing.remediation) == (Status.FAIL, "IFOE-MISSING")  # the default, attached
    [few] = testing.judge("ifoe-loaded", HEALTHY, registry=ifoe, min_cards=5)
    assert (few.status, few.remediation, few.message) == (Status.WARN, "IFOE-NO-CARDS", "4 card(s) expose ualink/")


def test_the_readmes_own_test_passes_against_the_readmes_check(tmp_path):
    source, test_source = readme_blocks()[:2]
    (tmp_path / "ifoe.py").write_text(source, encoding="utf-8")
    with testing.temporary_registry():
        load_check_file(tmp_path / "ifoe.py")
        namespace = {}
        exec(compile(test_source, "docs/writing-a-check.md", "exec"), namespace)
        tests = [fn for name, fn in namespace.items() if name.startswith("test_")]
        assert tests
        for fn in tests:
            fn()


def test_the_runner_reports_what_testing_judges(ifoe):
    """Same check, same readings: the runner (replaying them as saved readings) and k3doctor.testing agree."""
    inv = localhost_inventory()
    node = inv.nodes[0].name
    chk = ifoe.checks["ifoe-loaded"]
    plain = {**HEALTHY, "ifoe": None}
    specs = chk.readings_for(inv.nodes[0].settings)
    saved = {node: {spec: testing.as_reading(spec, plain[name]) for name, spec in specs.items()}}
    report = runner.run_checks(inv, [chk], runner.RunOptions(replay=(saved, {})))
    judged = testing.judge(chk, plain, node=node)
    assert [(r.status, r.message, r.remediation) for r in report.results] == \
        [(v.status, v.message, v.remediation) for v in judged] == [(Status.FAIL, "ifoe not loaded", "IFOE-MISSING")]


def test_plain_values_become_the_readings_the_gatherer_delivers():
    assert testing.as_reading(Exists("/dev/kfd"), True) is True
    missing = testing.as_reading(File("/x"), None)
    assert isinstance(missing, FileReading) and not missing.exists
    assert testing.as_reading(File("/x"), " 1\n").text() == "1"
    glob = testing.as_reading(Glob("/a/*"), {"/a/b": "2\n"})
    assert list(glob) == ["/a/b"] and glob["/a/b"].text() == "2"
    done = testing.as_reading(Command(("amd-smi", "list")), "GPU: 0\n")
    assert (done.rc, done.output(), done.command) == (0, "GPU: 0\n", "amd-smi list")
    failed = testing.as_reading(Command(("dmesg",)), (1, "", "dmesg: read kernel buffer failed"))
    with pytest.raises(api.ReadingUnavailable, match="exited 1"):
        failed.output()
    given = CommandReading("x", 0, "", "")
    assert testing.as_reading(Command(("x",)), given) is given


def test_a_reading_not_given_is_an_error_not_a_pass(ifoe):
    [v] = testing.judge("ifoe-loaded", {"kfd": True}, registry=ifoe)
    assert v.status == Status.ERROR and "ifoe: not given to the judge" in v.message


def test_an_undeclared_parameter_is_refused(ifoe):
    with pytest.raises(ValueError, match="no parameter min_gpus"):
        testing.judge("ifoe-loaded", HEALTHY, registry=ifoe, min_gpus=5)


def test_cluster_checks_are_judged_on_readings_per_node():
    reg = Registry()

    @check("same-boot", title="t", scope="cluster", reads={"boot": File("/proc/sys/kernel/random/boot_id")},
           remediation=api.remediation("SAME-BOOT", "t", "t", registry=reg), registry=reg)
    def same_boot(per_node, ctx):
        texts = {n: r["boot"].text() for n, r in per_node.items()}
        return [fail(f"{n} differs", node=n) for n in sorted(texts) if texts[n] != texts[min(texts)]] or \
            passed(f"{len(ctx.nodes)} nodes")

    [v] = testing.judge("same-boot", {"a": {"boot": "1"}, "b": {"boot": "2"}}, registry=reg)
    assert (v.status, v.node, v.remediation) == (Status.FAIL, "b", "SAME-BOOT")
    assert testing.judge("same-boot", {"a": {"boot": "1"}, "b": {"boot": "1"}}, registry=reg)[0].message == "2 nodes"


def test_default_remediation_is_the_checks_first_for_fail_and_warn_only():
    reg = Registry()
    check("c", title="t", remediation=("FIRST", "SECOND"), registry=reg)(lambda r, ctx: None)
    chk = reg.checks["c"]
    out = chk.with_default_remediation([fail("a"), warn("b", remediation="SECOND"), passed("c"),
                                        api.error("d")])
    assert [v.remediation for v in out] == ["FIRST", "SECOND", None, None]


def test_record_has_one_meaning_per_kind_of_check():
    reg = Registry()
    with pytest.raises(RegistryError, match="record_run"):
        check("p", title="t", interaction="active", record=lambda r, ctx: {}, registry=reg)(lambda ctx: None)
    with pytest.raises(RegistryError, match="record="):
        check("j", title="t", record_run=lambda v, ctx: {}, registry=reg)(lambda r, ctx: None)
    check("ok", title="t", interaction="active", record_run=lambda v, ctx: {}, registry=reg)(lambda ctx: None)
    assert reg.checks["ok"].keeps_baseline


def test_context_lives_in_the_api_and_the_runner_uses_it():
    assert runner.Context is api.Context and runner.judge_safely is api.judge_safely
    assert api.judge_safely(lambda: (_ for _ in ()).throw(api.ParseError("garbled")))[0].message == \
        "unparseable output: garbled"


def test_overrides_are_checked_against_the_declaration(ifoe):
    inv = localhost_inventory()
    apply_overrides(inv, ("ifoe-loaded.min_cards=8",), ifoe)
    assert inv.nodes[0].settings.checks["ifoe-loaded"] == {"min_cards": 8}
    with pytest.raises(OverrideError, match="min_cards takes a number"):
        apply_overrides(inv, ("ifoe-loaded.min_cards=many",), ifoe)
    with pytest.raises(OverrideError, match="expected CHECK.PARAM=VALUE"):
        apply_overrides(inv, ("ifoe-loaded.nope=1",), ifoe)


def test_a_transport_failure_in_a_probe_is_its_message_not_an_internal_error():
    from k3doctor.transport.base import TransportError

    def probe():
        raise TransportError("ct13: connection refused")

    assert api.judge_safely(probe)[0].message == "ct13: connection refused"


def test_the_author_api_loads_no_ssh_stack():
    """A check module imports k3doctor.api when `k3doctor list` or `explain` loads it: no paramiko for that."""
    code = "import sys, k3doctor.api, k3doctor.testing; print('paramiko' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


def test_baseline_record_keeps_a_judges_record_and_a_probes_record_run_by_node():
    """`k3doctor baseline record` through the runner on this machine: record= gives this node's entry from
    its readings, record_run= the probe's entries by node from its verdicts."""
    reg = Registry()
    check("uptime-seen", title="t", reads={"uptime": File("/proc/uptime")}, registry=reg,
          record=lambda r, ctx: {"up": r["uptime"].text() != "", "node": ctx.node})(
        lambda r, ctx: passed("read"))
    check("pair-probe", title="t", scope="node-pair", tier="deep", interaction="active", registry=reg,
          record_run=lambda verdicts, ctx: {n: {"verdicts": len(verdicts)} for n in ctx.nodes})(
        lambda ctx: [passed("pair ok"), passed("pair ok")])
    inv = localhost_inventory()
    node = inv.nodes[0].name
    report = runner.run_checks(inv, reg.ordered(), runner.RunOptions(record=True))
    assert [r.status for r in report.results] == [Status.PASS] * 3
    assert report.records == {node: {"uptime-seen": {"up": True, "node": node}, "pair-probe": {"verdicts": 2}}}
