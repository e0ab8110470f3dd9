"""The commands that judge a rack: ``check``, ``node``, ``merge``, ``judge`` and ``baseline record``."""
from __future__ import annotations

import sys

import click

from k3doctor.cli.options import (
    QUIET,
    Seconds,
    accept_unknown_hosts_option,
    apply_overrides,
    bad_input,
    baseline_of,
    emit,
    load_plugins,
    nodes_option,
    overrides_option,
    progress_to,
    read_inventory,
    report_options,
    select,
    selection,
    shown,
)
from k3doctor.judging.runner import RunOptions, run_checks
from k3doctor.outputs import OutputPath, write_output
from k3doctor.results import overall


@click.command("check")
@nodes_option(" (default: this machine, no SSH).")
@selection("run", " (see `k3doctor list`)")
@click.option("--tier", type=click.Choice(["fast", "deep"]), default="fast", show_default=True,
              help="fast: passive reads only; deep: also the active cross-node probes.")
@click.option("--parallel", type=click.IntRange(1, 1024), default=64, show_default=True,
              help="Nodes handled at once.")
@click.option("--timeout", type=Seconds(), default=None, metavar="S",
              help="Per-command timeout in seconds (default: inventory ssh.command_timeout_s).")
@click.option("--connect-timeout", type=Seconds(), default=None, metavar="S",
              help="SSH connect timeout (default: inventory ssh.connect_timeout_s).")
@click.option("--node-deadline", type=Seconds(), default=None, metavar="S",
              help="Deadline for all of one node's reads (default: inventory ssh.node_deadline_s).")
@accept_unknown_hosts_option("Accept host keys missing from known_hosts (never accepts a changed key).")
@click.option("--fix", is_flag=True, help="Allow checks to repair what they can name exactly. "
              "Without it k3doctor never changes a node.")
@click.option("--baseline", "baseline_path", type=click.Path(dir_okay=False), default=None,
              help="Baseline file from `k3doctor baseline record`, for drift checks.")
@overrides_option("Override a check parameter for this run (repeatable), e.g. rack-free.window_min=10.")
@click.option("--pairs", default=None, metavar="PLAN",
              help="Node pairs for the fabric probe: quick, all, or a,b;c,d (= --set ualoe-fabric.pairs=PLAN).")
@click.option("--save-readings", type=OutputPath(stdout=False), default=None,
              help="Also save every raw reading to this JSON file (re-judge it later with `k3doctor judge`).")
@click.option("--connect-only", is_flag=True, help="Only reach every node and say per node what works (TCP, "
              "host key, login, sudo, python3, the GPU tools): the step before a first check. Exit 0 when all do.")
@report_options()
@QUIET
def check_cmd(inventory, ansible_inventory, only, skip, tier, parallel, timeout, connect_timeout, node_deadline,
              accept_unknown_hosts, fix, baseline_path, overrides, pairs, save_readings, connect_only, fmt, output,
              verbose, quiet):
    """Run the checks and report READY TO LAUNCH / DO NOT LAUNCH / INCONCLUSIVE."""
    inv = read_inventory(inventory, logins=True, ansible_inventory=ansible_inventory)
    if connect_only:
        from k3doctor.judging.contact import contact_all
        from k3doctor.outputs.contact import render_contacts

        contacts = contact_all(inv, RunOptions(parallel=parallel, command_timeout_s=timeout,
                                               connect_timeout_s=connect_timeout,
                                               accept_unknown_hosts=accept_unknown_hosts))
        write_output(output, render_contacts(contacts, fmt), private=True)
        sys.exit(0 if all(c.works for c in contacts) else 2)
    apply_overrides(inv, overrides + ((f"ualoe-fabric.pairs={pairs}",) if pairs else ()))
    checks = select(only, skip, tier)
    ahead = click.get_current_context().obj  # the connections k3doctor/cli/early.py opened: used if they match
    key = (inventory, ansible_inventory, parallel, connect_timeout, accept_unknown_hosts)
    opts = RunOptions(parallel=parallel, command_timeout_s=timeout, connect_timeout_s=connect_timeout,
                      node_deadline_s=node_deadline, accept_unknown_hosts=accept_unknown_hosts, fix=fix,
                      baseline=baseline_of(baseline_path), progress=progress_to(quiet),
                      ahead=ahead if ahead is not None and ahead.matches(inv, key) else None)
    with shown(quiet):
        report = run_checks(inv, checks, opts)
    if save_readings:  # checked when parsed; replaced only now, atomically, 0600
        from k3doctor.gather import snapshot

        write_output(save_readings, snapshot.dump(report, inv.text, overrides), private=True)
    emit(report, checks, fmt, output, verbose)


