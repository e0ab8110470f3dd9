"""progress.py without a terminal: nothing is shown, nothing is imported, every call is harmless."""
import io
import sys

from k3doctor import progress


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_shown_only_on_a_terminal_and_never_when_quiet():
    assert progress.wanted(stream=FakeTerminal())
    assert not progress.wanted(quiet=True, stream=FakeTerminal())
    assert not progress.wanted(stream=io.StringIO())
    closed = io.StringIO()
    closed.close()
    assert not progress.wanted(stream=closed)


def test_without_a_display_notes_and_steps_go_nowhere(capsys):
    with progress.shown():  # pytest's stderr is not a terminal
        progress.note("ct13: 40 readings")
        with progress.task("pairs", total=2) as step:
            step("ct13<->ct14")
        counter = progress.Counter("probe")
        counter.step()
        counter.close()
    assert capsys.readouterr() == ("", "")


def test_no_color_follows_the_convention(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "")
    assert not progress.no_color()  # set but empty: colour stays (no-color.org)
    monkeypatch.setenv("NO_COLOR", "1")
    assert progress.no_color()


def test_rich_is_imported_only_when_something_is_shown():
    import subprocess

    code = ("import sys; from k3doctor import progress\nwith progress.shown():\n progress.note('x')\n"
            "print('rich' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_phase_marks_are_written_only_where_timing_was_asked_for(tmp_path):
    import os
    import subprocess

    code = ("import threading, time; from k3doctor import progress; t0 = time.monotonic()\n"
            "ts = [threading.Thread(target=progress.mark, args=('read',)) for _ in range(8)]\n"
            "progress.mark('connect'); [t.start() for t in ts]; [t.join() for t in ts]; print(t0)")
    marks = tmp_path / "phases.txt"
    env = {k: v for k, v in os.environ.items() if k != "K3DOCTOR_PHASES"}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    assert not marks.exists()
    out = subprocess.run([sys.executable, "-c", code], env=dict(env, K3DOCTOR_PHASES=str(marks)), check=True,
                         capture_output=True, text=True).stdout
    lines = [line.split() for line in marks.read_text().splitlines()]
    assert [name for name, _ in lines] == ["connect"] + ["read"] * 8
    assert all(float(at) >= float(out) for _, at in lines)  # the machine's monotonic clock, after the start
