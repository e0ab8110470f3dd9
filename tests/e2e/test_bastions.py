"""SSH as OpenSSH users expect (issue 11 §5), through real bastion sshds that are the only route to a node.

Two bastions (k3rig.bastion: own network namespaces, own host keys, own known_hosts) stand in front
of ct13's "behind" sshd; the login keys live only in a real ssh-agent (the chain authorizes no other key),
and everything k3doctor needs comes from an ssh config (Include, Match host, ProxyJump a,b,
UserKnownHostsFile, GlobalKnownHostsFile, HostKeyAlias) found as ~/.ssh/config. The chain starts and
stops with this module and leaves nothing on the shared rig.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from k3rig.bastion import BastionChain, ssh_answers

pytestmark = pytest.mark.e2e
ALIAS = "ct13-behind.example"  # the node's key is known under this name only (HostKeyAlias)


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    """A real ssh-agent holding a key no file of the test names; (socket, public key)."""
    where = tmp_path_factory.mktemp("agent")
    key = where / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "agent-only", "-f", key], check=True)
    sock = where / "agent.sock"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.05)
        subprocess.run(["ssh-add", "-q", str(key)], env={**os.environ, "SSH_AUTH_SOCK": str(sock)}, check=True,
                       capture_output=True, timeout=30)
        public = key.with_suffix(".pub").read_text()
        key.unlink()  # from now on only the agent has it
        key.with_suffix(".pub").unlink()
        yield str(sock), public
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def chain(rig, agent, tmp_path_factory):
    with BastionChain(tmp_path_factory.mktemp("chain"), rig.nodes[0], authorized_keys=agent[1]) as started:
        yield started


@pytest.fixture
def home(chain, tmp_path):
    """A HOME whose ~/.ssh/config reaches ct13 only through both bastions, split over an Include."""
    b1, b2, behind = *chain.bastions, chain.behind
    ssh = tmp_path / ".ssh"
    (ssh / "conf.d").mkdir(parents=True)
    (ssh / "conf.d" / "bastions.conf").write_text(
        f"Host jump1\n  HostName {b1.host}\n  UserKnownHostsFile {b1.known_hosts}\n"
        f"Host jump2\n  HostName {b2.host}\n  UserKnownHostsFile none\n  GlobalKnownHostsFile {b2.known_hosts}\n")
    (ssh / "known_hosts.behind").write_text(behind.known_hosts_line(ALIAS))
    (ssh / "config").write_text(
        "Include conf.d/*.conf\n"
        f"Host ct13-behind\n  HostName {behind.host}\n  Port {behind.port}\n"
        f"Match host {behind.host}\n  ProxyJump root@jump1,jump2:22\n  HostKeyAlias {ALIAS}\n"
        "  UserKnownHostsFile ~/.ssh/known_hosts.behind\n"
        "Host *\n  User root\n")
    return tmp_path


def k3(home, agent, *args, timeout=180):
    env = {**os.environ, "HOME": str(home), "SSH_AUTH_SOCK": agent[0]}
    proc = subprocess.run([sys.executable, "-m", "k3doctor.cli", *map(str, args), "--format", "json"],
                          capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.stdout, f"no JSON (rc {proc.returncode}): {proc.stderr}"
    return proc.returncode, json.loads(proc.stdout)


def inventory(home, host="ct13-behind"):
    path = home / "inventory.yaml"
    path.write_text(f"nodes:\n  - {{name: ct13, host: {host}}}\n")
    return path


def test_the_chain_is_the_only_route_to_the_node(chain):
    assert ssh_answers(chain.bastions[0].host, chain.bastions[0].port)
    assert not ssh_answers(chain.bastions[1].host, chain.bastions[1].port)
    assert not ssh_answers(chain.behind.host, chain.behind.port)


def test_a_node_behind_two_bastions_is_checked_with_agent_keys_and_verified_hops(rig, chain, home, agent):
    rig.apply("healthy")
    rc, doc = k3(home, agent, "check", "--nodes", inventory(home), "--only", "amdgpu-driver")
    assert rc == 0, doc
    assert [(r["node"], r["status"]) for r in doc["results"]] == [("ct13", "PASS")]
    assert doc["nodes"][0]["reachable"] is True
    rc, doc = k3(home, agent, "check", "--nodes", "ct13-behind", "--only", "amdgpu-driver")  # a bare node set
    assert rc == 0 and [(r["node"], r["status"]) for r in doc["results"]] == [("ct13-behind", "PASS")], doc


@pytest.mark.parametrize("hop", [0, 1, 2])
def test_a_changed_host_key_at_any_hop_is_refused_even_with_accept_unknown(chain, home, agent, hop, tmp_path):
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other], check=True)
    fake = " ".join(other.with_suffix(".pub").read_text().split()[:2])
    files = [chain.bastions[0].known_hosts, chain.bastions[1].known_hosts, home / ".ssh/known_hosts.behind"]
    original = files[hop].read_text()
    files[hop].write_text(original.split()[0] + " " + fake + "\n")
    try:
        rc, doc = k3(home, agent, "check", "--nodes", inventory(home), "--only", "amdgpu-driver",
                     "--accept-unknown-hosts")
    finally:
        files[hop].write_text(original)
    (result,) = doc["results"]
    assert rc == 2 and result["status"] == "ERROR" and "does NOT match known_hosts" in result["message"]
    assert (f"jump host {hop + 1} of 2" in result["message"]) == (hop < 2), result["message"]


def test_an_unknown_key_behind_the_chain_is_refused_without_the_opt_in(chain, home, agent):
    (home / ".ssh/known_hosts.behind").write_text("")
    rc, doc = k3(home, agent, "check", "--nodes", inventory(home), "--only", "amdgpu-driver")
    (result,) = doc["results"]
    assert rc == 2 and "is unknown" in result["message"] and ALIAS in result["message"]


def test_a_hung_bastion_costs_the_node_its_connect_timeout(chain, home, agent):
    pid = int((chain.bastions[1].dir / "sshd.pid").read_text())
    os.kill(pid, signal.SIGSTOP)  # accepts in the kernel's backlog, never says a word
    try:
        started = time.monotonic()
        rc, doc = k3(home, agent, "check", "--nodes", inventory(home), "--only", "amdgpu-driver",
                     "--connect-timeout", "3")
        took = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
    (result,) = doc["results"]
    assert rc == 2 and result["status"] == "ERROR" and "jump host 2 of 2" in result["message"], result
    assert "no SSH handshake" in result["message"]
    assert took < 60  # 3 s per hop at most, the rest is CLI start-up on a loaded box
