"""YAML from users (inventory, baseline, ``--set`` values), read so that bad input is a clear line.

PyYAML's safe loader still raises on input no user file needs - a tag (``!!python/...``,
``!custom``), a list as a mapping key, nesting deep enough to exhaust the stack - and silently
keeps the last of two equal keys. :func:`compose` returns the node tree (for line numbers)
after rejecting all of that, plus text that is not UTF-8, control characters and non-finite or
absurd numbers, each as ``file:line: key: message``; :func:`plain` then turns a checked node
into Python values.
"""
from __future__ import annotations

import codecs
import difflib
import math
import os

import yaml
from yaml.constructor import SafeConstructor

from k3doctor import localfiles
from k3doctor.deadline import MAX_MAGNITUDE

FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where PyYAML was built with it
MAX_ALIAS_EXPANSION = 10_000  # values aliases may add: a 289-byte anchor bomb expands to 10**9 (16 s, 1.2 GB)
MAX_DEPTH = 24  # the inventory needs 6 levels (nodes[].checks.<check>.<param>.<key>); baselines a few more
_STD = "tag:yaml.org,2002:"
ALLOWED_TAGS = {_STD + t for t in ("str", "int", "float", "bool", "null", "seq", "map", "timestamp", "merge")}
_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
         (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))


class YAMLInputError(Exception):
    """Every problem found, one per line, as ``file:line: key: message``."""

    def __init__(self, problems: list):
        self.problems = problems
        super().__init__("\n".join(problems))


