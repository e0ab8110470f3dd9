"""Command line: ``k3doctor check | list | explain | demo``.

Exit codes: 0 ready to launch (warnings allowed), 1 a check failed, 2 inconclusive
(a check could not be evaluated: unreachable node, timeout, unparseable output),
3 usage or inventory error.
"""
from __future__ import annotations

import logging
import math
import sys

import click

from . import __version__
from .deadline import MAX_SECONDS
from .inventory import (
    InventoryError,
    NodeSourceError,
    check_ssh_config,
    load_inventory,
    load_nodes,
    localhost_inventory,
    unset_password_variables,
)
from .outputs import OUTPUTS, OutputPath, write_output
from .registry import REGISTRY, load_checks
from .report import render_table
from .results import Status, overall
from .runner import RunOptions, run_checks, select_checks

EXIT_USAGE = 3
KERNEL_HEALTH = "kernel-health"  # joins triage's report: the kernel log of every node


class Seconds(click.ParamType):
    """A time setting: finite, above ``minimum``, at most a day (``inf``/``nan`` would never end)."""

    name = "seconds"

    def __init__(self, minimum: float = 0.1):
        self.minimum = minimum

    def convert(self, value, param, ctx):
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not (math.isfinite(seconds) and self.minimum <= seconds <= MAX_SECONDS):
            self.fail(f"{value!r} is not a number of seconds in [{self.minimum:g}, {MAX_SECONDS:g}]", param, ctx)
        return seconds


def _names(value: str) -> tuple:
    return tuple(n.strip() for n in (value or "").split(",") if n.strip())


def _progress(quiet=False):
    """Where a run's progress lines go: the live display on a terminal's stderr (k3doctor/progress.py), else nowhere."""
    from . import progress

    return progress.note if progress.wanted(quiet) else None


def _shown(quiet=False):
    from . import progress

    return progress.shown(quiet)


def _load_plugins():
    for problem in load_checks():
        click.echo(f"k3doctor: warning: {problem}", err=True)


NODES_HELP = ("Nodes: an inventory (k3doctor YAML, or an Ansible inventory: ini, YAML, directory) or a node set "
              "(ct[13-14,16-17], @group of the Ansible inventory)")
