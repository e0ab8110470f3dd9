"""ssh_config as OpenSSH reads it (issue 11 §5): what paramiko's SSHConfig lacks - Include, ProxyJump
chains, known_hosts files, HostKeyAlias - resolved into logins. The logins themselves run against real
bastion sshds in tests/e2e/test_bastions.py."""
import os
import re
import subprocess
import sys

import paramiko
import pytest

from k3doctor.transport import ssh_config as sshconfig
from k3doctor.transport.base import TransportError
from k3doctor.transport.hostkeys import trust_known_hosts
from k3doctor.transport.targets import resolve_ssh_target


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def target(config, host="t", **kw):
    return resolve_ssh_target("n", host, ssh_config_path=str(config), **kw)


def test_include_globs_relative_to_the_config_directory_in_order(tmp_path):
    write(tmp_path / "conf.d/20-b.conf", "Host t\n  User second\n  Port 2200\n")
    write(tmp_path / "conf.d/10-a.conf", "Host t\n  User first\n")
    config = write(tmp_path / "config", "Include conf.d/*.conf missing/*.conf\nHost *\n  User fallback\n")
    got = target(config)
    assert (got.user, got.port) == ("first", 2200)  # first value wins, files in glob order; no match is no error


def test_an_include_inside_a_host_block_applies_only_there(tmp_path):
    write(tmp_path / "inner.conf", "Port 2201\nHost x\n  User only-x-under-t\n")
    config = write(tmp_path / "config", "Host t x\n  Include inner.conf\n  HostName after-include.example\n"
                                        "Host *\n  User root\n")
    t = target(config)
    assert (t.port, t.host, t.user) == (2201, "after-include.example", "root")  # the outer block resumes after it
    x = target(config, "x")
    assert (x.port, x.user) == (2201, "only-x-under-t")
    other = target(config, "y")
    assert (other.port, other.host, other.user) == (22, "y", "root")


def test_match_host_sees_the_hostname_and_originalhost_the_name_given(tmp_path):
    config = write(tmp_path / "config", "Host alias\n  HostName 10.0.0.7\nMatch host 10.0.0.*\n  Port 2222\n"
                                        "Match originalhost alias\n  User via-alias\n")
    got = target(config, "alias")
    assert (got.host, got.port, got.user) == ("10.0.0.7", 2222, "via-alias")
    assert target(config, "10.0.0.8").user == "root"


@pytest.mark.parametrize("text,needle", [
    ("Include config\n", "Include loop"),
    ("Include a.conf\n", "Include loop"),
    ("Host t\n  Include 'unclosed\n", "cannot parse"),
])
def test_include_loops_and_bad_lines_are_one_clear_error(tmp_path, text, needle):
    write(tmp_path / "a.conf", "Include b.conf\n")
    write(tmp_path / "b.conf", "Include a.conf\n")
    config = write(tmp_path / "config", text)
    with pytest.raises(sshconfig.SSHConfigError, match=needle) as info:
        sshconfig.load(str(config))
    assert len(str(info.value).splitlines()) == 1
    with pytest.raises(TransportError, match=needle):
        target(config)


def test_include_nesting_is_bounded_like_openssh(tmp_path):
    for i in range(sshconfig.MAX_INCLUDE_DEPTH + 2):
        write(tmp_path / f"{i}.conf", f"Include {i + 1}.conf\n")
    with pytest.raises(sshconfig.SSHConfigError, match="nested deeper than 16"):
        sshconfig.load(str(write(tmp_path / "config", "Include 0.conf\n")))


@pytest.mark.parametrize("value,hops", [
    ("a", ((None, "a", None),)),
    ("ops@a:2200,b", (("ops", "a", 2200), (None, "b", None))),
    ("ssh://ops@a:2200", (("ops", "a", 2200),)),
    ("[fd00::1]:2222", ((None, "fd00::1", 2222),)),
])
def test_proxyjump_lists_in_every_form_openssh_takes(value, hops):
    assert sshconfig.parse_jump_list(value) == hops


@pytest.mark.parametrize("value", ["a b", "a:99999", "a,,b", "@a"])
def test_a_proxyjump_hop_that_cannot_be_read_is_an_error(value):
    with pytest.raises(sshconfig.SSHConfigError, match="cannot read hop"):
        sshconfig.parse_jump_list(value)


def test_a_chain_is_hop_by_hop_and_only_the_first_hop_follows_its_own_proxyjump(tmp_path):
    config = write(tmp_path / "config", "Host t\n  HostName 10.0.0.9\n  ProxyJump a,ops@b:2200\n"
                                        "Host a\n  HostName 10.0.0.1\n  ProxyJump edge\n"
                                        "Host b\n  HostName 10.0.0.2\n  ProxyJump never-used\n  IdentityFile ~/b.key\n"
                                        "Host edge\n  User jumper\n")
    got = target(config, identity_file="/k/node.key")
    assert [(h.host, h.port, h.user) for h in got.jumps] == [("edge", 22, "jumper"), ("10.0.0.1", 22, "root"),
                                                             ("10.0.0.2", 2200, "ops")]
    assert got.first_hop == ("edge", 22) and (got.host, got.identity_file) == ("10.0.0.9", "/k/node.key")
    assert got.jumps[2].identity_file.endswith("/b.key") and got.jumps[2].password is None
    assert target(write(tmp_path / "none", "Host t\n  ProxyJump none\n")).jumps == ()


