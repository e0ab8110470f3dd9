"""Command line: ``k3doctor check | list | explain | demo``.

Exit codes: 0 ready to launch (warnings allowed), 1 a check failed, 2 inconclusive
(a check could not be evaluated: unreachable node, timeout, unparseable output),
3 usage or inventory error.
"""
from __future__ import annotations

import sys

import click

from . import __version__
from .inventory import InventoryError, like, load_inventory, localhost_inventory
from .outputs import OUTPUTS, OutputPath, write_output
from .registry import REGISTRY, load_checks
from .report import render_table
from .results import Status, overall
from .runner import RunOptions, run_checks, select_checks

EXIT_USAGE = 3


def _names(value: str) -> tuple:
    return tuple(n.strip() for n in (value or "").split(",") if n.strip())


def _progress():
    if not sys.stderr.isatty():
        return None
    return lambda msg: click.echo(f"k3doctor: {msg}", err=True)


def _load_plugins():
    for problem in load_checks():
        click.echo(f"k3doctor: warning: {problem}", err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="k3doctor")
def cli():
    """Pre-launch doctor for gfx1250 (MI455) Kimi-K3 wide-EP clusters.

    Runs a registry of checks over SSH on every node and says, before a 25-minute cold
    start, whether the rack is ready to launch - naming the node and GPU at fault.
    """


@cli.command("check")
@click.option("--nodes", "inventory", metavar="INVENTORY.yaml",
              help="Inventory of nodes to check (default: this machine, no SSH).")
@click.option("--only", default="", metavar="NAMES", help="Comma-separated checks to run (see `k3doctor list`).")
@click.option("--skip", default="", metavar="NAMES", help="Comma-separated checks to leave out.")
@click.option("--tier", type=click.Choice(["fast", "deep"]), default="fast", show_default=True,
              help="fast: passive reads only; deep: also the active cross-node probes.")
@click.option("--format", "fmt", type=click.Choice(list(OUTPUTS)), default="table",
              show_default=True, help="Report format (see README: Monitoring and CI).")
@click.option("--parallel", type=click.IntRange(1, 1024), default=64, show_default=True,
              help="Nodes handled at once.")
@click.option("--timeout", type=click.FloatRange(0.1), default=None, metavar="S",
              help="Per-command timeout in seconds (default: inventory ssh.command_timeout_s).")
@click.option("--connect-timeout", type=click.FloatRange(0.1), default=None, metavar="S",
              help="SSH connect timeout (default: inventory ssh.connect_timeout_s).")
@click.option("--node-deadline", type=click.FloatRange(0.1), default=None, metavar="S",
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
@click.option("--save-readings", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Also save every raw reading to this JSON file (re-judge it later with `k3doctor judge`).")
@click.option("-o", "--output", type=OutputPath(), default="-",
              help="Write the report here (replaced atomically after the run).")
@click.option("-v", "--verbose", is_flag=True, help="Show evidence and passing results.")
def check_cmd(inventory, only, skip, tier, fmt, parallel, timeout, connect_timeout, node_deadline,
              accept_unknown_hosts, fix, baseline_path, overrides, pairs, save_readings, output, verbose):
    """Run the checks and report READY TO LAUNCH / DO NOT LAUNCH / INCONCLUSIVE."""
    inv = _inventory(inventory)
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
                      baseline=baseline, progress=_progress())
    saved = _open_for_writing(save_readings) if save_readings else None  # fail before, not after, the run
    report = run_checks(inv, checks, opts)
    if saved:
        from . import snapshot

        with saved:
            saved.write(snapshot.dump(report, inv.text, overrides))
    _emit(report, checks, fmt, output, verbose)


def _open_for_writing(path: str):
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise click.UsageError(f"cannot write {path}: {exc.strerror}") from None


def _emit(report, checks, fmt, output, verbose):
    """Render with the registered format; the format also decides the exit code (Nagios: 0-3)."""
    out = OUTPUTS[fmt]
    write_output(output, out.render(report, checks, verbose))
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
              help="Write the report here (replaced atomically after the run).")
