"""What k3doctor knows: ``list`` (the checks) and ``explain`` (what to do about a finding)."""
from __future__ import annotations

import click

from k3doctor import platforms
from k3doctor.cli.options import load_plugins
from k3doctor.registry import REGISTRY, load_rule_tables, rule_rows, rule_table_rows


@click.command("list")
@click.option("-v", "--verbose", is_flag=True, help="Also show each check's parameters and defaults.")
@click.option("--platform", "platform", type=click.Choice(platforms.names()), default=None,
              help="Only the checks that run on this platform (k3doctor/platforms/*.yaml), after what the platform "
                   "file says: gfx target, GPUs, HBM, fabric, partitions.")
def list_cmd(verbose, platform):
    """List the registered checks."""
    from tabulate import tabulate

    load_plugins()
    checks = platforms.applicable(REGISTRY.ordered(), platform) if platform else REGISTRY.ordered()
    if platform:
        click.echo(platform_summary(platforms.get(platform)) + "\n")
    rows = [(c.name, c.scope, c.tier, c.interaction, c.title) for c in checks]
    click.echo(tabulate(rows, headers=["check", "scope", "tier", "interaction", "what"]))
    if verbose:
        for c in checks:
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


def platform_summary(p) -> str:
    """One platform's file in a line each: what `check` expects of its nodes there."""
    ids = ", ".join(f"{d:#06x}" for d in sorted(p.device_ids)) or "not judged"
    hbm = f"{p.hbm_gib_per_gpu} GiB" if p.hbm_gib_per_gpu else "from the inventory (hbm_gib_per_gpu)"
    params = " ".join(f"{k}={v}" for k, v in p.amdgpu_load_params) or "none"
    return "\n".join([
        f"platform {p.name} ({p.path})",
        f"  gfx target: {p.gfx} (KFD gfx_target_version {p.gfx_target_version}, HSA_OVERRIDE_GFX_VERSION "
        f"{p.hsa_override_gfx_version}); device ids: {ids}",
        f"  {p.gpus_per_node} GPUs per node, HBM per GPU {hbm}, fabric {p.fabric}"
        + (", ifoe before amdgpu" if p.ifoe else ""),
        f"  amdgpu load parameters: {params}; partitions for the engine: "
        + ("/".join(p.tp_partition) if p.tp_partition else "any, alike on every GPU"),
        f"  not run here: {', '.join(sorted(p.not_for_platform)) or '-'}; env rows off: "
        f"{', '.join(sorted(p.env_rules_off)) or '-'}"])


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
