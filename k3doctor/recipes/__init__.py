"""Validated launch configurations as data: one YAML file per recipe (reference §16, §17, §26, §30).

A recipe says which platform and image it is for and, per point (one per benchmark concurrency, or a
single point), the environment every rank must have (a value; ``*`` any value; ``<data-plane
interface>``; null: must be unset) and the server arguments (a value; ``*``; ``true``: a flag without a
value; null: must be absent); the *why* of each value; differences that change nothing (``noops``) and
deliberate deviations from the recipe's upstream (``deviations``); the host facts its DRAM arithmetic
assumes (§25). The built-in recipes ship beside this file; a site's own is a file of the same shape
(``cluster.recipe: ./site-recipe.yaml``). A bad file is one ``file:line: key: message`` per problem.
"""
from __future__ import annotations

import copy
import difflib
import functools
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from k3doctor.inventory.safeyaml import FAST_LOADER, SchemaReader, YAMLInputError, compose, pairs, plain
from k3doctor.inventory.safeyaml import read_file as read_yaml_file

ANY = "*"  # must be set, any value
DATA_IF = "<data-plane interface>"  # must name an interface that carries the node's data_ip (§18)
FLAG = True  # an argument given without a value
BUILTIN_DIR = Path(__file__).parent


class RecipeError(YAMLInputError):
    """Every problem of a recipe file (or of the name that should find one), one per line."""


@dataclass(frozen=True)
class Point:
    """One launch configuration of a recipe: what runs at one benchmark concurrency."""

    concurrency: int | None
    env: dict
    args: dict
    client_env: dict = field(default_factory=dict)
    dram_utilization: float | None = None


@dataclass(frozen=True)
class Recipe:
    name: str
    path: str
    platform: str
    image: str | None
    source: str
    aliases: tuple
    points: tuple  # of Point, in file order
    why: dict
    tuning: frozenset
    noops: dict  # name -> {"same": [values], "why": text}
    deviations: dict  # name -> {"upstream": text, "why": text, "points": [conc] or None}
    host: dict
    golden_acceptance_length: dict  # draft tokens -> AL
    gfx: tuple = ()  # the gfx targets its kernels run on (`gfx:`; default: its platform's, §31.3)

    @property
    def concurrencies(self) -> list:
        return [p.concurrency for p in self.points if p.concurrency is not None]

    def point(self, concurrency: int | None = None) -> Point:
        """The point launched at ``concurrency``; a single-point recipe needs none."""
        if concurrency is None:
            if len(self.points) != 1:
                raise ValueError(f"recipe {self.name} has points for concurrency "
                                 f"{', '.join(map(str, self.concurrencies))}: say which one is launched")
            return self.points[0]
        if not self.concurrencies:  # a concurrency asked of a recipe that has none is a mistake, not "any"
            raise ValueError(f"recipe {self.name} has one point, for no particular concurrency: "
                             f"concurrency {concurrency} names none of its points (leave the concurrency out)")
        for p in self.points:
            if p.concurrency == concurrency:
                return p
        raise ValueError(f"recipe {self.name} has no point for concurrency {concurrency} (it has "
                         f"{', '.join(map(str, self.concurrencies))})")


# ----------------------------------------------------------------------------- schema

def _value(v):
    return v is None or isinstance(v, str), "a string (\"*\": any value) or null (must be unset)"


def _arg(v):
    return v is None or v is True or isinstance(v, str), \
        "a string (\"*\": any value), true (a flag without a value) or null (must be absent)"


def _text(v):
    return isinstance(v, str) and v.strip() != "", "a non-empty string"


def _names(v):
    return isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of names"


def _conc(v):
    return isinstance(v, int) and not isinstance(v, bool) and v > 0, "a positive integer"


