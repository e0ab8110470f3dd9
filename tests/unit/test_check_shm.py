"""shm-clean: the judge on a find listing, and the --fix fixer against a recording transport."""
import shlex

from k3doctor.checks import shm

from k3doctor.inventory.types import Inventory, Node, Settings, SSHSettings
from k3doctor.judging import runner
from k3doctor.judging.runner import Context, RunOptions, judge_safely
from k3doctor.views.gpu import KFD_PROC_GLOB
from k3doctor.readings import CommandReading, Readings
from k3doctor.registry import REGISTRY
from k3doctor.results import Status, fail
from k3doctor.transport.local import LocalTransport

CHECK = REGISTRY.checks["shm-clean"]


def listing(*names):
    return "".join(f"4096\t{n}\0" for n in names)


def readings(*names, kfd=()):
    return Readings({"shm": CommandReading("find", 0, listing(*names), ""),
                     "kfd": {f"/sys/class/kfd/kfd/proc/{p}": None for p in kfd}})


def judge(r):
    return judge_safely(CHECK.judge, r, Context(CHECK, Settings(), node="ct17"))


class RecordingTransport:
    """Stands in for the node: records each command and answers like a successful rm."""

    node = "ct17"

    def __init__(self, rc=0):
        self.commands, self.rc = [], rc

    def run(self, command, *, timeout_s, stdin=None):
        self.commands.append(command)
        return CommandReading(command, self.rc, "", "" if self.rc == 0 else "rm: Permission denied")


def test_clean_shm_passes():
    assert judge(readings())[0].status == Status.PASS


def test_stale_segments_fail_listing_them_and_sizes():
    [v] = judge(readings("psm_shm.1c9e42b7", "nccl-shm-a8f3c2d1"))
    assert (v.status, v.remediation) == (Status.FAIL, None)  # runner adds the check's SHM-STALE
    assert v.evidence["names"] == ["nccl-shm-a8f3c2d1", "psm_shm.1c9e42b7"]
    assert v.evidence["sizes"] == {"nccl-shm-a8f3c2d1": 4096, "psm_shm.1c9e42b7": 4096}
    assert "--fix` removes exactly these" in v.message


def test_stale_entries_ignore_lookalikes_and_keep_odd_names_whole():
    text = "10\tnccl-a b\0" "1\tncclx\0" "2\tsem.x\0" "0\tpsm_\0" "5\tnccl-multi\nline\0"
    assert shm.stale_entries(text) == [("nccl-a b", 10), ("nccl-multi\nline", 5), ("psm_", 0)]


class RedirectedNode(LocalTransport):
    """This machine with /dev/shm and the KFD process list moved under ``root``: the real gather
    script, find and rm run; every command other than the gather script is recorded."""

    def __init__(self, root):
        super().__init__("ct17")
        self.root, self.commands = root, []

    def run_bytes(self, command, *, timeout_s, stdin=None):
        if stdin is None:
            self.commands.append(command)
        moved = {shm.SHM: f"{self.root}/shm", KFD_PROC_GLOB.rsplit("/", 1)[0]: f"{self.root}/kfd"}
        for old, new in moved.items():
            command = command.replace(old, new)
            stdin = stdin and stdin.replace(old.encode(), new.encode())
        return super().run_bytes(command, timeout_s=timeout_s, stdin=stdin)


def run_on_node(tmp_path, monkeypatch, fix):
    for d in ("shm", "kfd"):
        (tmp_path / d).mkdir()
    for name in ("nccl-shm-a8f3c2d1", "psm_shm.1c9e42b7", "sem.keep-me"):
        (tmp_path / "shm" / name).write_bytes(b"x" * 4096)
    node = RedirectedNode(tmp_path)
    monkeypatch.setattr(runner, "make_transport", lambda *_: node)
    inv = Inventory("inventory.yaml", [Node("ct17", "10.0.0.17", Settings())], SSHSettings(), Settings())
    report = runner.run_checks(inv, [CHECK], RunOptions(fix=fix))
    return report.results, node.commands, sorted(p.name for p in (tmp_path / "shm").iterdir())


def test_without_fix_nothing_is_run_on_the_node_but_the_reading(tmp_path, monkeypatch):
    [result], commands, left = run_on_node(tmp_path, monkeypatch, fix=False)
    assert result.status == Status.FAIL and "nccl-shm-a8f3c2d1, psm_shm.1c9e42b7" in result.message
    assert commands == []
    assert left == ["nccl-shm-a8f3c2d1", "psm_shm.1c9e42b7", "sem.keep-me"]


def test_with_fix_exactly_the_listed_paths_are_removed_and_the_node_judged_again(tmp_path, monkeypatch):
    results, [command], left = run_on_node(tmp_path, monkeypatch, fix=True)
    assert shlex.split(command) == ["rm", "-f", "--", "/dev/shm/nccl-shm-a8f3c2d1", "/dev/shm/psm_shm.1c9e42b7"]
    assert left == ["sem.keep-me"]
    assert [(r.status, r.message) for r in results] == [
        (Status.PASS, "--fix removed /dev/shm/nccl-shm-a8f3c2d1, /dev/shm/psm_shm.1c9e42b7"),
        (Status.PASS, "no psm_*/nccl-* entries in /dev/shm")]


def test_fix_removes_exactly_the_listed_names_by_quoted_full_path():
    [v] = judge(readings("nccl-shm-a8f3c2d1", "psm_shm.1c9e42b7", "nccl-it's"))
    transport = RecordingTransport()
    [done] = shm.remove_stale(transport, [v], None)
    [command] = transport.commands
    assert shlex.split(command) == ["rm", "-f", "--", "/dev/shm/nccl-it's", "/dev/shm/nccl-shm-a8f3c2d1",
                                    "/dev/shm/psm_shm.1c9e42b7"]
    assert "*" not in command and command.startswith("rm -f -- '/dev/shm/nccl-it'")
    assert done.status == Status.PASS and done.evidence["removed"] == [
        "/dev/shm/nccl-it's", "/dev/shm/nccl-shm-a8f3c2d1", "/dev/shm/psm_shm.1c9e42b7"]


def test_fix_refuses_names_outside_the_pattern_or_dev_shm():
    transport = RecordingTransport()
    for names in (["../etc/passwd"], ["nccl-../../etc/passwd"], ["keep-me"], ["psm_a/b"]):
        [v] = shm.remove_stale(transport, [fail("x", evidence={"names": names, "gpu_processes": []})], None)
        assert v.status == Status.ERROR and "refusing" in v.message
    assert transport.commands == []


def test_fix_skips_while_gpu_processes_run_and_reports_rm_failure():
    [v] = judge(readings("nccl-x", kfd=[4242]))
    assert "may be live" in v.message
    transport = RecordingTransport()
    [s] = shm.remove_stale(transport, [v], None)
    assert s.status == Status.SKIP and transport.commands == []
    [v] = judge(readings("nccl-x"))
    [e] = shm.remove_stale(RecordingTransport(rc=1), [v], None)
    assert e.status == Status.ERROR and "Permission denied" in e.message


def test_unreadable_listing_is_an_error():
    r = Readings({"shm": CommandReading("find", 1, "", "find: '/dev/shm': No such file or directory"), "kfd": {}})
    [v] = judge(r)
    assert v.status == Status.ERROR and "No such file" in v.message
