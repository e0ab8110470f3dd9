"""`k3doctor recipe list | diff`: the recipes k3doctor knows (k3doctor/recipes/*.yaml) and the dry-run diff
of a launch against one (k3doctor/recipes/diff.py). cli.py only adds this group."""
from __future__ import annotations

import sys

import click

from k3doctor.cli.options import Seconds

EXIT_USAGE = 3


@click.group("recipe")
def recipe_group():
    """The validated launch configurations (recipes) and the diff of a launch against one."""


@recipe_group.command("list")
def list_cmd():
    """Every shipped recipe: platform, points (concurrencies), source."""
    from k3doctor import recipes

    for path in sorted(recipes.BUILTIN_DIR.glob("*.yaml")):
        r = recipes.read_file(str(path))
        points = ", ".join(map(str, r.concurrencies)) or "one point"
        aliases = f" (alias {', '.join(r.aliases)})" if r.aliases else ""
        click.echo(f"{r.name}{aliases}: platform {r.platform}; concurrency {points}; {r.source}")


@recipe_group.command("diff")
@click.option("--recipe", "recipe_spec", default=None, metavar="NAME|PATH",
              help="A shipped recipe (`k3doctor recipe list`) or a recipe file (with --nodes, default: the "
                   "inventory's cluster.recipe and cluster.concurrency).")
@click.option("--concurrency", type=click.IntRange(1, 1_000_000), default=None, metavar="N",
              help="The recipe point to compare with (default: every point, and say which matches best).")
@click.option("--script", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="A launch script to resolve. ITS SHELL CODE RUNS, under bash in a bubblewrap sandbox (`bwrap`: "
                   "no network, this machine's files out of its reach, writes to a private scratch that vanishes, "
                   "limits on processes, file size, CPU and memory, everything it started killed at the end), with "
                   "your environment (set what its harness sets, e.g. CONC=8) and bounded by --timeout; a few text "
                   "tools (coreutils, awk, sed, grep, bc, jq) run as themselves, every other program (the model "
                   "server, docker, srun, downloads, curl, sleep, aiperf), by any name or path, is recorded with "
                   "its argv and environment instead of run. Without bwrap: exit 3.")
@click.option("--nodes", "inventory", default=None, metavar="INVENTORY|NODESET",
              help="Compare the model server running on each node (its argv and environment, read from the "
                   "process wherever it runs: Docker, Slurm/pyxis, bare; values of variables no rule names stay "
                   "on the node). Exit 2 where a node could not be read or runs no server.")
@click.option("--timeout", type=Seconds(), default=30, show_default=True, metavar="S",
              help="The script is killed (its whole process group) after this long; with --nodes, each node's "
                   "read ends by then.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def diff_cmd(recipe_spec, concurrency, script, inventory, timeout, fmt):
    """Every server flag and environment variable of a launch against a recipe point: each difference
    once (missing, extra, other value) with the recipe's why, no-ops and declared deviations listed as
    such, the arithmetic rules (DRAM per rank, staging chunks, acceptance length, ...) with their numbers.
    Exit 0 identical (no-ops and deviations aside), 1 a difference that matters, 2 not read (--nodes: a
    node; --script: a bound of the sandbox cut the script short), 3 bad input."""
    from k3doctor import recipes
    from k3doctor.recipes import diff as recipe_diff

    if (script is None) == (inventory is None):
        raise click.UsageError("give one of --script FILE or --nodes INVENTORY")
    try:
        code, text = recipe_diff.run(recipe_spec, concurrency, script, fmt, timeout, nodes=inventory)
    except recipes.RecipeError as exc:
        click.echo("\n".join(f"k3doctor: {p}" for p in exc.problems), err=True)
        sys.exit(EXIT_USAGE)
    except recipe_diff.DiffInputError as exc:
        click.echo(f"k3doctor: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    click.echo(text, nl=False)
    sys.exit(code)
