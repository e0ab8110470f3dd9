"""The check registry: declarations (``@check``, ``remediation()``), parameters and discovery, a module each.

Checks are small declarative units registered with ``@check``; built-in checks live in ``k3doctor.checks`` and
third-party packages add theirs through the ``k3doctor.checks`` entry-point group (pluggy-style discovery, no
pluggy). The names below are the registry's public face, importable from ``k3doctor.registry`` as before the
split into ``parameters`` (what a tunable may be), ``declarations`` (the registry itself) and ``discovery``
(finding checks, plugins and rule tables by name).
"""
from k3doctor.deadline import MAX_SECONDS  # a parameter's bound, as importers knew it
from k3doctor.registry.declarations import (
    INTERACTIONS, REGISTRY, SCOPES, TIERS, Check, CheckSettings, Registry, RegistryError, Remediation, check,
    dependency_order, prerequisites_first, remediation,
)
from k3doctor.registry.discovery import (
    ENTRY_POINT_GROUP, RULE_TABLES, load_checks, load_rule_tables, rule_rows, rule_table_rows,
)
from k3doctor.registry.parameters import MAX_COUNT, NAME_BOUNDS, Param, as_param, like, whole_number

__all__ = ["ENTRY_POINT_GROUP", "INTERACTIONS", "MAX_COUNT", "MAX_SECONDS", "NAME_BOUNDS", "REGISTRY",
           "RULE_TABLES", "SCOPES", "TIERS", "Check", "CheckSettings", "Param", "Registry", "RegistryError",
           "Remediation", "as_param", "check", "dependency_order", "like", "load_checks", "load_rule_tables",
           "prerequisites_first", "remediation", "rule_rows", "rule_table_rows", "whole_number"]
