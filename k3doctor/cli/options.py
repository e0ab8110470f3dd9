"""What the commands share: option declarations (once each), reading the inventory and other inputs as one
line and exit 3 when they cannot be used, and rendering a report with its format's exit code."""
from __future__ import annotations

import math
import sys

import click

from k3doctor.cli import EXIT_USAGE  # noqa: F401  (the commands take it from here)
from k3doctor.deadline import MAX_SECONDS
from k3doctor.inventory.load import check_ssh_config, load_nodes, unset_password_variables
from k3doctor.inventory.types import InventoryError, NodeSourceError
from k3doctor.judging.runner import select_checks
from k3doctor.outputs import OUTPUTS, OutputPath, write_output
from k3doctor.registry import REGISTRY, load_checks


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


def options(*decorators):
    """Several click options as one decorator, in the order given."""
    def apply(fn):
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn
    return apply


NODES_HELP = ("Nodes: an inventory (k3doctor YAML, or an Ansible inventory: ini, YAML, directory) or a node set "
              "(ct[13-14,16-17], @group of the Ansible inventory)")
PRIVATE_OUTPUT = "Write the report here (replaced atomically after the run; 0600: it may hold evidence)."


def nodes_option(default: str):
    return options(
        click.option("--nodes", "inventory", metavar="INVENTORY|NODESET", help=f"{NODES_HELP}{default}"),
        click.option("--ansible-inventory", "ansible_inventory", metavar="PATH", default=None,
                     help="Take the nodes from this Ansible inventory (read by `ansible-inventory --list`); "
                          "--nodes may then be a node set (@group) choosing among its hosts."))


def selection(verb: str, listed: str = ""):
    return options(
        click.option("--only", default="", metavar="NAMES", help=f"Comma-separated checks to {verb}{listed}."),
        click.option("--skip", default="", metavar="NAMES", help="Comma-separated checks to leave out."))


def overrides_option(help_text: str = "Override a parameter."):
    return click.option("--set", "overrides", multiple=True, metavar="CHECK.PARAM=VALUE", help=help_text)


def report_options(output_help: str = PRIVATE_OUTPUT):
    return options(
        click.option("--format", "fmt", type=click.Choice(list(OUTPUTS)), default="table",
                     show_default=True, help="Report format (see README: Monitoring and CI)."),
        click.option("-o", "--output", type=OutputPath(), default="-", help=output_help),
        click.option("-v", "--verbose", is_flag=True, help="Show evidence and passing results."))


QUIET = click.option("-q", "--quiet", is_flag=True,
                     help="No progress on stderr (it is shown only on a terminal anyway).")


WAIVERS = click.option("--waivers", "waivers_path", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                       help="Accepted findings (YAML `waivers:` list: code, node, gpu, reason, ticket, expires), "
                            "added to the inventory's own; see README: CI gate: waivers.")


def accept_unknown_hosts_option(help_text: str = "Accept host keys missing from known_hosts."):
    return click.option("--accept-unknown-hosts", is_flag=True, help=help_text)


def names(value: str) -> tuple:
    """Check names of --only/--skip; a list that names none (``,,,``) is an error, not "every check"."""
    found = tuple(n.strip() for n in (value or "").split(",") if n.strip())
    if value and not found:
        raise click.UsageError(f"{value!r} names no check (see `k3doctor list`)")
    return found


def progress_to(quiet=False):
    """Where a run's progress lines go: the live display on a terminal's stderr (k3doctor/progress.py), else nowhere."""
    from k3doctor import progress

    return progress.note if progress.wanted(quiet) else None


def shown(quiet=False):
    from k3doctor import progress

    return progress.shown(quiet)


def load_plugins():
    """The checks (built-in and plugins), then the platform files checked against them: a platform file with
    an unknown key, a wrong type or a check name that does not exist is exit 3, file:line each."""
    from k3doctor import platforms

    for problem in load_checks():
        click.echo(f"k3doctor: warning: {problem}", err=True)
    problems = platforms.problems(REGISTRY)
    if problems:
        bad_input("invalid platform file:\n" + "\n".join(problems))


def bad_input(message: str):
    """One line and exit 3: input that cannot be used is never a traceback."""
    click.echo(f"k3doctor: {message}", err=True)
    sys.exit(EXIT_USAGE)


def select(only="", skip="", tier="fast", passive_only=False) -> list:
    try:
        checks = select_checks(REGISTRY, only=names(only), skip=names(skip), tier=tier)
    except KeyError as exc:
        raise click.UsageError(f"unknown check(s): {exc.args[0]} (see `k3doctor list`)") from None
    return [c for c in checks if c.interaction == "passive"] if passive_only else checks


def read_inventory(path, logins=False, ansible_inventory=None):
    """Plugins loaded, then the inventory (validated against their parameters) or exit 3;
    ``logins``: also every ``password_env`` variable must be set (not for offline judging)."""
    load_plugins()
    try:
        inv = load_nodes(path, ansible_inventory, REGISTRY)
        check_ssh_config(inv)
        problems = unset_password_variables(inv) if logins else []
        if problems:
            raise InventoryError(problems)
        return inv
    except NodeSourceError as exc:
        bad_input(str(exc))
    except InventoryError as exc:
        bad_input(f"invalid inventory:\n{exc}")


def add_waivers(inv, path) -> None:
    """``--waivers FILE``'s waivers after the inventory's own; a bad file is one line per problem, exit 3."""
    if not path:
        return
    from k3doctor.inventory import waivers
    from k3doctor.inventory.safeyaml import YAMLInputError

    try:
        inv.waivers = tuple(inv.waivers) + waivers.load_file(path, waivers.known_codes(REGISTRY))
    except YAMLInputError as exc:
        bad_input(str(exc))  # file:line: key: message, a line each


def apply_overrides(inv, overrides) -> None:
    """``--set check.param=value`` (k3doctor/inventory/overrides.py); a bad one is a usage error."""
    from k3doctor.inventory.overrides import OverrideError
    from k3doctor.inventory.overrides import apply_overrides as apply

    try:
        apply(inv, overrides, REGISTRY)
    except OverrideError as exc:
        raise click.UsageError(str(exc)) from None


def baseline_of(path):
    from k3doctor.fleet import baseline

    try:
        return baseline.read(path) if path else None
    except baseline.BaselineError as exc:
        raise click.UsageError(str(exc)) from None


def emit(report, checks, fmt, output, verbose, first_screen=""):
    """Render with the registered format; the format also decides the exit code (Nagios: 0-3) and whether
    the file is private (reports hold evidence) or readable by a collector (Prometheus textfile).
    ``first_screen``: lines a table report opens with (triage's most likely cause)."""
    out = OUTPUTS[fmt]
    text = out.render(report, checks, verbose)
    write_output(output, (first_screen + text) if fmt == "table" else text, private=out.private)
    sys.exit(out.exit_code(report))


