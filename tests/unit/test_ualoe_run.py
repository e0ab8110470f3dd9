"""The ualoe-fabric orchestration over fake transports: what a missing tool or an unreadable node turns into."""
from types import SimpleNamespace

import pytest

from k3doctor.probes import ualoe
from k3doctor.readings import CommandReading
from k3doctor.registry import REGISTRY, load_checks
from k3doctor.results import Status
from k3doctor.transport.base import TransportError

load_checks()
UBENCH = "/opt/ubench/build"
P2P_OK = "RESULT OK: 1/1 pairs PASS\n"
BW_OK = "GPU pair  read (GB/s)  write (GB/s)  bidir (GB/s)\n0 <-> 0  5780.0  6222.0  10961.0\n"
NOT_FOUND = 127, "sh: 1: exec: {path}: not found"
NOT_EXECUTABLE = 126, "sh: 1: exec: {path}: Permission denied"


class FakeNode:
    """A node's transport: runs the ubench tools from a script, lists its LISTEN sockets, has an empty dmesg.

    ``broken`` maps a tool to (rc, stderr) for a tool the shell cannot start; ``procs`` is the
    process listing (None: the listing raises TransportError). ``takes_s`` maps (tool, "serve" |
    "client") to how long that run takes: past the command's ``timeout_s`` it is killed by the
    node-side timeout (rc None, timed_out, no output). ``ran`` records (tool, role, timeout_s).
    """

    def __init__(self, broken=None, procs="self 1 mnt:[1]\n", takes_s=None):
        self.broken, self.procs, self.serving = broken or {}, procs, None
        self.takes_s, self.ran = takes_s or {}, []

    def run(self, command, *, timeout_s, stdin=None):
        for tool, out in (("ualoe_p2p.exe", P2P_OK), ("ualoe_bw.exe", BW_OK)):
            if "exec " in command and tool in command:
                role = "serve" if " export " in command or " listen " in command else "client"
                self.ran.append((tool, role, timeout_s))
                if role == "serve":
                    self.serving = None if tool in self.broken else tool
                if self.takes_s.get((tool, role), 0) > timeout_s:
                    return CommandReading(command, None, "", "", timed_out=True)
                if tool in self.broken:
                    rc, said = self.broken[tool]
                    return CommandReading(command, rc, "", said.format(path=f"{UBENCH}/{tool}"))
                return CommandReading(command, 0, out, "")
        if command.startswith("pid=$(cat"):  # LISTEN_SCRIPT: our serving PID owns inode 42 on its tool's port
            if self.serving is None:
                return CommandReading(command, 0, "", "")
            port = {"ualoe_p2p.exe": 55559, "ualoe_bw.exe": 55560}[self.serving]
            row = f"   0: 0B00007F:{port:04X} 00000000:0000 0A 0:0 0:0 0 0 0 42 1\n"
            return CommandReading(command, 0, "alive 7\nl-wx 3 -> socket:[42]\n" + row, "")
        if command == ualoe.PROCS_SCRIPT:
            if self.procs is None:
                raise TransportError("ssh: connect to host ct14 port 22: Connection refused")
            return CommandReading(command, 0, self.procs, "")
        return CommandReading(command, 0, "", "")


def context(nodes: dict, **params):
    chk = REGISTRY.checks["ualoe-fabric"]
    values = {**chk.params, "listen_timeout_s": 2.0, **params}
    return SimpleNamespace(nodes={n: SimpleNamespace(address=f"10.0.0.{i}") for i, n in enumerate(nodes)},
                           transports=nodes, blocked={}, fix=False, baseline=None, param=values.__getitem__,
                           settings=SimpleNamespace(tools={"ubench_dir": UBENCH}, gpus_per_node=4),
                           node_settings=lambda node: SimpleNamespace(tools={"ubench_dir": UBENCH}, gpus_per_node=4))


P2P_TIMEOUT_S, BW_TIMEOUT_S = 5.0, 7.0
PROBE = REGISTRY.checks["ualoe-fabric"].probe
CODES = {"p2p": "UALOE-P2P", "stale": "UALOE-STALE"}


def pair(exporter: FakeNode, importer: FakeNode):
    ctx = context({"a": exporter, "b": importer})
    cfg = ualoe.Config(plan="quick", ubench_dir={"a": UBENCH, "b": UBENCH}, gpu=0, p2p_port=55559, bw_port=55560,
                       listen_timeout_s=2.0,
                       p2p_timeout_s=P2P_TIMEOUT_S, bw_timeout_s=BW_TIMEOUT_S, gpus_per_node=4,
                       codes=CODES)
    return ualoe.PairRun(ctx, cfg, ualoe.Launches(ctx.transports), dict, "a", "b").run()


