"""What a saved copy of a reading may hold: secrets stay on the node.

A reading spec declares, in its ``saved`` field, which values its judges need; ``--save-readings``
keeps those and replaces everything else by :data:`REDACTED` (names stay, so the file still says
what was there). A new reading gets this by declaring ``saved=`` - or, for Docker, by the
default below - never by special cases in the snapshot code.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

REDACTED = "<redacted>"
_ENV_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)")
# A name that says its value is a credential (HF_TOKEN, api_key, --password, AWS_SECRET_ACCESS_KEY, ...);
# "tokens"/"tokenizer" are not ("max_num_batched_tokens" is a number everybody may read).
SECRET_WORDS = r"(?:token(?![a-z])|secret|passw(?:or)?d|api[-_]?key|access[-_]?key|credential)"

# Redaction runs on whatever a container printed, so it must cost linear time on any text: lines are
# cut to MAX_LINE_CHARS first, and every pattern of FREE_TEXT_SECRETS is *linear by shape*: it starts at a
# literal or at the start of a token (a lookbehind), every repeat in it is bounded (``{0,64}``, not
# ``*``) or cannot fail after it (a final ``{16,}``), and a name is read possessively (``{0,64}+``: the
# separator after it is tried once, not at each of its characters). An unanchored ``--?[\w-]*secret`` retries its scan
# from every ``-`` of a line of dashes (one 32 kB line took 141 s). New secret shapes go into this table
# under the same rules; tests/unit/test_redaction_linear.py runs every entry against hostile lines.
MAX_LINE_CHARS = 4096  # as the log parser's cap (parsers.atom_log.MAX_LINE): nothing longer is read
MAX_NAME_TAIL = 64  # characters a credential's name may carry after its secret word (`_ACCESS_KEY_ID`)
MAX_VALUE = 512
_VALUE = rf"([^\s,'\"}}\]]{{1,{MAX_VALUE}}})"
FREE_TEXT_SECRETS = (
    # NAME=VALUE, 'name': 'value', name: "value" (the name's head before its secret word is left as it is)
    (re.compile(rf"(?i)({SECRET_WORDS}[\w.-]{{0,{MAX_NAME_TAIL}}}+)"
                rf"(['\"]?[ \t]{{0,16}}[=:][ \t]{{0,16}}['\"]?){_VALUE}"),
     rf"\1\2{REDACTED}"),
    # --password VALUE, -api-key VALUE: a flag (a token that starts with - and holds a secret word)
    (re.compile(rf"(?i)(?<![\w-])(--?[\w-]{{0,{MAX_NAME_TAIL}}}?{SECRET_WORDS}[\w-]{{0,{MAX_NAME_TAIL}}}+)"
                rf"([ \t]{{1,16}})(?!-)([^\s'\"]{{1,{MAX_VALUE}}})"), rf"\1\2{REDACTED}"),
    (re.compile(r"\b(?:hf|sk)[_-][A-Za-z0-9_-]{16,}"), REDACTED),  # Hugging Face / OpenAI-style keys anywhere
    (re.compile(r"(?i)\b(Bearer)[ \t]{1,16}[A-Za-z0-9._~+/=-]{16,}"), rf"\1 {REDACTED}"),
)
# A line (ended by \n or \r: tqdm) longer than the cap, matched from its start only: linear, and no list of lines
_OVERLONG = re.compile(rf"(?<![^\r\n])([^\r\n]{{{MAX_LINE_CHARS}}})[^\r\n]+")


class RedactionTimeout(TimeoutError):
    """Redacting a text did not finish by its deadline (the text is then not used at all)."""


def capped_lines(text: str) -> str:
    """``text`` with every line (``\\n`` or ``\\r`` ends one: tqdm) cut to MAX_LINE_CHARS characters."""
    return text if len(text) <= MAX_LINE_CHARS else _OVERLONG.sub(r"\1", text)


def redact_text(text: str, deadline=None) -> str:
    """Free text (a server log, a command line, a py-spy header) with credential values replaced, lines
    cut to MAX_LINE_CHARS first. ``deadline`` (a ``deadline.Deadline``): RedactionTimeout once it has passed,
    checked between patterns and blocks of lines, so local work on a huge text ends too."""
    text = capped_lines(text)
    out, pos, block = [], 0, 1 << 20
    while pos < len(text):  # blocks end at a line break: a secret is never split
        end = len(text) if pos + block >= len(text) else (text.rfind("\n", pos, pos + block) + 1 or pos + block)
        piece, pos = text[pos:end], end
        for pattern, replacement in FREE_TEXT_SECRETS:
            if deadline is not None and deadline.expired:
                raise RedactionTimeout(f"redacting took longer than the deadline ({deadline.budget_s:g}s)")
            piece = pattern.sub(replacement, piece)
        out.append(piece)
    return "".join(out)


@dataclass(frozen=True)
class EnvValues:
    """Output of ``env`` (NAME=VALUE lines): every name is kept, values only of ``names``.

    A line that is not NAME=VALUE continues a multi-line value and is dropped with it."""

    names: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "names", tuple(self.names))

    def redact(self, reading):
        lines = []
        for line in reading.stdout.splitlines():
            match = _ENV_LINE.fullmatch(line)
            if match:
                name = match.group(1)
                lines.append(line if name in self.names else f"{name}={REDACTED}")
        stdout = "\n".join(lines) + ("\n" if lines else "")
        return dataclasses.replace(reading, stdout=stdout)


@dataclass(frozen=True)
class DockerFields:
    """A Docker reading: container fields and event attributes kept verbatim; every other field's
    value (command lines, labels, mounts, environment) is redacted, its name kept."""

    containers: tuple = ("Id", "Names", "Image", "ImageID", "State", "Status", "Created")
    events: tuple = ("Type", "Action", "status", "id", "from", "scope", "time", "timeNano")
    actor_attributes: tuple = ("name", "image")

    def __post_init__(self):
        for name in ("containers", "events", "actor_attributes"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def redact(self, reading):
        return dataclasses.replace(reading, containers=[self._only(c, self.containers) for c in reading.containers],
                                   events=[self._event(e) for e in reading.events])

    @staticmethod
    def _only(entry, keep: tuple):
        """``entry`` with the ``keep`` fields; any other field's value redacted (a mapping keeps its keys)."""
        if not isinstance(entry, dict):
            return REDACTED
        return {k: v if k in keep else {n: REDACTED for n in v} if isinstance(v, dict) else REDACTED
                for k, v in entry.items()}

    def _event(self, event):
        out = self._only(event, self.events)
        actor = event.get("Actor") if isinstance(event, dict) else None
        if isinstance(actor, dict):
            attributes = actor.get("Attributes")
            out["Actor"] = {"ID": actor.get("ID"),
                            "Attributes": self._only(attributes, self.actor_attributes)
                            if isinstance(attributes, dict) else attributes}
        return out


KINDS = {cls.__name__: cls for cls in (EnvValues, DockerFields)}  # for reading saved specs back
