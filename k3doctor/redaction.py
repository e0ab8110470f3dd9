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
_FREE_TEXT_SECRETS = (
    (re.compile(rf"(?i)\b([\w.-]*{SECRET_WORDS}[\w.-]*)(['\"]?\s*[=:]\s*['\"]?)([^\s,'\"}}\]]{{1,512}})"),
     rf"\1\2{REDACTED}"),  # NAME=VALUE, 'name': 'value', name: "value"
    (re.compile(rf"(?i)(--?[\w-]*{SECRET_WORDS}[\w-]*)(\s+)(?!-)([^\s'\"]{{1,512}})"), rf"\1\2{REDACTED}"),
    (re.compile(r"\b(?:hf|sk)[_-][A-Za-z0-9_-]{16,}"), REDACTED),  # Hugging Face / OpenAI-style keys anywhere
    (re.compile(r"(?i)\b(Bearer)\s+[A-Za-z0-9._~+/=-]{16,}"), rf"\1 {REDACTED}"),
)


def redact_text(text: str) -> str:
    """Free text (a server log, a command line, a py-spy header) with credential values replaced."""
    for pattern, replacement in _FREE_TEXT_SECRETS:
        text = pattern.sub(replacement, text)
    return text


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