def test_a_proxyjump_loop_and_proxycommand_are_refused(tmp_path):
    loop = write(tmp_path / "loop", "Host a\n  ProxyJump b\nHost b\n  ProxyJump a\n")
    with pytest.raises(TransportError, match="ProxyJump loop"):
        target(loop, "a")
    command = write(tmp_path / "command", "Host t\n  ProxyCommand nc %h %p\n")
    with pytest.raises(TransportError, match="ProxyCommand is not supported"):
        target(command)


def test_known_hosts_files_come_from_the_config_with_tokens_unless_the_inventory_names_one(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    config = write(tmp_path / "config", "Host t\n  HostName 10.0.0.9\n  UserKnownHostsFile ~/kh/%h %d/all\n"
                                        "  GlobalKnownHostsFile none\n")
    assert target(config).known_hosts_files == (f"{tmp_path}/kh/10.0.0.9", f"{tmp_path}/all")
    assert target(config, known_hosts="~/pinned").known_hosts_files == (f"{tmp_path}/pinned",)
    assert target(tmp_path / "no-such-config").known_hosts_files == (
        f"{tmp_path}/.ssh/known_hosts", f"{tmp_path}/.ssh/known_hosts2", "/etc/ssh/ssh_known_hosts",
        "/etc/ssh/ssh_known_hosts2")


def test_a_host_key_alias_is_the_only_name_the_key_is_trusted_under(tmp_path):
    key = paramiko.ECDSAKey.generate()
    known = write(tmp_path / "known", f"behind.example {key.get_name()} {key.get_base64()}\n")
    config = write(tmp_path / "config", f"Host t\n  HostName 10.0.0.9\n  Port 2222\n  HostKeyAlias behind.example\n"
                                        f"  UserKnownHostsFile {known}\n"
                                        f"Host u\n  HostName behind.example\n  UserKnownHostsFile {known}\n")
    trusted = paramiko.HostKeys()
    trust_known_hosts(trusted, target(config))
    assert trusted.lookup("[10.0.0.9]:2222")[key.get_name()] == key
    unaliased = paramiko.HostKeys()
    trust_known_hosts(unaliased, resolve_ssh_target("n", "10.0.0.9", port=2222, ssh_config_path=str(config)))
    assert unaliased.lookup("[10.0.0.9]:2222") is None
    assert list(unaliased.keys()) == []


def test_agent_keys_unless_identities_only_or_identity_agent_none(tmp_path):
    config = write(tmp_path / "config", "Host only\n  IdentityFile ~/k\n  IdentitiesOnly yes\n"
                                        "Host noagent\n  IdentityAgent none\n")
    assert target(config, "t").use_agent and target(config, "t", identity_file="/k").use_agent
    assert not target(config, "only").use_agent and not target(config, "noagent").use_agent


def test_an_include_loop_stops_the_cli_before_anything_runs(tmp_path):
    write(tmp_path / "a.conf", "Include a.conf\n")
    config = write(tmp_path / "config", "Include a.conf\n")
    inv = write(tmp_path / "inv.yaml", f"ssh: {{ssh_config: {config}}}\nnodes:\n  - {{name: n, host: h}}\n")
    proc = subprocess.run([sys.executable, "-m", "k3doctor.cli", "check", "--nodes", str(inv)], capture_output=True,
                          text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (3, "")
    assert proc.stderr.strip().splitlines() == [f"k3doctor: ssh config Include loop: {tmp_path}/config -> "
                                                f"{tmp_path}/a.conf -> {tmp_path}/a.conf"]


def test_a_fifo_as_ssh_config_or_include_is_named_and_does_not_hang(tmp_path):
    """Opening a FIFO for reading blocks until a writer comes: validation would never end."""
    os.mkfifo(tmp_path / "fifo")
    config = write(tmp_path / "config", "Include fifo\n")
    inv = write(tmp_path / "inv.yaml", f"ssh: {{ssh_config: {tmp_path / 'fifo'}}}\nnodes:\n  - {{name: n, host: h}}\n")
    proc = subprocess.run([sys.executable, "-m", "k3doctor.cli", "check", "--nodes", str(inv)], capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (3, "")
    assert proc.stderr.strip() == f"k3doctor: cannot read ssh config {tmp_path}/fifo: it is a FIFO (named pipe), " \
                                  "not a regular file"
    with pytest.raises(sshconfig.SSHConfigError, match="it is a FIFO"):
        sshconfig.flatten(str(config))


@pytest.mark.parametrize("make, said", [(os.mkdir, "is a directory"), (os.mkfifo, "is a FIFO (named pipe)")])
def test_an_identity_file_that_is_not_a_file_says_what_it_is(tmp_path, make, said):
    from k3doctor.transport.ssh import SSHTransport

    make(tmp_path / "key")
    t = resolve_ssh_target("n1", "127.0.0.1", known_hosts="/dev/null", identity_file=str(tmp_path / "key"),
                           ssh_config_path=None)
    with pytest.raises(TransportError, match=re.escape(f"identity file {tmp_path}/key for root@127.0.0.1:22 {said}")):
        SSHTransport._login(t, None)
