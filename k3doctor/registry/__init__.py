"""The check registry: declarations (``@check``, ``remediation()``), parameters and discovery, a module each.

Checks are small declarative units registered with ``@check``; built-in checks live in ``k3doctor.checks`` and
third-party packages add theirs through the ``k3doctor.checks`` entry-point group (pluggy-style discovery, no
pluggy). The names below are the registry's public face, importable from ``k3doctor.registry`` as before the
split into ``parameters`` (what a tunable may be), ``declarations`` (the registry itself) and ``discovery``
(finding checks, plugins and rule tables by name).
"""
from k3doctor.deadline import MAX_SECONDS  # noqa: F401  (a parameter's bound, as importers knew it)
from k3doctor.registry.declarations import (  # noqa: F401
    INTERACTIONS, REGISTRY, SCOPES, TIERS, Check, CheckSettings, Registry, RegistryError, Remediation, check,
    dependency_order, prerequisites_first, remediation,
)
from k3doctor.registry.discovery import (  # noqa: F401
    ENTRY_POINT_GROUP, RULE_TABLES, load_checks, load_rule_tables, rule_rows, rule_table_rows,
)
from k3doctor.registry.parameters import MAX_COUNT, NAME_BOUNDS, Param, as_param, like, whole_number  # noqa: F401
