"""``k3doctor watch``: the on-call doctor that keeps looking at a serving cluster (k3doctor/watch/)."""
from __future__ import annotations

import re
import sys

import click

from k3doctor.cli.options import Seconds, accept_unknown_hosts_option, nodes_option, read_inventory
from k3doctor.deadline import MAX_SECONDS


class Duration(click.ParamType):
    """``90``, ``90s``, ``10m``, ``2h``, ``7d``: how long the watch runs."""

    name = "duration"

    def convert(self, value, param, ctx):
        from k3doctor.watch.actions import parse_duration

        seconds = parse_duration(value)
        if seconds is None:
            self.fail(f"{value!r} is not a duration (e.g. 90s, 10m, 2h, 7d)", param, ctx)
        return seconds


def metrics_ports(items) -> dict:
    """``--metrics-port 8000`` (every node) and ``--metrics-port NODE=PORT`` as {node or "*": port}."""
    ports = {}
    for item in items:
        node, sep, port = item.rpartition("=")
        if not port.isdigit() or not 1 <= int(port) <= 65535 or (sep and not node):
            raise click.UsageError(f"--metrics-port {item!r}: expected PORT or NODE=PORT (1..65535)")
        ports[node if sep else "*"] = int(port)
    return ports


def server_logs(items) -> dict:
    """``--server-log /path`` (every node) and ``--server-log NODE=/path`` as {node or "*": path}."""
    logs = {}
    for item in items:
        node, sep, path = item.partition("=") if not item.startswith("/") else ("", "", item)
        if not path.startswith("/") or (sep and not node) or "\0" in path:
            raise click.UsageError(f"--server-log {item!r}: expected /absolute/path or NODE=/absolute/path")
        logs[node or "*"] = path
    return logs


@click.command("watch")
@nodes_option(": watch these nodes (default: this machine).")
@click.option("--interval", type=Seconds(minimum=0.5), default=10, show_default=True, metavar="S",
              help="Read every node this often.")
@click.option("--for", "for_s", type=Duration(), default=None, metavar="DURATION",
              help="Stop after this long (90s, 10m, 2h); default: until Ctrl-C or SIGTERM.")
@click.option("--stall", "stall_s", type=Seconds(minimum=1), default=60, show_default=True, metavar="S",
              help="Work pending and no progress counter moving this long is a stalled engine/rank (§31.2).")
@click.option("--read-timeout", type=Seconds(minimum=1), default=5, show_default=True, metavar="S",
              help="Deadline of each reading on a node (a reading past it is UNKNOWN).")
@click.option("--cper-every", "cper_every_s", type=Seconds(minimum=1), default=60, show_default=True, metavar="S",
              help="Read the fatal CPER records (amd-smi ras --cper, ~0.75 s a call on the node) this often.")
@click.option("--metrics-port", "ports", multiple=True, metavar="PORT|NODE=PORT",
              help="The engine's port on the nodes; its /metrics is fetched on the node itself (repeatable).")
@click.option("--server-log", "logs", multiple=True, metavar="PATH|NODE=PATH",
              help="The engine's server log on the nodes: its new lines are judged by triage's rules (repeatable).")
@click.option("--metrics-path", default="/metrics", show_default=True, help="The metrics page's path.")
@click.option("--engine-process", default=None, metavar="REGEX",
              help="Command lines of the engine's processes (gone/defunct/D-state are findings) "
                   "[default: ATOM::, atom.entrypoints, vllm.entrypoints, vllm serve].")
@click.option("--format", "fmt", type=click.Choice(["live", "jsonl", "prom"]), default="live", show_default=True,
              help="live: a line per event; jsonl: one JSON event per line; prom: the exposition at the end.")
@click.option("--prom-file", default=None, metavar="PATH",
              help="Rewrite this node_exporter textfile (atomically) after every interval.")
@click.option("--once", is_flag=True, help="One round against --state, for node-problem-detector's custom plugin: "
              "exit 0 ok, 1 problem, 2 unknown, one message line.")
@click.option("--state", "state_path", default=None, metavar="FILE", help="The state kept between --once runs.")
@click.option("--webhook", default=None, metavar="URL",
              help="POST each finding's start and clear here, as Alertmanager's webhook JSON (retried, never "
                   "blocking the watch; credentials in the URL are never printed).")
