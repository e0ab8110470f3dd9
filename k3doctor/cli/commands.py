"""The command group: every command of the command line, wired to the module that declares it."""
from __future__ import annotations

import click

from k3doctor import __version__
from k3doctor.cli import info, oncall, readings, recipe, runs, watch


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="k3doctor")
def cli():
    """Pre-launch doctor for Kimi-K3 on gfx1250 (MI455) wide-EP racks and MI355X TP8 AgentX nodes.

    Runs a registry of checks over SSH on every node and says, before a 25-minute cold
    start, whether the rack is ready to launch - naming the node and GPU at fault.
    """


for _command in (*runs.COMMANDS, *oncall.COMMANDS, *watch.COMMANDS, recipe.recipe_group, *readings.COMMANDS,
                 *info.COMMANDS):
    cli.add_command(_command)
