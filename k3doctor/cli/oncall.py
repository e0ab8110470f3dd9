"""The on-call and demo commands: ``triage``, ``gate`` and ``demo``."""
from __future__ import annotations

import sys

import click

from k3doctor import platforms
from k3doctor.cli.options import (
    Seconds,
    accept_unknown_hosts_option,
    emit,
    load_plugins,
    nodes_option,
    progress_to,
    read_inventory,
    report_options,
    select,
    shown,
)
from k3doctor.inventory.load import load_inventory
from k3doctor.judging.runner import RunOptions, run_checks
from k3doctor.outputs import OUTPUTS, OutputPath
from k3doctor.outputs.report import render_table
from k3doctor.registry import REGISTRY
from k3doctor.results import overall


@click.command("triage")
@nodes_option(": read our container's server log on every node (default: this machine).")
@click.option("--logs", "logs_dir", type=click.Path(exists=True, file_okay=False), default=None,
              help="Judge log files copied off the cluster instead (one per node or per rank), offline.")
@click.option("--log", "log_paths", multiple=True, metavar="NODE=PATH",
              help="Read this file on NODE instead of the container's output (repeatable).")
@click.option("--stepping", type=click.Choice(["A0", "B0"]), default=None,
              help="Declared stepping (default: the inventory's), for the translation proof lines (§2).")
@click.option("--tail", type=click.IntRange(100, 10_000_000), default=200_000, show_default=True,
              help="Lines of each container log to read.")
@click.option("--endpoint", default=None, metavar="URL", help="Also run the sanity gate against this server.")
@click.option("--stacks", is_flag=True, help="Also take py-spy stacks of every ModelRunner (ATOM::DP*TP0), "
              "from the host by PID; py-spy must be installed on the nodes (never installed for you).")
@click.option("--py-spy", "py_spy", default="py-spy", show_default=True, metavar="PATH",
              help="py-spy on the nodes, for --stacks.")
@click.option("--timeout", type=Seconds(minimum=1), default=60, show_default=True, metavar="S",
              help="Per-node read timeout.")
@accept_unknown_hosts_option()
@report_options("Write the report here; a .tar.gz keeps everything read (secrets redacted) for `k3doctor judge`.")
def triage_cmd(inventory, ansible_inventory, logs_dir, log_paths, stepping, tail, endpoint, stacks, py_spy, timeout,
               accept_unknown_hosts, fmt, output, verbose):
    """Why is it stuck, and which rank? Reads every node's server log and names the rank at fault."""
    from k3doctor import triage
    from k3doctor.outputs.report import render_json
    from k3doctor.triage import flow

    inv = read_inventory(inventory, logins=not logs_dir, ansible_inventory=ansible_inventory)
    try:
        found = flow.run_triage(inv, named=bool(inventory) or not logs_dir, logs_dir=logs_dir,
                                paths=flow.log_paths(log_paths, inv), stepping=stepping, tail=tail,
                                endpoint=endpoint, py_spy=py_spy if stacks else None, timeout_s=timeout,
                                accept_unknown_hosts=accept_unknown_hosts)
    except flow.TriageInputError as exc:
        raise click.UsageError(str(exc)) from None
    bundle = output.endswith((".tar.gz", ".tgz"))
    if bundle:
        flow.write_bundle(output, found, inv.text, render_json(found.report))
        click.echo(f"k3doctor: triage bundle written to {output} (re-judge with `k3doctor judge {output}`)", err=True)
    emit(found.report, found.steps, fmt, "-" if bundle else output, verbose,
          first_screen=triage.first_screen(found.report.results))


@click.command("gate")
@click.option("--endpoint", required=True, metavar="URL", help="The model server, e.g. http://node0:8000.")
@click.option("--model", default=None, metavar="NAME",
              help="The model string clients will send (default: the recipe's served name).")
@click.option("--chat-max-tokens", type=click.IntRange(1, 1_000_000), default=4096, show_default=True,
              help="max_tokens of the chat probe (thinking needs room: < ~3500 is suspect).")
@click.option("--deadline", type=Seconds(minimum=1), default=300, show_default=True, metavar="S",
              help="The whole gate ends by then.")
@click.option("--format", "fmt", type=click.Choice(list(OUTPUTS)), default="table",
              show_default=True, help="Report format (see README: Monitoring and CI).")