ansible_option = click.option(
    "--ansible-inventory", "ansible_inventory", metavar="PATH", default=None,
    help="Take the nodes from this Ansible inventory (read by `ansible-inventory --list`); --nodes may then be "
         "a node set (@group) choosing among its hosts.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="k3doctor")
def cli():
    """Pre-launch doctor for gfx1250 (MI455) Kimi-K3 wide-EP clusters.

    Runs a registry of checks over SSH on every node and says, before a 25-minute cold
    start, whether the rack is ready to launch - naming the node and GPU at fault.
    """


@cli.command("check")
@click.option("--nodes", "inventory", metavar="INVENTORY|NODESET",
              help=NODES_HELP + " (default: this machine, no SSH).")
@ansible_option
@click.option("--only", default="", metavar="NAMES", help="Comma-separated checks to run (see `k3doctor list`).")
@click.option("--skip", default="", metavar="NAMES", help="Comma-separated checks to leave out.")
@click.option("--tier", type=click.Choice(["fast", "deep"]), default="fast", show_default=True,
              help="fast: passive reads only; deep: also the active cross-node probes.")
@click.option("--format", "fmt", type=click.Choice(list(OUTPUTS)), default="table",
              show_default=True, help="Report format (see README: Monitoring and CI).")
@click.option("--parallel", type=click.IntRange(1, 1024), default=64, show_default=True,
              help="Nodes handled at once.")
@click.option("--timeout", type=Seconds(), default=None, metavar="S",
              help="Per-command timeout in seconds (default: inventory ssh.command_timeout_s).")
@click.option("--connect-timeout", type=Seconds(), default=None, metavar="S",
              help="SSH connect timeout (default: inventory ssh.connect_timeout_s).")
@click.option("--node-deadline", type=Seconds(), default=None, metavar="S",
              help="Deadline for all of one node's reads (default: inventory ssh.node_deadline_s).")
@click.option("--accept-unknown-hosts", is_flag=True,
              help="Accept host keys missing from known_hosts (never accepts a changed key).")
@click.option("--fix", is_flag=True, help="Allow checks to repair what they can name exactly. "
              "Without it k3doctor never changes a node.")
@click.option("--baseline", "baseline_path", type=click.Path(dir_okay=False), default=None,
              help="Baseline file from `k3doctor baseline record`, for drift checks.")
@click.option("--set", "overrides", multiple=True, metavar="CHECK.PARAM=VALUE",
              help="Override a check parameter for this run (repeatable), e.g. rack-free.window_min=10.")
@click.option("--pairs", default=None, metavar="PLAN",
              help="Node pairs for the fabric probe: quick, all, or a,b;c,d (= --set ualoe-fabric.pairs=PLAN).")
@click.option("--save-readings", type=OutputPath(stdout=False), default=None,
              help="Also save every raw reading to this JSON file (re-judge it later with `k3doctor judge`).")
@click.option("-o", "--output", type=OutputPath(), default="-",
              help="Write the report here (replaced atomically after the run; 0600: it may hold evidence).")
@click.option("-v", "--verbose", is_flag=True, help="Show evidence and passing results.")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr (it is shown only on a terminal anyway).")
def check_cmd(inventory, ansible_inventory, only, skip, tier, fmt, parallel, timeout, connect_timeout, node_deadline,
              accept_unknown_hosts, fix, baseline_path, overrides, pairs, save_readings, output, verbose, quiet):
    """Run the checks and report READY TO LAUNCH / DO NOT LAUNCH / INCONCLUSIVE."""
    inv = _inventory(inventory, logins=True, ansible_inventory=ansible_inventory)
    if pairs:
        overrides += (f"ualoe-fabric.pairs={pairs}",)
    apply_overrides(inv, overrides)
    try:
        checks = select_checks(REGISTRY, only=_names(only), skip=_names(skip), tier=tier)
    except KeyError as exc:
        raise click.UsageError(f"unknown check(s): {exc.args[0]} (see `k3doctor list`)") from None
    baseline = _read_baseline(baseline_path) if baseline_path else None
    opts = RunOptions(parallel=parallel, command_timeout_s=timeout, connect_timeout_s=connect_timeout,
                      node_deadline_s=node_deadline, accept_unknown_hosts=accept_unknown_hosts, fix=fix,
                      baseline=baseline, progress=_progress(quiet))
    with _shown(quiet):
        report = run_checks(inv, checks, opts)
    if save_readings:  # checked when parsed; replaced only now, atomically, 0600
        from . import snapshot

        write_output(save_readings, snapshot.dump(report, inv.text, overrides), private=True)
    _emit(report, checks, fmt, output, verbose)


@cli.command("node")
@click.option("--nodes", "inventory", metavar="INVENTORY.yaml",
              help="Inventory this node is part of (its settings; default: this machine's defaults).")
@click.option("--name", default=None, metavar="NAME", help="This node's name in the inventory (default: hostname).")
@click.option("--only", default="", metavar="NAMES", help="Comma-separated checks to run (passive ones only).")
@click.option("--skip", default="", metavar="NAMES", help="Comma-separated checks to leave out.")
@click.option("--set", "overrides", multiple=True, metavar="CHECK.PARAM=VALUE", help="Override a parameter.")
@click.option("--timeout", type=Seconds(), default=None, metavar="S",
              help="Per-reading timeout (default: the inventory's, at most 20).")
@click.option("--node-deadline", type=Seconds(), default=None, metavar="S",
              help="Deadline for all of this node's reads (default: the inventory's, at most 40).")
@click.option("--json", "as_json", is_flag=True,
              help="Print this node's results and readings as one line of JSON for `k3doctor merge`.")
@click.option("--format", "fmt", type=click.Choice(list(OUTPUTS)), default="table",
              show_default=True, help="Report format (see README: Monitoring and CI).")
@click.option("-o", "--output", type=OutputPath(), default="-", help="Write the report here.")
@click.option("-v", "--verbose", is_flag=True, help="Show evidence and passing results.")
@click.option("--slurm-drain", is_flag=True, help="HealthCheckProgram mode: a FAIL drains this node (reason "
              "'k3doctor: ...'); a healthy run resumes it if the drain was k3doctor's (never another drain).")
@click.option("--slurm-node", default=None, metavar="NAME",
              help="This node's Slurm name (default: $SLURMD_NODENAME, else the short hostname).")
@click.option("--slurm-timeout", type=Seconds(minimum=1), default=10, show_default=True, metavar="S",
              help="All scontrol calls together end by then (with the checks' 40 s: inside Slurm's 60 s).")
def node_cmd(inventory, name, only, skip, overrides, timeout, node_deadline, as_json, fmt, output, verbose,
             slurm_drain, slurm_node, slurm_timeout):
    """Check this machine only, no SSH (passive checks, bounded): for Slurm, Ansible, ClusterShell."""
    from . import local

    full = _inventory(inventory) if inventory else None
    if full is None:
        _load_plugins()
    try:
        inv = local.this_node(full, name)
    except local.NodeSelectionError as exc:
        raise click.UsageError(str(exc)) from None
    apply_overrides(inv, overrides)
    try:
        checks = select_checks(REGISTRY, only=_names(only), skip=_names(skip))
    except KeyError as exc:
        raise click.UsageError(f"unknown check(s): {exc.args[0]} (see `k3doctor list`)") from None
    active = [c.name for c in checks if c.interaction != "passive"]
    if active:
        raise click.UsageError(f"{', '.join(active)}: active probes span nodes; `node` runs passive checks only")
    if slurm_drain:
        from . import slurm

        try:
            slurm_node = slurm.node_name(slurm_node)
        except ValueError as exc:
            raise click.UsageError(f"--slurm-node: {exc}") from None
    report = local.run_node(inv, checks, command_timeout_s=timeout, node_deadline_s=node_deadline,
                            progress=_progress())
    if slurm_drain:
        said, failed = slurm.apply(slurm_node, inv.nodes[0].name, report.results,
                                   slurm.Scontrol(budget_s=slurm_timeout))
        for line in said + ([f"slurm: ERROR: {r.message}" for r in failed] if as_json else []):
            click.echo(f"k3doctor: {line}", err=True)  # --json carries the node's checks only
        report.results += failed
    if as_json:
        write_output(output, local.node_document(report, inv, checks, overrides) + "\n", private=True)
        sys.exit(overall(report.results).exit_code)
    _emit(report, checks, fmt, output, verbose)


@cli.command("merge")
@click.argument("sources", nargs=-1, required=True, metavar="RESULTS...")
@click.option("--nodes", "inventory", metavar="INVENTORY.yaml",
              help="The inventory the nodes ran with: every node of it is expected (and its racks: judged apart).")
@click.option("--only", default="", metavar="NAMES", help="Comma-separated checks to report.")
@click.option("--skip", default="", metavar="NAMES", help="Comma-separated checks to leave out.")
@click.option("--format", "fmt", type=click.Choice(list(OUTPUTS)), default="table",
              show_default=True, help="Report format (see README: Monitoring and CI).")
@click.option("-o", "--output", type=OutputPath(), default="-",
              help="Write the report here (replaced atomically after the run; 0600: it may hold evidence).")
@click.option("-v", "--verbose", is_flag=True, help="Show evidence and passing results.")
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

    from . import merge

    started = time.monotonic()
    inv = _inventory(inventory) if inventory else None
    if inv is None:
        _load_plugins()
    try:
        found = merge.read_inputs(_read_sources(sources))
        inv = merge.inventory_of(found, inv)
        apply_overrides(inv, merge.common_overrides(found))
        by_node = merge.one_each(found)
    except merge.MergeError as exc:
        click.echo(f"k3doctor: merge: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    try:
        checks = [c for c in select_checks(REGISTRY, only=_names(only), skip=_names(skip))
                  if c.interaction == "passive"]
    except KeyError as exc:
        raise click.UsageError(f"unknown check(s): {exc.args[0]} (see `k3doctor list`)") from None
    _emit(merge.merge(inv, checks, by_node, started), checks, fmt, output, verbose)


def _read_sources(sources) -> list:
    """(name, text) of each RESULTS argument (``-``: stdin), or one line and exit 3."""
    out = []
    for source in sources:
        try:
            if source == "-":
                out.append(("<stdin>", click.get_text_stream("stdin").read()))
            else:
                with open(source, encoding="utf-8") as fh:
                    out.append((source, fh.read()))
        except (OSError, UnicodeDecodeError) as exc:
            click.echo(f"k3doctor: merge: cannot read {source}: {getattr(exc, 'strerror', None) or exc}", err=True)
            sys.exit(EXIT_USAGE)
    return out


def _emit(report, checks, fmt, output, verbose):
    """Render with the registered format; the format also decides the exit code (Nagios: 0-3) and whether
    the file is private (reports hold evidence) or readable by a collector (Prometheus textfile)."""
    out = OUTPUTS[fmt]
    write_output(output, out.render(report, checks, verbose), private=out.private)
    sys.exit(out.exit_code(report))


@cli.command("judge")
@click.argument("readings_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--only", default="", metavar="NAMES", help="Comma-separated checks to judge.")
@click.option("--skip", default="", metavar="NAMES", help="Comma-separated checks to leave out.")
@click.option("--set", "overrides", multiple=True, metavar="CHECK.PARAM=VALUE", help="Override a parameter.")
@click.option("--baseline", "baseline_path", type=click.Path(dir_okay=False), default=None,
              help="Baseline file for drift checks.")
@click.option("--format", "fmt", type=click.Choice(list(OUTPUTS)), default="table",
              show_default=True, help="Report format (see README: Monitoring and CI).")
@click.option("-o", "--output", type=OutputPath(), default="-",
              help="Write the report here (replaced atomically after the run; 0600: it may hold evidence).")
@click.option("-v", "--verbose", is_flag=True, help="Show evidence and passing results.")
def judge_cmd(readings_file, only, skip, overrides, baseline_path, fmt, output, verbose):
    """Judge readings saved by `check --save-readings` (or a `triage -o x.tar.gz` bundle) again, offline."""
    from . import snapshot

    if readings_file.endswith((".tar.gz", ".tgz")):
        if only or skip or overrides or baseline_path:
            raise click.UsageError("--only/--skip/--set/--baseline apply to saved readings, not to a triage bundle")
        return _judge_bundle(readings_file, fmt, output, verbose)

    _load_plugins()
    try:
        with open(readings_file, encoding="utf-8") as fh:
            inv_text, saved_overrides, saved, unreachable = snapshot.load(fh.read())
        inv = _saved_inventory(inv_text, saved, readings_file)
    except (snapshot.SnapshotError, InventoryError, OSError, UnicodeDecodeError) as exc:
        click.echo(f"k3doctor: cannot judge {readings_file}: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    apply_overrides(inv, tuple(saved_overrides) + tuple(overrides))
    try:
        checks = select_checks(REGISTRY, only=_names(only), skip=_names(skip))
    except KeyError as exc:
        raise click.UsageError(f"unknown check(s): {exc.args[0]} (see `k3doctor list`)") from None
    baseline = _read_baseline(baseline_path) if baseline_path else None
    report = run_checks(inv, checks, RunOptions(replay=(saved, unreachable), baseline=baseline))
    _emit(report, checks, fmt, output, verbose)


def _saved_inventory(inv_text: str, saved: dict, source: str):
    """The inventory readings were saved with; a localhost run saved none: this machine under the saved name."""
    from .inventory import parse_inventory

    if inv_text:
        return parse_inventory(inv_text, f"{source} (saved inventory)", REGISTRY)
    inv = localhost_inventory()
    inv.nodes[0].name = next(iter(saved), inv.nodes[0].name)
    return inv


def _inventory(path, logins=False, ansible_inventory=None):
    """Plugins loaded, then the inventory (validated against their parameters) or exit 3;
    ``logins``: also every ``password_env`` variable must be set (not for offline judging)."""
    _load_plugins()
    try:
        inv = load_nodes(path, ansible_inventory, REGISTRY)
        check_ssh_config(inv)
        problems = unset_password_variables(inv) if logins else []
        if problems:
            raise InventoryError(problems)
        return inv
    except NodeSourceError as exc:
        click.echo(f"k3doctor: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except InventoryError as exc:
        click.echo(f"k3doctor: invalid inventory:\n{exc}", err=True)
        sys.exit(EXIT_USAGE)


def apply_overrides(inv, overrides) -> None:
    """``--set check.param=value`` (k3doctor/overrides.py); a bad one is a usage error."""
    from .overrides import OverrideError
    from .overrides import apply_overrides as apply

    try:
        apply(inv, overrides, REGISTRY)
    except OverrideError as exc:
        raise click.UsageError(str(exc)) from None


def _read_baseline(path: str) -> dict:
    from . import safeyaml

    try:
        with open(path, "rb") as fh:
            data = safeyaml.load(safeyaml.decode(fh.read(), path), path)
    except OSError as exc:
        raise click.UsageError(f"cannot read baseline {path}: {exc.strerror}") from None
    except safeyaml.YAMLInputError as exc:
        raise click.UsageError(f"cannot read baseline {exc.problems[0]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict) or \
            not all(isinstance(entry, dict) for entry in data["nodes"].values()):
        raise click.UsageError(f"{path} is not a k3doctor baseline (`nodes:` must map node -> check -> data)")
    return data["nodes"]


@cli.group("baseline")
def baseline_group():
    """Record a rack's healthy per-node readings, for drift checks (`check --baseline`)."""


@baseline_group.command("record")
@click.option("--nodes", "inventory", metavar="INVENTORY|NODESET", help=NODES_HELP + " (default: this machine).")
@ansible_option
@click.option("-o", "--output", type=OutputPath(stdout=False), required=True,
              help="Baseline YAML file to write (checked before the run, replaced atomically after it).")
@click.option("--accept-unknown-hosts", is_flag=True, help="Accept host keys missing from known_hosts.")
@click.option("--tier", type=click.Choice(["fast", "deep"]), default="fast", show_default=True,
              help="deep: also record the active probes' figures (e.g. a known-good fabric pair).")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr (it is shown only on a terminal anyway).")
def baseline_record_cmd(inventory, ansible_inventory, output, accept_unknown_hosts, tier, quiet):
    """Snapshot what the checks that keep baselines read on every node (the rack should be healthy)."""
    import time

    import yaml

    inv = _inventory(inventory, logins=True, ansible_inventory=ansible_inventory)
    keepers = tuple(c.name for c in select_checks(REGISTRY, tier=tier) if c.keeps_baseline)
    checks = select_checks(REGISTRY, only=keepers)  # + the prerequisites an active probe needs
    with _shown(quiet):
        report = run_checks(inv, checks, RunOptions(record=True, accept_unknown_hosts=accept_unknown_hosts,
                                                    progress=_progress(quiet)))
    doc = {"schema": "k3doctor.baseline/1", "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "inventory": inv.path, "nodes": report.records}
    write_output(output, yaml.safe_dump(doc, sort_keys=False), private=True)
    for node, why in report.unreachable.items():
        click.echo(f"k3doctor: {node} not recorded: {why}", err=True)
    unrecorded = [f"{node}/{chk}" for node, entries in report.records.items()
                  for chk, entry in entries.items() if isinstance(entry, dict) and "unrecorded" in entry]
    if unrecorded:
        click.echo(f"k3doctor: not recorded (see the file): {', '.join(unrecorded)}", err=True)
    failed = [r for r in report.results if r.status == Status.FAIL]
    for r in failed:
        click.echo(f"k3doctor: FAIL {r.check} {r.node or ''}: {r.message}", err=True)
    click.echo(f"baseline of {len(report.records)} node(s), {len(checks)} check(s) written to {output}")
    if failed:
        click.echo("k3doctor: the rack is not healthy: fix the failures and record again", err=True)
    sys.exit(1 if failed else 2 if report.unreachable or unrecorded else 0)


@cli.command("demo")
@click.option("--scenario", default="demo", show_default=True,
              help="Fault scenario of the simulated rack (healthy shows READY TO LAUNCH).")
@click.option("--list-scenarios", is_flag=True, help="List the rig's scenarios and exit.")
@click.option("-v", "--verbose", is_flag=True, help="Show evidence and passing results.")
def demo_cmd(scenario, list_scenarios, verbose):
    """Stand up a simulated 4-node rack (real sshd + dockerd, faked GPUs), check it, tear it down.

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
        click.echo("\n".join(scenario_names()))
        return
    if scenario not in scenario_names():
        raise click.UsageError(f"no scenario {scenario!r}; try --list-scenarios")
    missing = missing_requirements()
    if missing:
        raise click.UsageError("the simulated rack needs " + "; ".join(missing) + " (run scripts/install.sh)")
    _load_plugins()
    with tempfile.TemporaryDirectory(prefix="k3doctor-demo-") as tmp:
        click.echo(f"k3doctor demo: starting a simulated 4-node rack (scenario {scenario})...", err=True)
        with Rig(Path(tmp), scenario=scenario) as rig:
            inv = load_inventory(str(rig.inventory_path), REGISTRY)
            checks = select_checks(REGISTRY)
            with _shown():
                report = run_checks(inv, checks, RunOptions(progress=_progress()))
            click.echo(render_table(report, checks, verbose=verbose))
    sys.exit(overall(report.results).exit_code)


@cli.command("triage")
@click.option("--nodes", "inventory", metavar="INVENTORY|NODESET",
              help=NODES_HELP + ": read our container's server log on every node (default: this machine).")
@ansible_option
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
@click.option("--accept-unknown-hosts", is_flag=True, help="Accept host keys missing from known_hosts.")
@click.option("--format", "fmt", type=click.Choice(list(OUTPUTS)), default="table",
              show_default=True, help="Report format (see README: Monitoring and CI).")
@click.option("-o", "--output", type=OutputPath(), default="-",
              help="Write the report here; a .tar.gz keeps everything read (secrets redacted) for `k3doctor judge`.")
@click.option("-v", "--verbose", is_flag=True, help="Show evidence and passing results.")
def triage_cmd(inventory, ansible_inventory, logs_dir, log_paths, stepping, tail, endpoint, stacks, py_spy, timeout,
               accept_unknown_hosts, fmt, output, verbose):
    """Why is it stuck, and which rank? Reads every node's server log and names the rank at fault."""
    import time

    from . import triage
    from .runner import make_transport
    from .triage.judge import Layout

    started = time.monotonic()
    inv = _inventory(inventory, logins=not logs_dir, ansible_inventory=ansible_inventory)
    paths = {}
    for item in log_paths:
        node, sep, path = item.partition("=")
        if not sep or node not in {n.name for n in inv.nodes} or not path.startswith("/"):
            raise click.UsageError(f"--log {item!r}: expected NODE=/absolute/path with a node of the inventory")
        paths[node] = path
    if logs_dir and stacks:
        raise click.UsageError("--stacks reads live processes: it cannot be combined with --logs")
    bundle = output.endswith((".tar.gz", ".tgz"))
    # Offline without an inventory nobody knows the node names: node<i> holds ranks per_node * i ...
    names = tuple(n.name for n in inv.nodes) if inventory or not logs_dir else ()
    layout = Layout(nodes=names, per_node=inv.cluster.gpus_per_node, stepping=stepping or inv.cluster.stepping,
                    board_gib=inv.cluster.hbm_gib_per_gpu)
    dumps, now = {}, None
    if logs_dir:
        texts, unread = triage.read_log_dir(logs_dir)
        problems = {logs_dir: "; ".join(unread)} if unread else {}
    else:
        opts = RunOptions(accept_unknown_hosts=accept_unknown_hosts)
        texts, problems, now, dumps = triage.read_node_logs(
            inv, lambda node: make_transport(node, inv, opts), tail=tail, paths=paths,
            deadline_s=timeout + 5, timeout_s=timeout, py_spy=py_spy if stacks else None)
    results = triage.judge_all(texts, dumps, layout, now=now, problems=problems)
    kernel = None
    if not logs_dir:  # the kernel log tells what the server log cannot (fabric, wedged GPU: §8, §10)
        kernel = run_checks(inv, select_checks(REGISTRY, only=(KERNEL_HEALTH,)), RunOptions(
            accept_unknown_hosts=accept_unknown_hosts, command_timeout_s=timeout, node_deadline_s=timeout + 5))
        results += kernel.results
    if endpoint:
        from .gate import run_gate

        try:
            results += run_gate(endpoint)[1]
        except ValueError as exc:
            raise click.UsageError(f"--endpoint: {exc}") from None
    report = _triage_report(results, layout, time.monotonic() - started, gate=bool(endpoint))
    if bundle:
        from . import snapshot
        from .report import render_json
        from .triage import bundle as bundles

        manifest = {"layout": {"nodes": list(layout.nodes), "per_node": layout.per_node,
                               "stepping": layout.stepping, "board_gib": layout.board_gib},
                    "now": now, "problems": problems, "duration_s": report[0].duration_s}
        bundles.write(output, texts=texts, dumps=dumps, manifest=manifest, report_json=render_json(report[0]),
                      readings=snapshot.dump(kernel, inv.text) if kernel else None)
        click.echo(f"k3doctor: triage bundle written to {output} (re-judge with `k3doctor judge {output}`)", err=True)
    _emit_triage(report, fmt, "-" if bundle else output, verbose)


def _triage_report(results, layout, duration_s, gate=False):
    """(RunReport, steps) of a triage: nodes in layout order, then any other node a result names."""
    from .gate import STEPS as GATE_STEPS
    from .gate import Step
    from .runner import RunReport
    from .triage.judge import STEPS

    nodes = list(dict.fromkeys([*layout.nodes, *(r.node for r in results if r.node)]))
    steps = [Step(name, name) for name in (*STEPS, KERNEL_HEALTH)] + (list(GATE_STEPS) if gate else [])
    return RunReport(results=results, nodes=nodes, duration_s=round(duration_s, 3)), steps


def _emit_triage(report, fmt, output, verbose):
    """The most likely cause first (table), then the usual report and exit code."""
    from . import triage

    out = OUTPUTS[fmt]
    text = out.render(report[0], report[1], verbose)
    first = triage.most_likely(report[0].results)
    if first and fmt == "table":
        where = f"{first.node} gpu{first.gpu} (rank {first.evidence.get('rank')})" if first.node else "cluster"
        text = (f"Most likely cause: {first.message}\n  where: {where}\n  do: k3doctor explain "
                f"{first.remediation}\n\n") + text
    write_output(output, text, private=out.private)
    sys.exit(out.exit_code(report[0]))


def _judge_bundle(path, fmt, output, verbose):
    """`k3doctor judge triage.tar.gz`: the bundle's logs and stacks judged again, offline."""
    import time

    from . import snapshot, triage
    from .triage import bundle as bundles
    from .triage.judge import Layout

    _load_plugins()
    started = time.monotonic()
    try:
        manifest, texts, dumps, readings = bundles.read(path)
        lay = manifest["layout"]
        layout = Layout(nodes=tuple(lay["nodes"]), per_node=int(lay["per_node"]), stepping=lay.get("stepping"),
                        board_gib=lay.get("board_gib"))
        now, problems = manifest.get("now"), dict(manifest.get("problems") or {})
        saved = snapshot.load(readings) if readings else None
        inv = _saved_inventory(saved[0], saved[2], path) if saved else None
    except (bundles.BundleError, snapshot.SnapshotError, InventoryError, KeyError, TypeError, ValueError) as exc:
        click.echo(f"k3doctor: cannot judge {path}: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    results = triage.judge_all(texts, dumps, layout, now=now, problems=problems)
    if saved:  # the kernel log as it was read, judged again
        results += run_checks(inv, select_checks(REGISTRY, only=(KERNEL_HEALTH,)),
                              RunOptions(replay=(saved[2], saved[3]))).results
    _emit_triage(_triage_report(results, layout, time.monotonic() - started), fmt, output, verbose)


@cli.command("gate")
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

    from .gate import STEPS, GateSettings, run_gate
    from .runner import RunReport

    settings = GateSettings(chat_max_tokens=chat_max_tokens, deadline_s=deadline,
                            request_timeout_s=min(deadline, GateSettings.request_timeout_s),
                            **({"model": model} if model else {}))
    started = time.monotonic()
    try:
        where, results = run_gate(endpoint, settings)
    except ValueError as exc:
        raise click.UsageError(f"--endpoint: {exc}") from None
    report = RunReport(results=results, nodes=[where], duration_s=round(time.monotonic() - started, 3))
    _emit(report, STEPS, fmt, output, verbose)


@cli.command("list")
@click.option("-v", "--verbose", is_flag=True, help="Also show each check's parameters and defaults.")
def list_cmd(verbose):
    """List the registered checks."""
    from tabulate import tabulate

    from k3doctor import platforms

    _load_plugins()
    rows = [(c.name, c.scope, c.tier, c.interaction, c.title) for c in REGISTRY.ordered()]
    click.echo(tabulate(rows, headers=["check", "scope", "tier", "interaction", "what"]))
    if verbose:
        for c in REGISTRY.ordered():
            why = " ".join(c.doc.split("\n\n")[0].split()) if c.doc else c.title
            click.echo(f"\n{c.name}: {why}")
            click.echo(f"  remediation codes: {', '.join(c.remediations) or '-'}")
            if platforms.not_for(c.name):
                click.echo(f"  not for this platform: {', '.join(platforms.not_for(c.name))} (not run there)")
            for param, default in c.params.items():
                choices = c.param_specs[param].choices
                one_of = f"  (one of {', '.join(choices)})" if choices else ""
                click.echo(f"  {c.name}.{param} = {default!r}{one_of}")


@cli.command("explain")
@click.argument("code")
def explain_cmd(code):
    """Print what to do about a remediation CODE shown in a report."""
    from . import gate, slurm  # noqa: F401  (registers the gate's and --slurm-drain's codes)
    from .triage import judge, stacks  # noqa: F401  (and triage's)

    _load_plugins()
    rem = REGISTRY.remediations.get(code) or REGISTRY.remediations.get(code.upper())
    if rem is None:
        known = ", ".join(sorted(REGISTRY.remediations))
        raise click.UsageError(f"no remediation code {code!r}; known codes: {known}")
    users = [c.name for c in REGISTRY.checks.values() if rem.code in c.remediations]
    click.echo(f"{rem.code}: {rem.title}\n")
    click.echo(rem.text)
    if users:
        click.echo(f"\nRaised by: {', '.join(users)}")


def _quiet_logging() -> None:
    """k3doctor's own warnings as one ``k3doctor: ...`` line each; paramiko's thread tracebacks (a
    banner timeout logs 20 lines) never reach stderr: the node's ERROR already says what failed."""
    own, quiet = logging.getLogger("k3doctor"), logging.getLogger("paramiko")
    if not own.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("k3doctor: %(message)s"))
        own.addHandler(handler)
        quiet.addHandler(logging.NullHandler())
    own.propagate = quiet.propagate = False


def main(argv=None):
    """Entry point: click's usage errors exit 3 (not click's 2, which means inconclusive here)."""
    _quiet_logging()
    try:
        cli.main(args=argv, prog_name="k3doctor", standalone_mode=False)
    except click.UsageError as exc:
        hint = f" (try `{exc.ctx.command_path} --help`)" if exc.ctx else ""
        click.echo(f"k3doctor: {exc.format_message()}{hint}", err=True)
        sys.exit(EXIT_USAGE)
    except click.ClickException as exc:
        click.echo(f"k3doctor: {exc.format_message()}", err=True)
        sys.exit(EXIT_USAGE)
    except click.Abort:
        click.echo("k3doctor: aborted", err=True)
        sys.exit(130)
    except Exception as exc:  # a bug must still end in one line and an honest "inconclusive"
        click.echo(f"k3doctor: internal error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(2)
    sys.exit(0)


from .recipe_cmd import recipe_group  # noqa: E402  (`k3doctor recipe ...`: its own module)

cli.add_command(recipe_group)

if __name__ == "__main__":
    main()
