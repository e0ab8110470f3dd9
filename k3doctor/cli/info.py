"""What k3doctor knows: ``list`` (the checks) and ``explain`` (what to do about a finding)."""
from __future__ import annotations

import click

from k3doctor import platforms
from k3doctor.cli.options import load_plugins
from k3doctor.registry import REGISTRY, load_rule_tables, rule_rows, rule_table_rows


@click.command("list")
@click.option("-v", "--verbose", is_flag=True, help="Also show each check's parameters and defaults.")
def list_cmd(verbose):
    """List the registered checks."""
    from tabulate import tabulate

    load_plugins()
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
        click.echo("\nrule rows besides the checks (`k3doctor explain CODE`):")
        for row, code in rule_table_rows():
            click.echo(f"  {row}: {code or '-'}")


@click.command("explain")
@click.argument("code")
def explain_cmd(code):
    """Print what to do about a remediation CODE shown in a report."""
    load_plugins()
    load_rule_tables()
    rem = REGISTRY.remediations.get(code) or REGISTRY.remediations.get(code.upper())
    if rem is None:
        known = ", ".join(sorted(REGISTRY.remediations))
        raise click.UsageError(f"no remediation code {code!r}; known codes: {known}")
    users = [c.name for c in REGISTRY.checks.values() if rem.code in c.remediations] + rule_rows(rem.code)
    click.echo(f"{rem.code}: {rem.title}\n")
    click.echo(rem.text)
    if users:
        click.echo(f"\nRaised by: {', '.join(users)}")



COMMANDS = (list_cmd, explain_cmd)
