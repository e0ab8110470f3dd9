"""`k3doctor recipe diff --nodes`: the running model server, read on each node over the inventory's own
connection (servers.py: the reading and its parse, shared with `check`'s launch-config), wherever it runs -
Docker, Slurm with pyxis/enroot, or bare - since it is read from the process itself (reference §30).
"""
from __future__ import annotations

from k3doctor.readings import Command
from k3doctor.recipes.servers import NO_SERVER, parse, resolved, server_script  # noqa: F401 (resolved: tests)


def read(inv, recipe, timeout_s: float) -> list:
    """[(node name, pid or None, Resolved or the reason nothing was compared)] for every node."""
    from k3doctor.gather.node_script import gather
    from k3doctor.judging.runner import RunOptions, make_transport

    spec = Command(("sh", "-c", server_script(recipe)))
    out = []
    for node in inv.nodes:
        transport = make_transport(node, inv, RunOptions())
        try:
            transport.connect()
            reading = gather(transport, [spec], command_timeout_s=timeout_s, deadline_s=timeout_s + 5)[spec]
            servers, mem_total = parse(reading.output("the server reader"))
        except Exception as exc:  # this node only: said on its line, never the others
            out.append((node.name, None, f"not read: {exc}"))
            continue
        finally:
            transport.close()
        if not servers:
            out.append((node.name, None, NO_SERVER))
        for pid, argv, env, cache in servers:
            out.append((node.name, pid, resolved(recipe, argv, env, cache, mem_total)))
    return out
