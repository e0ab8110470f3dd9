"""Every reading of one container in one `docker exec`, run for real through the local transport (a real sh).

`docker` here is a stand-in that runs the command on this machine (the container's shell is this machine's
sh) and counts its execs; the rig's e2e tests run the same script through a real engine."""
import pytest

from k3doctor.gather import gather, gather_shell
from k3doctor.readings import Command, in_container
from k3doctor.transport import LocalTransport

FAKE_DOCKER = """#!/bin/sh
# docker exec CONTAINER CMD...: CMD runs here; only the containers named in $K3_CONTAINERS exist
[ "$1" = exec ] || { echo "fake docker: only exec" >&2; exit 2; }
echo "$2" >> "$K3_EXECS"
case " $K3_CONTAINERS " in *" $2 "*) ;; *) echo "Error response from daemon: No such container: $2" >&2; exit 1 ;; esac
if [ -n "$K3_CUT" ]; then  # the exec dies mid-frame: a header promising more than ever comes
  nonce=$(printf '%s' "$6" | grep -o '@@[0-9a-f]*' | head -n 1)
  printf '%s 9 0 100000 100000 0 0\npartial' "$nonce"; exit 137
fi
shift 2
TMPDIR=$K3_CONTAINER_TMP exec "$@"
"""


@pytest.fixture
def engine(tmp_path, monkeypatch):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "docker").write_text(FAKE_DOCKER)
    (bin_ / "docker").chmod(0o755)
    (tmp_path / "ctmp").mkdir()
    monkeypatch.setenv("PATH", f"{bin_}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("K3_EXECS", str(tmp_path / "execs"))
    monkeypatch.setenv("K3_CONTAINERS", "k3ep16 other")
    monkeypatch.setenv("K3_CONTAINER_TMP", str(tmp_path / "ctmp"))

    def execs():
        path = tmp_path / "execs"
        return path.read_text().split() if path.exists() else []

    return execs


def run(specs, **kw):
    return gather(LocalTransport("here"), specs, command_timeout_s=kw.get("command_timeout_s", 10), deadline_s=30)


def test_a_containers_readings_share_one_exec_and_keep_their_own_outcomes(engine, tmp_path):
    (tmp_path / "bin.dat").write_bytes(b"\x00@@feedfeed 9 0 1 1 0 0\nnot a frame\xff")  # 36 bytes
    stat = in_container("k3ep16", "stat", "-c", "%s %n", "--", str(tmp_path / "bin.dat"), str(tmp_path / "nope"))
    cat = in_container("k3ep16", "cat", str(tmp_path / "bin.dat"))
    env = in_container("k3ep16", "sh", "-c", "echo out; echo err >&2; exit 3")
    between = Command(("echo", "on the node"))
    got = run([stat, between, cat, env])
    assert engine() == ["k3ep16"]
    assert got[stat].rc == 1 and got[stat].stdout == f"36 {tmp_path / 'bin.dat'}\n"
    assert "No such file or directory" in got[stat].stderr
    assert got[cat].output() == (tmp_path / "bin.dat").read_bytes().decode("utf-8", "replace")
    assert (got[env].rc, got[env].stdout, got[env].stderr) == (3, "out\n", "err\n")
    assert got[env].command == "docker exec k3ep16 sh -c 'echo out; echo err >&2; exit 3'"
    assert got[between].output() == "on the node\n"
    assert list((tmp_path / "ctmp").iterdir()) == []  # its temporary directory is gone


def test_each_container_gets_its_own_exec(engine):
    ours, theirs = in_container("k3ep16", "echo", "a"), in_container("other", "echo", "b")
    got = run([ours, theirs, in_container("k3ep16", "echo", "c")])
    assert sorted(engine()) == ["k3ep16", "other"]
    assert got[ours].output() == "a\n" and got[theirs].output() == "b\n"


def test_a_missing_container_reads_as_dockers_own_answer_for_every_reading(engine):
    specs = [in_container("gone", "stat", "/x"), in_container("gone", "true")]
    got = run(specs)
    for spec in specs:
        assert got[spec].rc == 1 and not got[spec].timed_out
        assert got[spec].stderr.strip() == "Error response from daemon: No such container: gone"


def test_a_hung_reading_times_out_alone_and_the_next_one_is_still_read(engine, tmp_path):
    hung = in_container("k3ep16", "sleep", "30")
    after = in_container("k3ep16", "echo", "after")
    got = run([hung, after], command_timeout_s=1)
    assert got[hung].timed_out and got[hung].rc == 124
    assert got[after].output() == "after\n"
    assert list((tmp_path / "ctmp").iterdir()) == []


def test_an_exec_killed_mid_frame_loses_its_readings_and_never_swallows_the_next(engine, monkeypatch):
    monkeypatch.setenv("K3_CUT", "1")
    inside, after = in_container("k3ep16", "cat", "/etc/hostname"), Command(("echo", "after"))
    got = run([inside, after])
    assert got[inside].timed_out and got[inside].rc == 137 and got[inside].stdout == ""
    assert got[after].output() == "after\n"


def test_output_past_the_cap_is_cut_in_the_container_and_never_judged(engine):
    spec = in_container("k3ep16", "sh", "-c", "yes 0123456789 | head -c 100000")
    got = gather_shell(LocalTransport("here"), [spec], command_timeout_s=10, deadline_s=30,
                                     cap_bytes=4096)
    assert got[spec].truncated and 0 < len(got[spec].stdout) < 4096  # its share of the exec's one cap
    assert set(got[spec].stdout) <= set("0123456789\n")


def test_not_a_docker_exec_is_refused():
    with pytest.raises(ValueError):
        in_container("-it", "sh")
