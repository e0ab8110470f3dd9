"""``k3doctor watch``: the on-call doctor that keeps looking at a serving cluster (k3doctor/watch/)."""
from __future__ import annotations

import os
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
@click.option("--bundle-dir", default=None, metavar="DIR",
              help="On a stall, capture the evidence first - py-spy stacks of the node's ranks, the server log's "
                   "last lines, the metrics history - into a triage bundle here, and say the triage verdict.")
@click.option("--listen", default=None, metavar="ADDR",
              help="Serve the Prometheus exposition at http(s)://ADDR/metrics (HOST:PORT, :PORT), refreshed every "
                   "interval.")
@click.option("--web-config", default=None, metavar="FILE",
              help="TLS and basic auth of --listen, in node_exporter's web-config format (tls_server_config "
                   "cert_file/key_file, basic_auth_users with bcrypt hashes).")
@accept_unknown_hosts_option()
def watch_cmd(inventory, ansible_inventory, interval, for_s, stall_s, read_timeout, cper_every_s, ports, logs,
              metrics_path, engine_process, fmt, prom_file, once, state_path, webhook, drain, silences, bundle_dir,
              listen, web_config, accept_unknown_hosts):
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
    if once and (webhook or drain or silences or bundle_dir):
        raise click.UsageError("--once reports to node-problem-detector: --webhook, --drain, --silence and "
                               "--bundle-dir do not apply")
    if web_config and not listen:
        raise click.UsageError("--web-config configures --listen: give --listen too")
    if once and listen:
        raise click.UsageError("--once runs one round: --listen does not apply (use --prom-file)")
    if bundle_dir and not os.path.isdir(bundle_dir):
        raise click.UsageError(f"--bundle-dir {bundle_dir}: not a directory")
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
    settings = Settings(stall_s=stall_s, engine_process=engine_process)
    evidence = _evidence(bundle_dir, logs_by_node, inv, settings, interval, accept_unknown_hosts) if bundle_dir \
        else None
    watch = loop.Watch(sources, settings, states, tracker, history=evidence.history if evidence else None)
    sink = Sink(fmt, sys.stdout, prom_file, _listener(listen, web_config) if listen else None)
    if once:
        sys.exit(loop.once(watch, sink, state_path))
    if webhook:
        from k3doctor.watch.webhook import Webhook

        hook = Webhook(webhook)
    actions = Actions(silenced, hook, Drainer() if drain else None, evidence)
    try:
        sys.exit(loop.run(watch, sink, interval_s=interval, for_s=for_s, actions=actions))
    finally:
        if sink.listener:
            sink.listener.close()


def _evidence(folder: str, logs: dict, inv, settings, interval: float, accept_unknown_hosts: bool):
    """The --bundle-dir capture (k3doctor/watch/evidence.py): its own connection to a stalled node; the server log
    it takes the last lines of is --server-log's (else the container's, as triage reads it)."""
    from k3doctor.judging.connections import make_transport
    from k3doctor.judging.runner import RunOptions
    from k3doctor.watch.evidence import Evidence, MetricsHistory

    paths = {n.name: logs.get(n.name, logs.get("*")) for n in inv.nodes if logs.get(n.name, logs.get("*"))}
    opts, nodes = RunOptions(accept_unknown_hosts=accept_unknown_hosts), {n.name: n for n in inv.nodes}
    return Evidence(folder, lambda name: make_transport(nodes[name], inv, opts), inv, MetricsHistory(interval),
                    settings.engine_process, paths)


def _listener(address: str, web_config: str | None):
    """--listen's server, started (serve.py); a file or address that cannot be served is one line, exit 3."""
    from k3doctor.watch.serve import Listener, WebConfigError, load_web_config

    try:
        return Listener(address, load_web_config(web_config) if web_config else None)
    except WebConfigError as exc:
        raise click.UsageError(str(exc)) from None


COMMANDS = (watch_cmd,)