def decode(data: bytes, path: str) -> str:
    """UTF-8 text (a UTF-8 BOM is dropped); anything else says which encoding it looks like."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            raise YAMLInputError([f"{path}:1: the file is {name}; save it as UTF-8"])
    if b"\x00" in data:
        line = data[:data.index(b"\x00")].count(b"\n") + 1
        raise YAMLInputError([f"{path}:{line}: NUL bytes: the file looks like UTF-16 without a byte order mark; "
                              "save it as UTF-8"])
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise YAMLInputError([f"{path}:{line}: not UTF-8: byte 0x{data[exc.start]:02x} (latin-1 or another legacy "
                              "encoding?); save the file as UTF-8"]) from None


def read_file(path: str, what: str) -> str:
    """The UTF-8 text of the user's file ``path`` (``~`` expanded, a regular file only); YAMLInputError naming
    the file and ``what`` it was to be ("inventory", "recipe") when it cannot be read or decoded."""
    try:
        return decode(localfiles.read_bytes(os.path.expanduser(path)), path)
    except OSError as exc:
        raise YAMLInputError([f"{path}: cannot read {what}: {exc.strerror}"]) from None


def compose(text: str, path: str, fast: bool = False):
    """The checked node tree of ``text`` (None when empty), or YAMLInputError with every problem. ``fast``:
    libyaml's parser where PyYAML has it (ten times faster on a long inventory; its error messages are its
    own): for a read ahead of the real one (k3doctor/judging/connections.py)."""
    loader = FAST_LOADER if fast else yaml.SafeLoader
    try:
        root = yaml.compose(text, Loader=loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f"{mark.line + 1}:{mark.column + 1}" if mark else "1"
        raise YAMLInputError([f"{path}:{line}: YAML syntax error: {exc.problem or exc}"]) from None
    except yaml.YAMLError as exc:
        raise YAMLInputError([f"{path}:1: YAML error: {' '.join(str(exc).split())}"]) from None
    except RecursionError:
        raise YAMLInputError([f"{path}:1: nested too deeply (more than {MAX_DEPTH} levels)"]) from None
    problems = _problems(root, path) if root is not None else []
    if root is not None and not problems and _expanded_size(root) is None:
        problems = [f"{path}:1: aliases (*name) expand to more than {MAX_ALIAS_EXPANSION} values beyond those "
                    "written (write the values out)"]
    if problems:
        raise YAMLInputError(problems)
    return root


def _problems(root, path: str) -> list:
    """Walk the tree once (aliases visited once): tags, keys, duplicates, depth, characters, numbers."""
    problems, seen = [], set()
    stack = [(root, "(top level)", 1)]

    def say(node, where, message):
        problems.append(f"{path}:{node.start_mark.line + 1}: {where}: {message}")

    while stack:
        node, where, depth = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if depth > MAX_DEPTH:
            say(node, where, f"nested too deeply (more than {MAX_DEPTH} levels)")
            continue
        if node.tag not in ALLOWED_TAGS:
            say(node, where, f"YAML tag {node.tag.replace(_STD, '!!')} is not allowed (plain values only)")
            continue
        if isinstance(node, yaml.ScalarNode):
            wrong = _scalar_problem(node)
            if wrong:
                say(node, where, wrong)
        elif isinstance(node, yaml.SequenceNode):
            stack += [(item, f"{where}[{i}]", depth + 1) for i, item in reversed(list(enumerate(node.value)))]
        else:
            keys = {}
            children = []
            for knode, vnode in node.value:
                if not isinstance(knode, yaml.ScalarNode):
                    say(knode, where, "keys must be plain names, not a list or mapping")
                    continue
                child = knode.value if where == "(top level)" else f"{where}.{knode.value}"
                ident = (knode.tag, knode.value)
                if ident in keys:
                    say(knode, child, f"duplicate key (first at line {keys[ident]})")
                    continue
                keys[ident] = knode.start_mark.line + 1
                children += [(knode, child, depth + 1), (vnode, child, depth + 1)]
            stack += reversed(children)
    return by_line(problems, path)


def _expanded_size(root) -> int | None:
    """How many values ``root`` holds once every alias is expanded (each shared node counted each time it is
    used), or None past the written nodes plus MAX_ALIAS_EXPANSION; linear in the written nodes (memoised)."""
    size, distinct, stack = {}, 0, [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in size:
            continue
        kids = [] if isinstance(node, yaml.ScalarNode) else node.value if isinstance(node, yaml.SequenceNode) \
            else [n for pair in node.value for n in pair]
        if not children_done:
            stack.append((node, True))
            stack += [(kid, False) for kid in kids if id(kid) not in size]
            continue
        distinct += 1
        size[id(node)] = 1 + sum(size[id(kid)] for kid in kids)
        if size[id(node)] > distinct + MAX_ALIAS_EXPANSION:
            return None
    return size[id(root)]


def by_line(problems: list, path: str) -> list:
    """``file:line: ...`` problems in file order (stable for problems of one line)."""
    def line(problem: str) -> int:
        head = problem[len(path) + 1:].split(":", 1)[0]
        return int(head) if head.isdigit() else 0
    return sorted(problems, key=line)


def control_character(text: str) -> str | None:
    """What is wrong with ``text`` if it holds a control character (NUL, ESC, ...), else None."""
    bad = next((ch for ch in text if _is_control(ch)), None)
    return None if bad is None else f"control character U+{ord(bad):04X} is not allowed"


def _scalar_problem(node) -> str | None:
    wrong = control_character(node.value)
    if wrong:
        return wrong
    if node.tag == _STD + "timestamp":  # 2027-13-01 looks like a date to YAML, and its reading raises ValueError
        try:
            SafeConstructor().construct_object(node)
        except (ValueError, OverflowError) as exc:
            return f"{node.value[:40]!r} is not a date ({exc})"
    if node.tag in (_STD + "int", _STD + "float"):
        try:
            value = SafeConstructor().construct_object(node)
        except (ValueError, OverflowError):
            return f"number {node.value[:40]!r} is too large"
        if not math.isfinite(value) or abs(value) > MAX_MAGNITUDE:
            return f"expected a finite number of sensible size, got {node.value[:40]!r}"
    return None


def _is_control(ch: str) -> bool:
    code = ord(ch)
    return code < 0x20 and ch not in "\n\t" or 0x7F <= code < 0xA0


def plain(node):
    """Python value of a node tree that :func:`compose` has checked."""
    return SafeConstructor().construct_document(node) if node is not None else None


def pairs(node) -> list:
    """(key, value) node pairs of a mapping, merge keys (``<<: *anchor``) expanded, later keys winning."""
    found = {}
    for k, v in node.value:
        if k.value == "<<":
            for source in (v.value if isinstance(v, yaml.SequenceNode) else [v]):
                for mk, mv in pairs(source):
                    found.setdefault(mk.value, (mk, mv))
        else:
            found.pop(k.value, None)
            found[k.value] = (k, v)
    return list(found.values())


class SchemaReader:
    """Reads a checked node tree against a schema table and collects every problem as ``file:line: key:
    message``, so that a user fixes a file in one pass (the inventory, the recipe files).

    A schema maps each key to its rule: a nested schema (a dict), a function ``value -> (ok, expected)``,
    or a name that the reader's own :meth:`named` reads (a list of nodes, a recipe's points). A key the
    schema does not know is a problem with the closest known key suggested; a bad value is left out."""

    INVALID = object()  # what value() returns for a value it reported

    def __init__(self, path: str):
        self.path, self.problems = path, []

    def problem(self, node, where: str, message: str) -> None:
        line = node.start_mark.line + 1 if node is not None else 1
        self.problems.append(f"{self.path}:{line}: {where}: {message}")

    def mapping(self, node, where: str, schema: dict) -> dict:
        """Validated plain dict of a YAML mapping; bad entries are reported and dropped."""
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, where or "(top level)", "expected a mapping of key: value")
            return {}
        out = {}
        for knode, vnode in pairs(node):
            name = knode.value
            here = f"{where}.{name}" if where else name
            if name not in schema:
                close = difflib.get_close_matches(name, list(schema), n=1)
                self.problem(knode, here, "unknown key" + (f" (did you mean '{close[0]}'?)" if close
                                                           else f"; known keys: {', '.join(schema)}"))
                continue
            value = self.value(vnode, here, schema[name])
            if value is not self.INVALID:
                out[name] = value
        return out

    def value(self, vnode, where: str, rule):
        if isinstance(rule, dict):
            return self.mapping(vnode, where, rule)
        if callable(rule):
            value = plain(vnode)
            ok, expected = rule(value)
            if not ok:
                self.problem(vnode, where, f"expected {expected}, got {value!r}")
                return self.INVALID
            return value
        return self.named(vnode, where, rule)

    def named(self, vnode, where: str, rule: str):
        """A value whose rule is a name this reader knows (a subclass's own structures)."""
        raise NotImplementedError(f"schema rule {rule!r} at {where}")


def load(text: str, path: str):
    """Python value of YAML text: :func:`compose` then :func:`plain`."""
    return plain(compose(text, path))
