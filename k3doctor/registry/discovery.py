"""Finding what is registered: the built-in checks, entry-point plugins and the rule tables, each by name.

Discovery imports by name, as plugins are found (no import arrow from this layer to the checks or to the flows
whose rule tables it lists): a new module in ``checks/`` is found with no edit anywhere else.
"""
from __future__ import annotations

import importlib
import pkgutil

ENTRY_POINT_GROUP = "k3doctor.checks"
_loaded = False
# Rule tables that name findings besides the checks (triage's log and stack rules, the sanity gate's steps,
# --slurm-drain's, kernel-health's rows): `list` and `explain` load them by name, as the checks are, with no import
# to remember. (family, module): a module's ``RULES`` rows are listed as ``<family> rule <row>``.
RULE_TABLES = (("triage", "k3doctor.rules.triage"), ("triage", "k3doctor.triage.rank_logs"),
               ("triage", "k3doctor.triage.stacks"), ("probes", "k3doctor.probes.gate"),
               ("fleet", "k3doctor.fleet.slurm"), ("kernel-health", "k3doctor.rules.kernel_log"),
               ("watch", "k3doctor.rules.live"))


def load_checks() -> tuple:
    """Import the built-in checks and every entry-point plugin; returns plugin load errors."""
    global _loaded
    errors = []
    if _loaded:
        return ()
    _loaded = True
    builtin = importlib.import_module("k3doctor.checks")  # discovered, as plugins are: no import arrow

    order = getattr(builtin, "ORDER", ())
    names = sorted((m.name for m in pkgutil.iter_modules(builtin.__path__)),
                   key=lambda n: (order.index(n) if n in order else len(order), n))
    for name in names:
        importlib.import_module(f"{builtin.__name__}.{name}")
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as exc:  # a broken plugin must not take the built-in checks down
            errors.append(f"plugin {ep.name} ({ep.value}) failed to load: {exc}")
    return tuple(errors)


def load_rule_tables() -> None:
    """Register the remediation codes of every built-in rule table (see RULE_TABLES)."""
    for _, name in RULE_TABLES:
        importlib.import_module(name)


def rule_table_rows() -> list:
    """(``<family> rule <row>``, remediation code) for every row of a built-in rule table that is rows (a
    module's ``RULES`` of rows with ``name`` and ``remediation``), in table order: what `list -v` shows."""
    found = []
    for family, name in RULE_TABLES:
        rows = getattr(importlib.import_module(name), "RULES", ())
        found += [(f"{family} rule {row.name}", row.remediation) for row in rows
                  if hasattr(row, "name") and hasattr(row, "remediation")]
    return found


def rule_rows(code: str) -> list:
    """The rule rows that give remediation ``code``: what `explain` lists besides the checks."""
    return [row for row, given in rule_table_rows() if given == code]

