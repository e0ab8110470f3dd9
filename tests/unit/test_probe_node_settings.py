"""A node's own `tools:` / gpus_per_node in the inventory reach both probes (Context.node_settings)."""
from k3doctor.inventory.load import parse_inventory
from k3doctor.judging.runner import Context
from k3doctor.registry import REGISTRY, load_checks

load_checks()
from k3doctor.checks.allreduce import build_plan  # noqa: E402
from k3doctor.checks.ualoe import build_config  # noqa: E402

INVENTORY = """
cluster:
  name: t
  gpus_per_node: 4
  tools: {ubench_dir: /opt/ubench/build, python: /usr/bin/python3}
nodes:
  - {name: n1, host: 10.0.0.1}
  - {name: n2, host: 10.0.0.2, gpus_per_node: 2,
     tools: {ubench_dir: /scratch/ubench-n2/build, python: /opt/py/bin/python3}}
"""


def ctx_for(check: str, **params) -> Context:
    inv = parse_inventory(INVENTORY, registry=REGISTRY)
    chk = REGISTRY.checks[check]
    for settings in [inv.cluster] + [n.settings for n in inv.nodes]:  # as --set does
        settings.checks.setdefault(chk.name, {}).update(params)
    return Context(chk, inv.cluster, nodes={n.name: n for n in inv.nodes})


def test_node_settings_are_that_nodes_own_with_this_checks_params():
    ctx = ctx_for("allreduce-probe", where="host")
    assert ctx.node_settings("n1").tools["ubench_dir"] == "/opt/ubench/build"
    assert ctx.node_settings("n2").tools["ubench_dir"] == "/scratch/ubench-n2/build"
    assert (ctx.node_settings("n1").gpus_per_node, ctx.node_settings("n2").gpus_per_node) == (4, 2)
    assert ctx.node_settings("n2").param("where") == "host"


def test_ualoe_runs_each_nodes_own_ubench_build():
    cfg = build_config(ctx_for("ualoe-fabric"))
    assert cfg.ubench_dir == {"n1": "/opt/ubench/build", "n2": "/scratch/ubench-n2/build"}
    assert cfg.codes["p2p"] == "UALOE-P2P" and cfg.codes["stale"] == "UALOE-STALE"


def test_allreduce_starts_each_nodes_own_python_with_its_gpu_count():
    plan = build_plan(ctx_for("allreduce-probe", where="host"), ["n1", "n2"])
    assert [(m.node, m.ranks, m.launcher) for m in plan.members] == [
        ("n1", 4, ("/usr/bin/python3",)), ("n2", 2, ("/opt/py/bin/python3",))]