@click.option("-v", "--verbose", is_flag=True, help="Show evidence and passing results.")
def judge_cmd(readings_file, only, skip, overrides, baseline_path, fmt, output, verbose):
    """Judge readings saved by `check --save-readings` again, offline (no node is contacted)."""
    from . import snapshot
    from .inventory import parse_inventory

    _load_plugins()
    try:
        with open(readings_file, encoding="utf-8") as fh:
            inv_text, saved_overrides, saved, unreachable = snapshot.load(fh.read())
        inv = parse_inventory(inv_text, f"{readings_file} (saved inventory)", REGISTRY) if inv_text \
            else localhost_inventory()
    except (snapshot.SnapshotError, InventoryError, OSError, UnicodeDecodeError) as exc:
        click.echo(f"k3doctor: cannot judge {readings_file}: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    if not inv_text:  # saved from a localhost run: the node name is whatever was saved
        inv.nodes[0].name = next(iter(saved), inv.nodes[0].name)
    apply_overrides(inv, tuple(saved_overrides) + tuple(overrides))
    try:
        checks = select_checks(REGISTRY, only=_names(only), skip=_names(skip))
    except KeyError as exc:
        raise click.UsageError(f"unknown check(s): {exc.args[0]} (see `k3doctor list`)") from None
    baseline = _read_baseline(baseline_path) if baseline_path else None
    report = run_checks(inv, checks, RunOptions(replay=(saved, unreachable), baseline=baseline))
    _emit(report, checks, fmt, output, verbose)


def _inventory(path):
    """Plugins loaded, then the inventory (validated against their parameters) or exit 3."""
    _load_plugins()
    try:
        return load_inventory(path, REGISTRY) if path else localhost_inventory()
    except InventoryError as exc:
        click.echo(f"k3doctor: invalid inventory:\n{exc}", err=True)
        sys.exit(EXIT_USAGE)


def apply_overrides(inv, overrides) -> None:
    """``--set check.param=value``: typed like the parameter's default, applied to every node."""
    import yaml

    for item in overrides:
        key, sep, raw = item.partition("=")
        name, dot, param = key.rpartition(".")
        chk = REGISTRY.checks.get(name)
        if not (sep and dot) or chk is None or param not in chk.params:
            raise click.UsageError(f"--set {item!r}: expected CHECK.PARAM=VALUE with a parameter from "
                                   "`k3doctor list -v`")
        default = chk.params[param]
        try:
            value = raw if isinstance(default, str) else yaml.safe_load(raw)
        except yaml.YAMLError:
            raise click.UsageError(f"--set {item!r}: {raw!r} is not a valid value") from None
        ok, expected = like(default)(value)
        if not ok:
            raise click.UsageError(f"--set {item!r}: {param} takes {expected}")
        for settings in [inv.cluster] + [n.settings for n in inv.nodes]:
            settings.checks.setdefault(name, {})[param] = value


def _read_baseline(path: str) -> dict:
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError) as exc:
        raise click.UsageError(f"cannot read baseline {path}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict) or \
            not all(isinstance(entry, dict) for entry in data["nodes"].values()):
        raise click.UsageError(f"{path} is not a k3doctor baseline (`nodes:` must map node -> check -> data)")
    return data["nodes"]


@cli.group("baseline")
def baseline_group():
    """Record a rack's healthy per-node readings, for drift checks (`check --baseline`)."""


@baseline_group.command("record")
@click.option("--nodes", "inventory", metavar="INVENTORY.yaml", help="Inventory (default: this machine).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), required=True,
              help="Baseline YAML file to write.")
@click.option("--accept-unknown-hosts", is_flag=True, help="Accept host keys missing from known_hosts.")
@click.option("--tier", type=click.Choice(["fast", "deep"]), default="fast", show_default=True,
              help="deep: also record the active probes' figures (e.g. a known-good fabric pair).")
def baseline_record_cmd(inventory, output, accept_unknown_hosts, tier):
    """Snapshot what the checks that keep baselines read on every node (the rack should be healthy)."""
    import time

    import yaml

    inv = _inventory(inventory)
    keepers = tuple(c.name for c in select_checks(REGISTRY, tier=tier) if c.record is not None)
    checks = select_checks(REGISTRY, only=keepers)  # + the prerequisites an active probe needs
    report = run_checks(inv, checks, RunOptions(record=True, accept_unknown_hosts=accept_unknown_hosts,
                                                progress=_progress()))
    doc = {"schema": "k3doctor.baseline/1", "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "inventory": inv.path, "nodes": report.records}
    with open(output, "w", encoding="utf-8") as fh:
        yaml.safe_dump(doc, fh, sort_keys=False)
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

    from .rig import Rig, missing_requirements, scenario_names

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
            report = run_checks(inv, checks, RunOptions(progress=_progress()))
            click.echo(render_table(report, checks, verbose=verbose))
    sys.exit(overall(report.results).exit_code)


@cli.command("list")
@click.option("-v", "--verbose", is_flag=True, help="Also show each check's parameters and defaults.")
def list_cmd(verbose):
    """List the registered checks."""
    from tabulate import tabulate

    _load_plugins()
    rows = [(c.name, c.scope, c.tier, c.interaction, c.title) for c in REGISTRY.ordered()]
    click.echo(tabulate(rows, headers=["check", "scope", "tier", "interaction", "what"]))
    if verbose:
        for c in REGISTRY.ordered():
            why = " ".join(c.doc.split("\n\n")[0].split()) if c.doc else c.title
            click.echo(f"\n{c.name}: {why}")
            click.echo(f"  remediation codes: {', '.join(c.remediations) or '-'}")
            for param, default in c.params.items():
                click.echo(f"  {c.name}.{param} = {default!r}")


@cli.command("explain")
@click.argument("code")
def explain_cmd(code):
    """Print what to do about a remediation CODE shown in a report."""
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


def main(argv=None):
    """Entry point: click's usage errors exit 3 (not click's 2, which means inconclusive here)."""
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


if __name__ == "__main__":
    main()
