"""k3doctor/fleet/slurm.py and parsers/scontrol.py: what a verdict does to a Slurm node, on real scontrol output."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from k3doctor.fleet.slurm import REASON_MAX, Action, Scontrol, SlurmError, apply, decide, drain_reason, node_name, ours
from k3doctor.parsers import ParseError
from k3doctor.parsers.scontrol import SlurmNode, parse_show_node
from k3doctor.results import LaunchVerdict, Result, Status

SAMPLES = Path(__file__).with_name("samples")


def sample(name: str) -> str:
    return (SAMPLES / f"scontrol-show-node-{name}.txt").read_text()


def result(status, check="ualink-state", gpu=1, message="accel_state is 'unconfigured' (need active)",
           remediation="UALINK-NOT-ACTIVE"):
    return Result(check=check, node="k3node", gpu=gpu, status=status, message=message, remediation=remediation)


def node(reason=None, state="IDLE", flags=("DRAIN",)):
    return SlurmNode(name="k3node", state=state, flags=frozenset(flags if reason else ()), reason=reason)


FAILED = [result(Status.PASS, check="amdgpu-driver", gpu=None), result(Status.FAIL),
          result(Status.FAIL, gpu=3)]
OUR_REASON = "k3doctor: ualink-state gpu1: accel_state is 'unconfigured' (need active) [UALINK-NOT-ACTIVE] (+1 more)"


# ------------------------------------------------------------------------------------------ parser


def test_parses_an_idle_node():
    got = parse_show_node(sample("idle"), "k3node")
    assert (got.state, got.flags, got.reason, got.drain_flag) == ("IDLE", frozenset(), None, False)


def test_parses_a_k3doctor_drain_without_its_user_and_time():
    got = parse_show_node(sample("drained-k3doctor"), "k3node")
    assert got.state == "IDLE" and got.flags == {"DRAIN"} and got.reason_by == "root"
    assert got.reason == "k3doctor: ualink-state gpu1: accel_state is 'unconfigured' (need active) [UALINK-NOT-ACTIVE]"
    assert ours(got)


def test_parses_a_human_down():
    got = parse_show_node(sample("down-human"), "k3node")
    assert (got.state, got.flags, got.reason) == ("DOWN", frozenset(), "broken fan")
    assert not ours(got)


def test_not_responding_star_is_a_flag():
    text = sample("idle").replace("State=IDLE ", "State=IDLE+DRAIN* ")
    assert parse_show_node(text, "k3node").flags == {"DRAIN", "NOT_RESPONDING"}


@pytest.mark.parametrize("mutate", [
    lambda t: t[:-1].rstrip("\n"),  # cut short
    lambda t: "Node k3node not found\n",
    lambda t: t.replace("NodeName=k3node", "NodeName=k3other"),  # another node's record
    lambda t: t.replace("   State=IDLE ", "   Sate=IDLE "),  # no state
    lambda t: t.replace("State=IDLE ", "State=idle? "),  # not Slurm's form
    lambda t: t + t,  # two records glued
    lambda t: t.replace("\n\n", "\n   Reason=a [root@x]\n   Reason=b [root@y]\n\n"),
    lambda t: "",
])
def test_garbled_output_is_a_parse_error(mutate):
    with pytest.raises(ParseError):
        parse_show_node(mutate(sample("idle")), "k3node")


# ------------------------------------------------------------------------------------------ decisions


def test_fail_drains_a_node_in_service_with_the_first_failure():
    got = decide(LaunchVerdict.DO_NOT_LAUNCH, FAILED, node())
    assert got == decide(LaunchVerdict.DO_NOT_LAUNCH, FAILED, node()) and got.action == Action.DRAIN
    assert got.reason == OUR_REASON


def test_fail_never_overwrites_a_human_drain():
    got = decide(LaunchVerdict.DO_NOT_LAUNCH, FAILED, node("disk swap"))
    assert got.action == Action.NONE
    assert "'disk swap'" in got.note and "not k3doctor's" in got.note and "ualink-state gpu1" in got.note


def test_fail_never_overwrites_a_down_reason():
    got = decide(LaunchVerdict.DO_NOT_LAUNCH, FAILED, node("Not responding", state="DOWN", flags=()))
    assert got.action == Action.NONE and "already down" in got.note


def test_fail_drains_a_node_in_service_whatever_stale_reason_it_still_carries():
    got = decide(LaunchVerdict.DO_NOT_LAUNCH, FAILED, node("disk swap", state="IDLE", flags=()))
    assert got.action == Action.DRAIN and got.reason == OUR_REASON
    held = decide(LaunchVerdict.DO_NOT_LAUNCH, FAILED, node("bad DIMM", state="IDLE", flags=("FAIL",)))
    assert held.action == Action.NONE and "already failing" in held.note


def test_fail_on_our_drain_keeps_quiet_for_the_same_cause_and_updates_a_new_one():
    assert decide(LaunchVerdict.DO_NOT_LAUNCH, FAILED, node(OUR_REASON)) == (
        decide(LaunchVerdict.DO_NOT_LAUNCH, FAILED, node(OUR_REASON)))
    assert decide(LaunchVerdict.DO_NOT_LAUNCH, FAILED, node(OUR_REASON)).action == Action.NONE
    assert decide(LaunchVerdict.DO_NOT_LAUNCH, FAILED, node(OUR_REASON)).note is None
    other = decide(LaunchVerdict.DO_NOT_LAUNCH, FAILED, node("k3doctor: rack-free: foreign container"))
    assert other.action == Action.DRAIN and other.reason == OUR_REASON
    for before in ("k3doctor: ualink-state gpu1: accel_state is 'unconfigured' (loaded 60s ago) [UALINK-NOT-ACTIVE]",
                   OUR_REASON.replace(" (+1 more)", "")):  # figures changed, or fewer other failures: same cause
        assert decide(LaunchVerdict.DO_NOT_LAUNCH, FAILED, node(before)).action == Action.NONE
    for before in (OUR_REASON.replace("gpu1", "gpu2"), OUR_REASON.replace("UALINK-NOT-ACTIVE", "UALINK-LANES")):
        assert decide(LaunchVerdict.DO_NOT_LAUNCH, FAILED, node(before)).action == Action.DRAIN


def test_ready_resumes_only_k3doctors_drain():
    assert decide(LaunchVerdict.READY, [], node(OUR_REASON)).action == Action.UNDRAIN
    assert decide(LaunchVerdict.READY, [], node("disk swap")).action == Action.NONE
    assert decide(LaunchVerdict.READY, [], node("disk swap")).note is None
    assert decide(LaunchVerdict.READY, [], node()).action == Action.NONE
    # a k3doctor reason left on a node that is no longer drained (someone resumed it by hand): nothing to lift
    assert decide(LaunchVerdict.READY, [], node(OUR_REASON, state="DOWN", flags=())).action == Action.NONE


def test_inconclusive_changes_nothing_and_says_so():
    for current in (node(), node(OUR_REASON), node("disk swap")):
        got = decide(LaunchVerdict.INCONCLUSIVE, [result(Status.ERROR)], current)
        assert got.action == Action.NONE and "inconclusive" in got.note
    assert "k3doctor's drain stays" in decide(LaunchVerdict.INCONCLUSIVE, [], node(OUR_REASON)).note


def test_drain_reason_is_one_capped_line():
    long = [result(Status.FAIL, message="line one\nline two\t" + "x" * 500, gpu=None)]
    got = drain_reason(long)
    assert len(got) == REASON_MAX and "\n" not in got and "\t" not in got
    assert got.startswith("k3doctor: ualink-state: line one line two x") and got.endswith("... [UALINK-NOT-ACTIVE]")


def test_node_name_is_one_node():
    assert node_name("ct13") == "ct13"
    os.environ["SLURMD_NODENAME"] = "ct14"
    try:
        assert node_name() == "ct14"
    finally:
        del os.environ["SLURMD_NODENAME"]
    for bad in ("ct[13-14]", "ct13,ct14", "-x", "a b", ""):
        with pytest.raises(ValueError):
            node_name(bad or " ")


# ------------------------------------------------------------------------------------------ bounded calls


def script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "scontrol"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_a_hung_scontrol_ends_by_its_deadline_with_its_children(tmp_path):
    sleeper = tmp_path / "k3doctor-test-sleep"  # a sleep whose command line names this test
    shutil.copy("/bin/sleep", sleeper)
    marker = str(sleeper)
    fake = script(tmp_path, f"{sleeper} 300 &\n{sleeper} 301\n")
    started = time.monotonic()
    with pytest.raises(SlurmError, match=r"`.*scontrol show node` did not answer within the 1 s Slurm budget"):
        Scontrol(fake, budget_s=1).show_node("k3node")
    assert time.monotonic() - started < 10
    left = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline_has(p, marker)]
    assert left == []


def _cmdline_has(pid: str, text: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return text.encode() in fh.read()
    except OSError:
        return False


def test_a_missing_or_failing_scontrol_is_one_error():
    with pytest.raises(SlurmError, match="no-such-scontrol not found"):
        Scontrol("no-such-scontrol").show_node("k3node")


def test_a_failing_scontrol_says_what_it_said(tmp_path):
    fake = script(tmp_path, "echo 'slurm_load_node error: Unable to contact slurm controller' >&2\nexit 1\n")
    with pytest.raises(SlurmError, match=r"failed \(exit 1\): slurm_load_node error: Unable to contact"):
        Scontrol(fake).show_node("k3node")


def test_garbled_scontrol_output_is_an_error_not_a_state(tmp_path):
    with pytest.raises(SlurmError, match="cannot read the state of k3node"):
        Scontrol(script(tmp_path, "echo 'NodeName=k3node'\n")).show_node("k3node")


def recording_scontrol(tmp_path: Path, shown: str) -> tuple[str, Path]:
    """An scontrol that prints ``shown`` for `show node` and writes each argument of `update` on a line."""
    (tmp_path / "shown.txt").write_text(shown)
    log = tmp_path / "calls.txt"
    fake = script(tmp_path, f'if [ "$1" = show ]; then cat {tmp_path / "shown.txt"}; '
                            f'else printf "%s\\n" "$@" >> {log}; fi\n')
    return fake, log


def test_apply_drains_with_the_reason_as_one_argument_never_through_a_shell(tmp_path):
    fake, log = recording_scontrol(tmp_path, sample("idle"))
    hostile = [result(Status.FAIL, message="bad $(touch /tmp/k3doctor-pwned) `id`; rm -rf / 'x\"")]
    said, failed = apply("k3node", "ct14", hostile, Scontrol(fake))
    reason = "k3doctor: ualink-state gpu1: bad $(touch /tmp/k3doctor-pwned) `id`; rm -rf / 'x\" [UALINK-NOT-ACTIVE]"
    assert log.read_text().splitlines() == ["update", "nodename=k3node", "state=drain", f"reason={reason}"]
    assert said == [f"slurm: drained k3node: {reason}"] and failed == []
    assert not Path("/tmp/k3doctor-pwned").exists()


def test_apply_undrains_only_our_drain_and_reports_a_failed_call_as_one_error_row(tmp_path):
    fake, log = recording_scontrol(tmp_path, sample("drained-k3doctor"))
    assert apply("k3node", "ct14", [result(Status.PASS)], Scontrol(fake))[1] == []
    assert log.read_text().splitlines() == ["update", "nodename=k3node", "state=undrain"]
    (tmp_path / "human").mkdir()
    human, log = recording_scontrol(tmp_path / "human", sample("down-human"))
    assert apply("k3node", "ct14", [result(Status.PASS)], Scontrol(human)) == ([], [])
    assert not log.exists()
    said, [row] = apply("k3node", "ct14", [result(Status.PASS)], Scontrol("no-such-scontrol"))
    assert said == [] and (row.check, row.node, row.status, row.remediation) == (
        "slurm-drain", "ct14", Status.ERROR, "SLURM-CALL-FAILED")
    assert row.message.endswith("; Slurm node k3node left as it is")
