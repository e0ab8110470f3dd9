"""A container's readings out of its one exec's output (k3doctor/gather/node_script.py): the exec's script runs for real
here (this machine's sh stands in for the container's); the rig's e2e tests run it through a real engine
(tests/e2e/test_in_container.py)."""
import shutil
import subprocess

import pytest

import k3doctor.gather.node_script as gather_module
from k3doctor.deadline import Deadline
from k3doctor.readings import in_container

SHELL_TOOLS = ("sh", "mktemp", "rm", "wc", "head", "cat", "timeout", "true", "sleep", "echo", "tr")


class ExecHere:
    """gather_exec running the exec's command on this machine; with ``cut_after`` N, the exec dies after N
    frames (a header promising more than ever comes, exit 137). ``path``: the "container's" PATH (with
    python3: the readings' one process; without: its shell)."""

    def __init__(self, tmp_path, path):
        self.tmp, self.path, self.containers, self.cut_after = tmp_path, path, [], None

    def __call__(self, engine, container, cmd, bound, cap_bytes, deadline, stdin=b""):
        self.containers.append(container)
        done = subprocess.run(cmd, capture_output=True, timeout=bound, input=stdin,
                              env={"PATH": self.path, "TMPDIR": str(self.tmp)})
        if self.cut_after is None:
            return done.returncode, done.stdout, done.stderr.decode(), False
        frames = done.stdout.split(b"@@")
        return 137, b"@@".join(frames[:self.cut_after + 1]) + b"@@" + frames[self.cut_after + 1][:20], "", False


@pytest.fixture(params=["python3", "shell only"])
def exec_here(request, tmp_path, tmp_path_factory, monkeypatch):
    path = "/usr/bin:/bin"
    if request.param == "shell only":  # an image without python3: the shell takes the readings
        bin_dir = tmp_path_factory.mktemp("bin")
        for tool in SHELL_TOOLS:
            (bin_dir / tool).symlink_to(shutil.which(tool, path=path))
        path = str(bin_dir)
    fake = ExecHere(tmp_path, path)
    monkeypatch.setattr(gather_module, "gather_exec", fake)
    return fake


def readings(specs):
    return gather_module._in_container_readings(None, specs, command_timeout_s=10, cap_bytes=1 << 20,
                                                deadline=Deadline(30))


def test_each_reading_gets_its_own_frame_and_each_container_its_own_exec(exec_here, tmp_path):
    (tmp_path / "bin.dat").write_bytes(b"\x00@@feedfeed 9 0 1 1 0 0\nnot a frame\xff")
    cat = in_container("k3ep16", "cat", str(tmp_path / "bin.dat"))
    theirs = in_container("other", "echo", "b")
    failing = in_container("k3ep16", "sh", "-c", "echo out; echo err >&2; exit 3")
    got = readings([cat, theirs, failing])
    assert exec_here.containers == ["k3ep16", "other"]
    assert got[cat].output() == (tmp_path / "bin.dat").read_bytes().decode("utf-8", "replace")
    assert got[theirs].output() == "b\n"
    assert (got[failing].rc, got[failing].stdout, got[failing].stderr) == (3, "out\n", "err\n")
    assert list(tmp_path.iterdir()) == [tmp_path / "bin.dat"]  # the exec's scratch directory is gone


def test_an_exec_killed_mid_frame_loses_only_the_readings_it_had_not_framed(exec_here):
    exec_here.cut_after = 1
    first, second = in_container("k3ep16", "echo", "first"), in_container("k3ep16", "echo", "second")
    got = readings([first, second])
    assert got[first].output() == "first\n"
    assert got[second].timed_out and got[second].rc == 137 and got[second].stdout == ""  # the exec's own end


def test_not_a_docker_exec_is_refused():
    with pytest.raises(ValueError):
        in_container("-it", "sh")


def test_a_reading_taken_along_gets_a_share_of_its_own_and_leaves_the_others_theirs(exec_here, tmp_path):
    """A launch script read in the exec made anyway must not cut what the container's own readings print."""
    (tmp_path / "launch.sh").write_text("exec server\n")
    own = in_container("k3ep16", "sh", "-c", "head -c 1500 /dev/zero | tr '\\0' x")
    along = in_container("k3ep16", "cat", "--", str(tmp_path / "launch.sh"))
    got = gather_module._in_container_readings(None, [own], command_timeout_s=10, cap_bytes=4096,
                                               deadline=Deadline(30), extra=[along])
    assert len(got[own].stdout) == 1500 and not got[own].truncated  # its share: (4096 - 128) / 2
    assert got[along].output() == "exec server\n"
    assert exec_here.containers == ["k3ep16"]  # one exec
    assert gather_module._in_container_readings(None, [], command_timeout_s=10, cap_bytes=4096,
                                                deadline=Deadline(30), extra=[along]) == {}  # no exec for it alone
