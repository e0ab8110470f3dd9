"""``--set CHECK.PARAM=VALUE``: a check parameter for this run, checked against its declaration and
applied to the cluster's and every node's settings (as the inventory's ``checks:`` would)."""
from __future__ import annotations

from k3doctor.inventory import safeyaml
from k3doctor.registry import REGISTRY


class OverrideError(ValueError):
    """One ``--set`` item that names no declared parameter or gives it a value it does not accept."""


def apply_overrides(inv, overrides, registry=None) -> None:
    """Apply each ``CHECK.PARAM=VALUE`` to ``inv``; the first bad one raises :class:`OverrideError`."""
    registry = registry or REGISTRY
    for item in overrides:
        if not isinstance(item, str):  # saved readings and node documents carry them too: damaged ones
            raise OverrideError(f"--set {item!r}: expected CHECK.PARAM=VALUE text")
        key, sep, raw = item.partition("=")
        name, dot, param = key.rpartition(".")
        chk = registry.checks.get(name)
        if not (sep and dot) or chk is None or param not in chk.params:
            raise OverrideError(f"--set {item!r}: expected CHECK.PARAM=VALUE with a parameter from "
                                "`k3doctor list -v`")
        try:
            value = raw if isinstance(chk.params[param], str) else safeyaml.load(raw, "value")
            wrong = safeyaml.control_character(value) if isinstance(value, str) else None
        except safeyaml.YAMLInputError as exc:
            wrong = exc.problems[0].split(": ", 2)[-1]
        if wrong:
            raise OverrideError(f"--set {item!r}: {raw!r} is not a valid value ({wrong})")
        expected = chk.param_problem(param, value, [n.name for n in inv.nodes])
        if expected:
            raise OverrideError(f"--set {item!r}: {param} takes {expected}")
        for settings in [inv.cluster] + [n.settings for n in inv.nodes]:
            settings.checks.setdefault(name, {})[param] = value