@click.command("node")
@click.option("--nodes", "inventory", metavar="INVENTORY.yaml",
              help="Inventory this node is part of (its settings; default: this machine's defaults).")
@click.option("--name", default=None, metavar="NAME", help="This node's name in the inventory (default: hostname).")
@selection("run", " (passive ones only)")
@overrides_option()
@click.option("--timeout", type=Seconds(), default=None, metavar="S",
              help="Per-reading timeout (default: the inventory's, at most 20).")
@click.option("--node-deadline", type=Seconds(), default=None, metavar="S",
              help="Deadline for all of this node's reads (default: the inventory's, at most 40).")
@click.option("--json", "as_json", is_flag=True,
              help="Print this node's results and readings as one line of JSON for `k3doctor merge`.")
@report_options("Write the report here.")
@click.option("--slurm-drain", is_flag=True, help="HealthCheckProgram mode: a FAIL drains this node (reason "
              "'k3doctor: ...'); a healthy run resumes it if the drain was k3doctor's (never another drain).")
@click.option("--slurm-node", default=None, metavar="NAME",
              help="This node's Slurm name (default: $SLURMD_NODENAME, else the short hostname).")
@click.option("--slurm-timeout", type=Seconds(minimum=1), default=10, show_default=True, metavar="S",
              help="All scontrol calls together end by then (with the checks' 40 s: inside Slurm's 60 s).")
def node_cmd(inventory, name, only, skip, overrides, timeout, node_deadline, as_json, fmt, output, verbose,
             slurm_drain, slurm_node, slurm_timeout):
    """Check this machine only, no SSH (passive checks, bounded): for Slurm, Ansible, ClusterShell."""
    from k3doctor.fleet import node_mode, slurm

    full = read_inventory(inventory) if inventory else None
    if full is None:
        load_plugins()
    try:
        inv = node_mode.this_node(full, name)
    except node_mode.NodeSelectionError as exc:
        raise click.UsageError(str(exc)) from None
    # A health check judges the node, not who Slurm placed there: its own allocations are no fault to drain for.
    apply_overrides(inv, (("rack-free.slurm_jobs=ignore",) if slurm_drain else ()) + overrides)
    checks = select(only, skip)
    active = [c.name for c in checks if c.interaction != "passive"]
    if active:
        raise click.UsageError(f"{', '.join(active)}: active probes span nodes; `node` runs passive checks only")
    try:
        slurm_node = slurm.node_name(slurm_node) if slurm_drain else None
    except ValueError as exc:
        raise click.UsageError(f"--slurm-node: {exc}") from None
    report = node_mode.run_node(inv, checks, command_timeout_s=timeout, node_deadline_s=node_deadline,
                                progress=progress_to())
    if slurm_drain:
        said, failed = slurm.apply(slurm_node, inv.nodes[0].name, report.results,
                                   slurm.Scontrol(budget_s=slurm_timeout))
        for line in said + ([f"slurm: ERROR: {r.message}" for r in failed] if as_json else []):
            click.echo(f"k3doctor: {line}", err=True)  # --json carries the node's checks only
        report.results += failed
    if as_json:
        write_output(output, node_mode.node_document(report, inv, checks, overrides) + "\n", private=True)
        sys.exit(overall(report.results).exit_code)
    emit(report, checks, fmt, output, verbose)


@click.command("merge")
@click.argument("sources", nargs=-1, required=True, metavar="RESULTS...")
@click.option("--nodes", "inventory", metavar="INVENTORY.yaml",
              help="The inventory the nodes ran with: every node of it is expected (and its racks: judged apart).")