@click.option("--drain", is_flag=True,
              help="Drain a node in Slurm (scontrol, as the node's inventory name) on a new hardware FAIL from its "
                   "kernel log or RAS counters; never for a stall or a lost engine.")
@click.option("--silence", "silences", multiple=True, metavar="CODE[@NODE][:UNTIL]",
              help="Do not emit this finding's events (on NODE; until UNTIL: 2h or an ISO date-time, UTC unless it "
                   "has an offset); still judged and counted (repeatable).")
@accept_unknown_hosts_option()
def watch_cmd(inventory, ansible_inventory, interval, for_s, stall_s, read_timeout, cper_every_s, ports, logs,
              metrics_path, engine_process, fmt, prom_file, once, state_path, webhook, drain, silences,
              accept_unknown_hosts):
    """Keep watching a serving cluster: stalled ranks, KV pressure, new kernel-log faults, RAS errors (§31.2)."""
    from k3doctor.watch import loop
    from k3doctor.watch.actions import Actions, Drainer, Silences, parse_silence
    from k3doctor.watch.node_conditions import Settings
    from k3doctor.watch.render import Sink
    from k3doctor.watch.sources import sources_for

    if once != bool(state_path):
        raise click.UsageError("--once and --state FILE go together")
    if once and for_s is not None:
        raise click.UsageError("--once runs one round: --for does not apply")
    if once and logs:
        raise click.UsageError("--once keeps no position in a server log between runs: --server-log does not apply")
    if once and (webhook or drain or silences):
        raise click.UsageError("--once reports to node-problem-detector: --webhook, --drain and --silence do not apply")
    try:
        silenced = Silences([parse_silence(text) for text in silences])
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    hook = None
    if webhook:
        from k3doctor.watch.webhook import WebhookURLError, split_url

        try:
            split_url(webhook)
        except WebhookURLError as exc:
            raise click.UsageError(str(exc)) from None
    if engine_process:
        try:
            re.compile(engine_process)
        except re.error as exc:
            raise click.UsageError(f"--engine-process {engine_process!r}: not a regex ({exc})") from None
    if not metrics_path.startswith("/"):
        raise click.UsageError(f"--metrics-path {metrics_path!r}: must start with /")
    for path, what in ((prom_file, "--prom-file"), (state_path, "--state")):
        if path and not loop.state_dir_ok(path):
            raise click.UsageError(f"{what} {path}: its directory does not exist")
    inv = read_inventory(inventory, logins=True, ansible_inventory=ansible_inventory)
    names = [n.name for n in inv.nodes]
    ports_by_node = metrics_ports(ports)
    logs_by_node = server_logs(logs)
    for option, given in (("--metrics-port", ports_by_node), ("--server-log", logs_by_node)):
        unknown = sorted(set(given) - {"*", *names})
        if unknown:
            raise click.UsageError(f"{option}: no node {', '.join(unknown)} in the inventory")
    strangers = sorted({s.node for s in silenced.silences if s.node} - set(names))
    if strangers:
        raise click.UsageError(f"--silence: no node {', '.join(strangers)} in the inventory")
    states, tracker = {}, None
    if once:
        try:
            states, tracker = loop.load_state(state_path, names)
        except loop.StateFileError as exc:
            raise click.UsageError(str(exc)) from None
    sources = sources_for(inv, metrics_ports=ports_by_node, metrics_path=metrics_path,
                          read_timeout_s=min(read_timeout, MAX_SECONDS), accept_unknown_hosts=accept_unknown_hosts,
                          cper_every_s=cper_every_s, server_logs=logs_by_node)
    watch = loop.Watch(sources, Settings(stall_s=stall_s, engine_process=engine_process), states, tracker)
    sink = Sink(fmt, sys.stdout, prom_file)
    if once:
        sys.exit(loop.once(watch, sink, state_path))
    if webhook:
        from k3doctor.watch.webhook import Webhook

        hook = Webhook(webhook)
    actions = Actions(silenced, hook, Drainer() if drain else None)
    sys.exit(loop.run(watch, sink, interval_s=interval, for_s=for_s, actions=actions))


COMMANDS = (watch_cmd,)
