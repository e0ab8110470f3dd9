"""What `k3doctor check` imports before its first connection: only what it needs (issue 12)."""
import socket
import subprocess
import sys
import textwrap


def imported_after(code: str) -> set:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys; print(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_the_cli_and_its_checks_leave_paramiko_invoke_and_tabulate_until_they_are_used():
    loaded = imported_after("import k3doctor.cli, k3doctor.judging.runner\nfrom k3doctor.registry import load_checks\n"
                            "load_checks()")
    assert "paramiko.transport" not in loaded and "paramiko.client" not in loaded
    assert "invoke.context" not in loaded and "asyncio" not in loaded
    assert "tabulate" not in loaded and "docker" not in loaded


def test_paramiko_still_gets_the_real_invoke_when_it_asks():
    loaded = imported_after("import k3doctor.transport.ssh, paramiko.config as c\nassert callable(c.invoke.run)")
    assert "invoke.context" in loaded


def test_a_nodes_tcp_probe_comes_before_paramiko_and_its_handshake_after():
    """The first connection needs no paramiko; the handshake on it then gets the real paramiko."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        code = textwrap.dedent(f"""
            import sys
            from k3doctor.transport.ssh import SSHTransport, probe_tcp
            from k3doctor.transport.base import TransportError
            from k3doctor.transport.targets import resolve_ssh_target
            sock = probe_tcp("127.0.0.1", {port}, 3)
            before = "paramiko.transport" in sys.modules
            t = SSHTransport(resolve_ssh_target("n1", "127.0.0.1", port={port}, known_hosts="/dev/null",
                                                connect_timeout_s=1))
            sock.close()
            try:
                t.connect()
            except TransportError as exc:
                print("said:", exc)
            print("before:", before, "after:", "paramiko.transport" in sys.modules)
        """)
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        for _ in range(2):  # the probe above, then the transport's own
            conn, _ = server.accept()
            conn.close()
        out, err = proc.communicate(timeout=60)
    assert "before: False after: True" in out, (out, err)
    assert "said:" in out  # a listener that closes at once is no sshd: one TransportError, no traceback


def test_many_threads_first_using_a_deferred_module_at_once_all_get_the_real_one():
    code = textwrap.dedent("""
        import sys, threading
        from k3doctor.transport import lazy_imports
        import paramiko
        got, barrier = [], threading.Barrier(16)
        def first_use():
            barrier.wait()
            got.append(paramiko.SSHClient)
        threads = [threading.Thread(target=first_use) for _ in range(16)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        print(len(got), len({id(c) for c in got}), type(sys.modules["paramiko"]).__name__)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["16", "1", "module"], (out.stdout, out.stderr)


def test_the_cli_ends_as_sys_exit_would_exit_handlers_output_and_status():
    """main() ends the process without the interpreter's teardown: the exit handlers still run, every line
    printed arrives, and the exit status is the command's."""
    code = ("import atexit, sys\natexit.register(lambda: print('handler ran', flush=True))\n"
            "from k3doctor.cli import main\nmain(sys.argv[1:])")
    listed = subprocess.run([sys.executable, "-c", code, "list"], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and "gpu-inventory" in listed.stdout, listed
    assert listed.stdout.rstrip().endswith("handler ran")
    bad = subprocess.run([sys.executable, "-c", code, "check", "--format", "bogus"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 3 and "--format" in bad.stderr and "handler ran" in bad.stdout, bad


def test_stop_signals_end_the_run_once_and_an_ignored_one_stays_ignored():
    """SIGTERM/SIGHUP become Terminated (the run then stops the nodes' reads as on Ctrl-C); a SIGHUP that
    `nohup` ignored stays ignored; after the first stop signal the others are ignored, so a second SIGHUP of
    a dropped session cannot cut the clean-up short."""
    import signal

    from k3doctor import cli

    saved = {s: signal.getsignal(s) for s in cli.STOP_SIGNALS}
    try:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        cli.take_stop_signals()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is cli._on_stop_signal
        try:
            signal.raise_signal(signal.SIGTERM)
        except cli.Terminated as stop:
            assert stop.signum == signal.SIGTERM
        else:
            raise AssertionError("SIGTERM did not end the run")
        assert all(signal.getsignal(s) is signal.SIG_IGN for s in cli.STOP_SIGNALS)
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