@selection("report")
@report_options()
def merge_cmd(sources, inventory, only, skip, fmt, output, verbose):
    """Join `k3doctor node --json` results, judge the cluster checks across them, and report as `check` does.

    \b
    RESULTS are files or - (stdin) holding, line by line:
      a node document per line (node --json, -o files, srun --output files)
      HOST: DOCUMENT              (clush, pdsh; not clush -b)
      HOST | CHANGED | rc=0 >>    (Ansible ad-hoc, also -o/oneline, UNREACHABLE!/FAILED! =>)
    A node of --nodes without a result, or one its engine reports failed, is an ERROR there; duplicates,
    unknown nodes, another inventory and text no host owns exit 3.
    """
    import time

    from k3doctor.fleet import merge

    started = time.monotonic()
    inv = read_inventory(inventory) if inventory else None
    if inv is None:
        load_plugins()
    try:
        found = merge.read_inputs(merge.read_sources(sources, stdin=click.get_text_stream("stdin")))
        inv = merge.inventory_of(found, inv)
        apply_overrides(inv, merge.common_overrides(found))
        by_node = merge.one_each(found)
    except merge.MergeError as exc:
        bad_input(f"merge: {exc}")
    checks = select(only, skip, passive_only=True)
    emit(merge.merge(inv, checks, by_node, started), checks, fmt, output, verbose)


@click.command("judge")
@click.argument("readings_file", type=click.Path(exists=True, dir_okay=False))
@selection("judge")
@overrides_option()
@click.option("--baseline", "baseline_path", type=click.Path(dir_okay=False), default=None,
              help="Baseline file for drift checks.")
@report_options()
def judge_cmd(readings_file, only, skip, overrides, baseline_path, fmt, output, verbose):
    """Judge readings saved by `check --save-readings` (or a `triage -o x.tar.gz` bundle) again, offline."""
    from k3doctor.gather import snapshot

    load_plugins()
    if readings_file.endswith((".tar.gz", ".tgz")):
        if only or skip or overrides or baseline_path:
            raise click.UsageError("--only/--skip/--set/--baseline apply to saved readings, not to a triage bundle")
        from k3doctor import triage
        from k3doctor.triage import flow

        try:
            report, steps = flow.judge_bundle(readings_file)
        except flow.TriageInputError as exc:
            bad_input(str(exc))
        emit(report, steps, fmt, output, verbose, first_screen=triage.first_screen(report.results))
    try:
        inv, saved_overrides, saved, unreachable = snapshot.load_file(readings_file)
    except snapshot.SnapshotError as exc:
        bad_input(f"cannot judge {readings_file}: {exc}")
    apply_overrides(inv, tuple(saved_overrides) + tuple(overrides))
    checks = select(only, skip)
    report = run_checks(inv, checks, RunOptions(replay=(saved, unreachable), baseline=baseline_of(baseline_path)))
    emit(report, checks, fmt, output, verbose)


@click.group("baseline")
def baseline_group():
    """Record a rack's healthy per-node readings, for drift checks (`check --baseline`)."""


@baseline_group.command("record")
@nodes_option(" (default: this machine).")
@click.option("-o", "--output", type=OutputPath(stdout=False), required=True,
              help="Baseline YAML file to write (checked before the run, replaced atomically after it).")
@accept_unknown_hosts_option()
@click.option("--tier", type=click.Choice(["fast", "deep"]), default="fast", show_default=True,
              help="deep: also record the active probes' figures (e.g. a known-good fabric pair).")
@QUIET
def baseline_record_cmd(inventory, ansible_inventory, output, accept_unknown_hosts, tier, quiet):
    """Snapshot what the checks that keep baselines read on every node (the rack should be healthy)."""
    from k3doctor.fleet import baseline

    inv = read_inventory(inventory, logins=True, ansible_inventory=ansible_inventory)
    with shown(quiet):
        done = baseline.record(inv, tier=tier, accept_unknown_hosts=accept_unknown_hosts, progress=progress_to(quiet))
    write_output(output, done.text, private=True)
    for node, why in done.report.unreachable.items():
        click.echo(f"k3doctor: {node} not recorded: {why}", err=True)
    if done.unrecorded:
        click.echo(f"k3doctor: not recorded (see the file): {', '.join(done.unrecorded)}", err=True)
    for r in done.failed:
        click.echo(f"k3doctor: FAIL {r.check} {r.node or ''}: {r.message}", err=True)
    click.echo(f"baseline of {len(done.report.records)} node(s), {len(done.checks)} check(s) written to {output}")
    if done.failed:
        click.echo("k3doctor: the rack is not healthy: fix the failures and record again", err=True)
    sys.exit(done.exit_code)



COMMANDS = (check_cmd, node_cmd, merge_cmd, judge_cmd, baseline_group)