def _fraction(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1, "a number in (0, 1]"


def _positive(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0, "a positive number"


def _draft_tokens(k):
    """A golden_acceptance_length key: the number of draft tokens (§25), a positive integer as YAML reads it
    (``1.5``, ``-3``, ``true`` and ``x`` are not one; rules look the AL up by the launch's integer count)."""
    return isinstance(k, int) and not isinstance(k, bool) and k > 0, "a positive integer (draft tokens)"


def _platform(v):
    from k3doctor import platforms

    return v in platforms.names(), f"one of {', '.join(platforms.names())}"


POINT_KEYS = {"concurrency": _conc, "env": ("map", _value), "args": ("map", _arg), "client_env": ("map", _value),
              "dram_utilization": _fraction}
TOP_KEYS = {"recipe": _text, "aliases": _names, "platform": _platform, "gfx": _names, "image": _text, "source": _text,
            "extends": _text, "tuning": _names, "why": ("map", _text), "env": ("map", _value),
            "args": ("map", _arg), "client_env": ("map", _value), "points": "points", "noops": "noops",
            "deviations": "deviations", "host": ("map", _positive),
            "golden_acceptance_length": ("map", _positive, _draft_tokens),
            "dram_utilization": _fraction}
NOOP_KEYS = {"same": "list", "why": _text}
DEVIATION_KEYS = {"upstream": _text, "why": _text, "points": "conc-list"}


class _Reader(SchemaReader):
    """A recipe file against TOP_KEYS: its maps of free names, its points, no-ops and deviations."""

    def named(self, vnode, here: str, rule):
        if isinstance(rule, tuple):  # ("map", rule for each value[, rule for each key]): names free unless ruled
            each, key_rule = rule[1], (rule[2] if len(rule) > 2 else None)
            if not isinstance(vnode, yaml.MappingNode):
                self.problem(vnode, here, "expected a mapping")
                return {}
            merged = {}
            for k, v in pairs(vnode):
                if key_rule is not None and not key_rule(plain(k))[0]:
                    self.problem(k, f"{here}.{plain(k)}", f"expected a key that is {key_rule(plain(k))[1]}, "
                                 f"got {plain(k)!r}")
                    continue
                value = plain(v)
                ok, expected = each(value)
                if not ok:
                    self.problem(v, f"{here}.{plain(k)}", f"expected {expected}, got {value!r}")
                    continue
                merged[plain(k)] = value
            return merged
        if rule == "points":
            return self.points(vnode, here)
        if rule in ("noops", "deviations"):
            if not isinstance(vnode, yaml.MappingNode):
                self.problem(vnode, here, "expected a mapping of NAME: {...}")
                return {}
            keys = NOOP_KEYS if rule == "noops" else DEVIATION_KEYS
            return {plain(k): self.mapping(v, f"{here}.{plain(k)}", keys) for k, v in vnode.value}
        if rule == "list":
            value = plain(vnode)
            if not isinstance(value, list) or not all(_value(x)[0] for x in value):
                self.problem(vnode, here, "expected a list of values (strings or null)")
                return []
            return value
        if rule == "conc-list":
            value = plain(vnode)
            if not isinstance(value, list) or not all(_conc(x)[0] for x in value):
                self.problem(vnode, here, "expected a list of concurrencies")
                return []
            return value
        return super().named(vnode, here, rule)

    def points(self, vnode, here: str) -> list:
        if not isinstance(vnode, yaml.SequenceNode) or not vnode.value:
            self.problem(vnode, here, "expected a non-empty list of points (- concurrency: N ...)")
            return []
        out, seen = [], {}
        for i, item in enumerate(vnode.value):
            entry = self.mapping(item, f"{here}[{i}]", POINT_KEYS)
            conc = entry.get("concurrency")
            if conc is None:
                self.problem(item, f"{here}[{i}].concurrency", "missing: every point of a multi-point recipe names its "
                         "concurrency")
                continue
            if conc in seen:
                self.problem(item, f"{here}[{i}].concurrency", f"{conc} is already the point at line {seen[conc]}")
                continue
            seen[conc] = item.start_mark.line + 1
            out.append(entry)
        return out


def parse_recipe(text: str, path: str, resolve=None, fast: bool = False) -> Recipe:
    """The validated recipe in ``text``; ``resolve(name)`` finds the recipe an ``extends:`` names. ``fast``:
    libyaml's parser, for the shipped recipes (valid by test; a user's file gets the line-accurate one)."""
    try:
        root = compose(text, path, fast=fast)
    except YAMLInputError as exc:
        raise RecipeError(exc.problems) from None
    r = _Reader(path)
    if root is None:
        raise RecipeError([f"{path}:1: the recipe file is empty; it needs at least `recipe:` and `env:`"])
    top = r.mapping(root, "", TOP_KEYS)
    base = None
    if top.get("extends"):
        try:
            base = (resolve or builtin)(top["extends"])
        except RecipeError as exc:
            r.problems.append(f"{path}:{_line(root, 'extends')}: extends: {exc.problems[0]}")
    if base is not None and top.get("platform") and top["platform"] != base.platform:
        r.problems.append(f"{path}:{_line(root, 'platform')}: platform: {top['platform']}, but it extends "
                          f"{base.name}, a {base.platform} recipe: a recipe inherits its base's launch, which is "
                          f"for {base.platform} only")
    for key in ("recipe",) + (() if base else ("platform",)):
        if key not in top and not r.problems:
            r.problems.append(f"{path}:1: {key}: missing")
    if top.get("points") and base is not None and base.points and base.points[0].concurrency is not None:
        r.problems.append(f"{path}:{_line(root, 'points')}: points: a recipe that extends a multi-point recipe "
                          "cannot add points of its own")
    if r.problems:
        raise RecipeError(r.problems)
    return _build(top, path, base)


def _line(root, key: str) -> int:
    return next((k.start_mark.line + 1 for k, _ in root.value if k.value == key), 1)


def _build(top: dict, path: str, base: Recipe | None) -> Recipe:
    common_env = {**_common(base, "env"), **top.get("env", {})}
    common_args = {**_common(base, "args"), **top.get("args", {})}
    common_client = {**_common(base, "client_env"), **top.get("client_env", {})}
    if base is not None and base.concurrencies and not top.get("points"):
        # A recipe that extends a multi-point one keeps its points (their per-point values under its own
        # changes): it launches at the same concurrencies, not at one point made of the base's first.
        return _built(top, path, base, tuple(Point(
            concurrency=p.concurrency, env={**p.env, **top.get("env", {})}, args={**p.args, **top.get("args", {})},
            client_env={**p.client_env, **top.get("client_env", {})},
            dram_utilization=top.get("dram_utilization", p.dram_utilization)) for p in base.points))
    raw_points = top.get("points") or [{}]
    points = tuple(Point(concurrency=p.get("concurrency"), env={**common_env, **p.get("env", {})},
                         args={**common_args, **p.get("args", {})},
                         client_env={**common_client, **p.get("client_env", {})},
                         dram_utilization=p.get("dram_utilization", top.get("dram_utilization")))
                   for p in raw_points)
    return _built(top, path, base, points)


def _built(top: dict, path: str, base: Recipe | None, points: tuple) -> Recipe:
    inherit = base.__dict__ if base else {}
    return Recipe(
        name=top["recipe"], path=path, platform=top.get("platform") or inherit.get("platform"),
        image=top.get("image") or inherit.get("image"), source=top.get("source") or inherit.get("source", ""),
        aliases=tuple(top.get("aliases", ())), points=points,
        why={**inherit.get("why", {}), **top.get("why", {})},
        tuning=frozenset(inherit.get("tuning", ())) | frozenset(top.get("tuning", ())),
        noops={**inherit.get("noops", {}), **top.get("noops", {})},
        deviations={**inherit.get("deviations", {}), **top.get("deviations", {})},
        host={**inherit.get("host", {}), **top.get("host", {})},
        golden_acceptance_length={int(k): float(v) for k, v in {
            **inherit.get("golden_acceptance_length", {}), **top.get("golden_acceptance_length", {})}.items()},
        gfx=tuple(top.get("gfx") or inherit.get("gfx") or (_platform_gfx(top.get("platform")
                                                                           or inherit.get("platform")),)))


def _platform_gfx(name: str) -> str:
    from k3doctor import platforms

    return platforms.get(name).gfx


def _common(base: Recipe | None, key: str) -> dict:
    return dict(getattr(base.points[0], key)) if base else {}


# ----------------------------------------------------------------------------- finding a recipe

# The shipped recipes are read once per process: every run's launch rules start from them (the profile names,
# each node's recipe point), and parsing them anew each time cost a run ~0.15 s of its CPU.
def builtin_names() -> dict:
    """{name or alias: file} of the recipes shipped with k3doctor."""
    return dict(_builtin_names())


@functools.cache
def _builtin_names() -> dict:
    out = {}
    for f in sorted(BUILTIN_DIR.glob("*.yaml")):
        out[f.stem] = f
    for f in list(out.values()):
        out.update({alias: f for alias in _aliases(f)})
    return out


def _aliases(f: Path) -> list:
    try:
        return list(yaml.load(f.read_text(), Loader=FAST_LOADER).get("aliases", ()))
    except (OSError, yaml.YAMLError, AttributeError):
        return []


@functools.cache
def _parsed(path: Path) -> Recipe:
    return parse_recipe(path.read_text(), str(path), fast=True)


def _shipped(path: Path) -> Recipe:
    """A shipped recipe, parsed once; each caller gets its own copy (its points' dicts are plain dicts, and an
    edit by one caller must not reach the next run's rules)."""
    return copy.deepcopy(_parsed(path))


def builtin(name: str) -> Recipe:
    """A shipped recipe by its name or alias."""
    names = builtin_names()
    if name not in names:
        close = difflib.get_close_matches(name, list(names), n=1)
        raise RecipeError([f"no recipe {name!r}" + (f" (did you mean '{close[0]}'?)" if close else
                                                     f"; built-in recipes: {', '.join(sorted(names))}")])
    return _shipped(names[name])


def read_file(path: str) -> Recipe:
    try:
        text = read_yaml_file(path, "recipe")
    except YAMLInputError as exc:
        raise RecipeError(exc.problems) from None
    return parse_recipe(text, path)


def looks_like_path(spec: str) -> bool:
    return "/" in spec or spec.endswith((".yaml", ".yml"))


def load(spec: str, relative_to: str | None = None) -> Recipe:
    """``spec`` is a built-in recipe's name (or alias) or a recipe file's path (relative paths from
    ``relative_to``'s directory, the inventory's, when given)."""
    if looks_like_path(spec):
        path = spec
        if relative_to and not os.path.isabs(os.path.expanduser(spec)):
            path = os.path.normpath(os.path.join(os.path.dirname(relative_to), spec))
        return read_file(path)
    return builtin(spec)


def platform_recipes(platform: str) -> list:
    """The shipped recipes for one platform, each once (aliases aside)."""
    return [r for r in (_shipped(f) for f in sorted(BUILTIN_DIR.glob("*.yaml"))) if r.platform == platform]


@functools.lru_cache(maxsize=64)
def cached(spec: str) -> Recipe:
    """:func:`load` once per run (the checks ask per node); ``spec`` is a name or an absolute path."""
    return load(spec)