def test_fake_pair_passes_when_every_tool_runs():
    o = pair(FakeNode(), FakeNode())
    assert o.status == Status.PASS and o.bw.bidir == 10961.0


def test_each_ubench_run_is_bounded_by_its_own_timeout():
    """§8: the client runs get p2p_timeout_s / bw_timeout_s; a server outlives its client by the listen wait."""
    exporter, importer = FakeNode(), FakeNode()
    pair(exporter, importer)
    assert importer.ran == [("ualoe_p2p.exe", "client", P2P_TIMEOUT_S), ("ualoe_bw.exe", "client", BW_TIMEOUT_S)]
    assert exporter.ran == [("ualoe_p2p.exe", "serve", 2.0 + P2P_TIMEOUT_S + 10),
                            ("ualoe_bw.exe", "serve", 2.0 + BW_TIMEOUT_S + 10)]


def test_a_p2p_run_past_its_timeout_is_a_named_fabric_fail():
    o = pair(FakeNode(), FakeNode(takes_s={("ualoe_p2p.exe", "client"): P2P_TIMEOUT_S + 1}))
    assert (o.status, o.remediation) == (Status.FAIL, "UALOE-P2P")
    assert o.message.startswith("p2p correctness failed (timed out with no RESULT line)")


def test_a_bandwidth_run_past_its_timeout_is_named_with_that_timeout():
    o = pair(FakeNode(), FakeNode(takes_s={("ualoe_bw.exe", "client"): BW_TIMEOUT_S + 1}))
    assert (o.status, o.remediation) == (Status.FAIL, "UALOE-P2P")
    assert o.message == f"p2p passed but the bandwidth run printed no table (timed out after {BW_TIMEOUT_S:g}s)"


@pytest.mark.parametrize("tool", ["ualoe_p2p.exe", "ualoe_bw.exe"])
@pytest.mark.parametrize("side", ["exporter", "importer"])
@pytest.mark.parametrize("broken, words", [(NOT_FOUND, "was not found (rc 127"),
                                           (NOT_EXECUTABLE, "is not executable (rc 126")])
def test_a_tool_the_shell_cannot_start_is_an_error_not_a_fabric_fail(tool, side, broken, words):
    nodes = {"exporter": FakeNode(), "importer": FakeNode()}
    nodes[side] = FakeNode(broken={tool: broken})
    o = pair(nodes["exporter"], nodes["importer"])
    node = "a" if side == "exporter" else "b"
    assert (o.status, o.remediation) == (Status.ERROR, None), o.message
    assert o.message.startswith(f"ubench not runnable on {node}: {UBENCH}/{tool} {words}")
    assert "set tools.ubench_dir" in o.message


def test_an_unreadable_process_table_skips_only_that_nodes_pairs():
    nodes = {"ct13": FakeNode(), "ct14": FakeNode(procs=""), "ct16": FakeNode(), "ct17": FakeNode(procs=None)}
    verdicts = PROBE(context(nodes, pairs="ct13,ct14;ct16,ct13;ct17,ct16"))
    errors = [v for v in verdicts if v.status == Status.ERROR]
    assert [v.node for v in errors] == ["ct14", "ct17"]
    assert "no 'self' line" in errors[0].message and "Connection refused" in errors[1].message
    assert all("its pairs were not run" in v.message for v in errors)
    skipped = [(v.node, v.message) for v in verdicts if v.status == Status.SKIP]
    assert skipped == [("ct13", "ct13<->ct14: not run, its process table could not be read on ct14"),
                       ("ct16", "ct17<->ct16: not run, its process table could not be read on ct17")]
    passed = [(v.node, v.evidence["pair"]) for v in verdicts if v.status == Status.PASS]
    assert passed == [("ct16", "ct16<->ct13"), ("ct13", "ct16<->ct13")]


def test_a_timed_out_process_listing_is_not_read_as_no_leftovers():
    class Slow(FakeNode):
        def run(self, command, *, timeout_s, stdin=None):
            got = super().run(command, timeout_s=timeout_s)
            return CommandReading(command, None, got.stdout, "", timed_out=True) if command == ualoe.PROCS_SCRIPT \
                else got

    verdicts, dirty = ualoe.check_stale(context({"ct13": FakeNode(), "ct14": Slow()}), ["ct13", "ct14"],
                                       "UALOE-STALE")
    assert [(v.status, v.node) for v in verdicts] == [(Status.ERROR, "ct14")]
    assert "timed out" in verdicts[0].message and list(dirty) == ["ct14"]