@click.option("-o", "--output", type=OutputPath(), default="-", help="Write the report here.")
@click.option("-v", "--verbose", is_flag=True, help="Show evidence and passing results.")
def gate_cmd(endpoint, model, chat_max_tokens, deadline, fmt, output, verbose):
    """Sanity gate before any benchmark: served name, real text (not `!`), a chat answer with content."""
    import time

    from k3doctor.judging.runner import RunReport
    from k3doctor.probes.gate import STEPS, GateSettings, run_gate, unreachable

    settings = GateSettings(chat_max_tokens=chat_max_tokens, deadline_s=deadline,
                            request_timeout_s=min(deadline, GateSettings.request_timeout_s),
                            **({"model": model} if model else {}))
    started = time.monotonic()
    try:
        where, results = run_gate(endpoint, settings)
    except ValueError as exc:
        raise click.UsageError(f"--endpoint: {exc}") from None
    report = RunReport(results=results, nodes=[where], duration_s=round(time.monotonic() - started, 3),
                       unreachable=unreachable(results))
    emit(report, STEPS, fmt, output, verbose)


def demo_rack(platform: str, scenarios: list) -> tuple:
    """(default scenario, nodes) of the rack `demo` stands up: a UALink platform's rack of 4 trays (wide EP
    spans them, §4), or two single-node TP8 nodes of an XGMI platform (§30, §31.4); the platform's own
    ``<platform>-demo`` scenario where the rig has one, else ``demo`` (UALink) or ``healthy``."""
    ualink = platforms.get(platform).fabric == "ualink"
    own = f"{platform}-demo"
    return (own if own in scenarios else "demo" if ualink else "healthy"), (4 if ualink else 2)


@click.command("demo")
@click.option("--platform", type=click.Choice(platforms.names()), default=platforms.DEFAULT, show_default=True,
              help="Platform of the simulated rack's nodes (k3doctor/platforms/*.yaml).")
@click.option("--scenario", default=None,
              help="Fault scenario of the simulated rack (healthy shows READY TO LAUNCH) [default: the platform's "
                   "own demo scenario].")
@click.option("--list-scenarios", is_flag=True, help="List the rig's scenarios and exit.")
@click.option("--watch", "watch", is_flag=True,
              help="Instead of a check: `k3doctor watch` on a serving simulated rack while one DP rank stalls.")
@click.option("-v", "--verbose", is_flag=True, help="Show evidence and passing results.")
def demo_cmd(platform, scenario, list_scenarios, watch, verbose):
    """Stand up a simulated rack (real sshd + dockerd, faked GPUs), check it, tear it down.

    Needs root (mount namespaces, sshd, dockerd) and the packages scripts/install.sh installs.
    """
    import tempfile
    from pathlib import Path

    try:
        from k3rig import Rig, missing_requirements, scenario_names
    except ImportError:
        raise click.UsageError("the simulated rack is a package of its own: install it with "
                               "`pip install ./rig` from a k3doctor checkout (scripts/install.sh does)") from None

    if list_scenarios:
        click.echo("\n".join(scenario_names(platform)))
        return
    if watch and scenario:
        raise click.UsageError("--watch runs its own scenario (a DP rank stalling): --scenario does not apply")
    default_scenario, nodes = demo_rack(platform, scenario_names(platform))
    scenario = scenario or default_scenario
    if scenario not in scenario_names(platform):
        raise click.UsageError(f"no scenario {scenario!r}; try --list-scenarios")
    missing = missing_requirements()
    if missing:
        raise click.UsageError("the simulated rack needs " + "; ".join(missing) + " (run scripts/install.sh)")
    if watch:
        from k3doctor.cli.demo_watch import run_watch_demo

        sys.exit(run_watch_demo())
    load_plugins()
    with tempfile.TemporaryDirectory(prefix="k3doctor-demo-") as tmp:
        click.echo(f"k3doctor demo: starting a simulated {nodes}-node {platform} rack (scenario {scenario})...",
                   err=True)
        with Rig(Path(tmp), nodes=nodes, scenario=scenario, platform=platform) as rig:
            inv = load_inventory(str(rig.inventory_path), REGISTRY)
            checks = select()
            with shown():
                report = run_checks(inv, checks, RunOptions(progress=progress_to()))
            click.echo(render_table(report, checks, verbose=verbose))
    sys.exit(overall(report.results).exit_code)


COMMANDS = (triage_cmd, gate_cmd, demo_cmd)
