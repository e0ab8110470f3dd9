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
# cut to MAX_LINE_CHARS first, and every pattern of SECRET_SHAPES is *linear by shape*: it starts at a
# literal or at the start of a token (a lookbehind), every repeat in it is bounded (``{0,64}``, not
# ``*``) or cannot fail after it (a final ``{16,}``), and a name is read possessively (``{0,64}+``: the
# separator after it is tried once, not at each of its characters). An unanchored ``--?[\w-]*secret`` retries its scan
# from every ``-`` of a line of dashes (one 32 kB line took 141 s). New secret shapes go into this table
# under the same rules; tests/unit/test_redaction_linear.py runs every entry against hostile lines.
MAX_LINE_CHARS = 4096  # as the log parser's cap (parsers.atom_log.MAX_LINE): nothing longer is read

# Every pattern below stays linear on any line (a container prints what it likes; 64 KB of "-" or "a."
# must not cost seconds): a name is matched only from the start of its word (a fixed-width lookbehind, so
# an attempt inside a run of word characters fails at once) up to its first secret word (an atomic group:
# never a second search of the same run), and every other repetition is possessive (``*+``,
# ``++``: nothing is given back, so no attempt rescans what the previous one read). Values are replaced
# whole, however long: a cut at N characters would leave the rest of a long token in the bundle.
_NAME = rf"(?<![\w.-])((?>[\w.-]*?{SECRET_WORDS})[\w.-]*+)"
_QUOTED_OR_BARE = r"(?:(\")[^\"\n]*+\"|(')[^'\n]*+'|[^\s,;'\"}}\]]++)"
SECRET_SHAPES = (
    # (what, pattern, replacement). Shapes from the public secret-scanner rule sets (GitHub's secret
    # scanning token formats, Slack's and Hugging Face's documented prefixes, RFC 3986 userinfo, RFC 7617
    # Basic credentials, PEM private key labels of RFC 7468), written as bounded, linear patterns.
    ("url credentials", re.compile(r"(?<=[A-Za-z0-9])(://[^\s/:@]*+):[^\s/@]++@"), rf"\1:{REDACTED}@"),
    ("authorization header", re.compile(r"(?i)(?<![\w-])((?:proxy-)?authorization['\"]?\s*+[:=]\s*+['\"]?)"
                                        r"(?:(basic|bearer|token|digest|negotiate)\s++)?[^\s'\",]++"),
     rf"\1\2 {REDACTED}"),
    ("cookie header", re.compile(r"(?i)(?<![\w-])((?:set-)?cookie\s*+:\s*+)[^\r\n]++"), rf"\1{REDACTED}"),
    ("NAME=value", re.compile(rf"(?i){_NAME}(['\"]?\s*+[=:]\s*+){_QUOTED_OR_BARE}"),
     lambda m: f"{m[1]}{m[2]}{m[3] or m[4] or ''}{REDACTED}{m[3] or m[4] or ''}"),  # a quoted value keeps its quotes
    ("--name value", re.compile(rf"(?i)(?<![\w-])(--?(?>[\w-]*?{SECRET_WORDS})[\w-]*+)(\s++)(?!-)[^\s'\"]++"),
     rf"\1\2{REDACTED}"),
    # NAME<TAB>value (env listed as a table) and NAME value (aws configure set aws_secret_access_key V): the
    # name joins the secret word with "_" or "-"; after a space a plain lowercase word ("HF_TOKEN is not
    # set") is prose, not a value.
    ("NAME<whitespace>value", re.compile(
        rf"(?i)(?<![\w.-])((?>[\w.-]*?[_-]{SECRET_WORDS})[\w.-]*+|{SECRET_WORDS}[_-][\w.-]*+)"
        r"(\t[ \t]*+|[ ]++(?![a-z]++(?![^\s,;.])))(?![-=:])[^\s'\",;]++"), rf"\1\2{REDACTED}"),
    ("token shapes", re.compile(r"(?<![\w-])(?:gh[pousr]_[A-Za-z0-9]{20,}+|github_pat_[A-Za-z0-9_]{20,}+"
                                r"|xox[abposr]-[A-Za-z0-9-]{8,}+|glpat-[A-Za-z0-9_-]{16,}+"
                                r"|(?:hf|sk)[_-][A-Za-z0-9_-]{16,}+|hf_[A-Za-z0-9]{2,}+(?![\w-])"
                                r"|AKIA[0-9A-Z]{16}(?![0-9A-Z]))"), REDACTED),
    ("bearer", re.compile(r"(?i)\b(Bearer)\s++[A-Za-z0-9._~+/=-]{16,}+"), rf"\1 {REDACTED}"),
)
# Every SECRET_SHAPES match (and a PEM key) holds one of these, lower-cased: a text without any holds no secret
# shape. A new shape adds its literal here (tests/unit/test_saved_secrets.py checks every example against both).
SECRET_TRIGGERS = ("token", "secret", "passw", "apikey", "api_key", "api-key", "accesskey", "access_key", "access-key",
                   "credential", "://", "authorization", "cookie", "ghp_", "gho_", "ghu_", "ghs_", "ghr_",
                   "github_pat_", "xox", "glpat-", "hf_", "hf-", "sk_", "sk-", "akia", "bearer", "private key")
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}?PRIVATE KEY-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}?PRIVATE KEY-----")


# A line (ended by \n or \r: tqdm) longer than the cap, matched from its start only: linear, and no list of lines
_OVERLONG = re.compile(rf"(?<![^\r\n])([^\r\n]{{{MAX_LINE_CHARS}}})[^\r\n]+")


class RedactionTimeout(TimeoutError):
    """Redacting a text did not finish by its deadline (the text is then not used at all)."""


def capped_lines(text: str) -> str:
    """``text`` with every line (``\\n`` or ``\\r`` ends one: tqdm) cut to MAX_LINE_CHARS characters."""
    return text if len(text) <= MAX_LINE_CHARS else _OVERLONG.sub(r"\1", text)


def redact_text(text: str, deadline=None) -> str:
    """Free text (a server log, a command line, a py-spy header) with credential values replaced, whole, lines
    cut to MAX_LINE_CHARS first. ``deadline`` (a ``deadline.Deadline``): RedactionTimeout once it has passed,
    checked between patterns and blocks of lines, so local work on a huge text ends too."""
    return redact_secrets_counted(capped_lines(text), deadline)[0]


def redact_secrets_counted(text: str, deadline=None) -> tuple:
    """(``text`` with credential values replaced, how many were), its lines as they are: a saved reading
    (amd-smi's one-line JSON) is judged again, so it is not cut; each shape stays linear on a line of any
    length (the rules above), so the cost is linear in the text."""
    if deadline is not None and deadline.expired:
        raise RedactionTimeout(f"redacting took longer than the deadline ({deadline.budget_s:g}s)")
    before = text
    text = _redact_private_keys(text)
    found = int(text != before)
    out, pos, block = [], 0, 1 << 14
    while pos < len(text):  # blocks end at a line break: a secret is never split
        end = len(text) if pos + block >= len(text) else (text.rfind("\n", pos, pos + block) + 1 or pos + block)
        piece, pos = text[pos:end], end
        lowered = piece.lower()
        if not any(trigger in lowered for trigger in SECRET_TRIGGERS):
            out.append(piece)  # a pass of `in` instead of eight patterns: a 4 MB kernel log in 0.3 s, not 2 s
            continue
        for _what, pattern, replacement in SECRET_SHAPES:
            if deadline is not None and deadline.expired:
                raise RedactionTimeout(f"redacting took longer than the deadline ({deadline.budget_s:g}s)")
            piece, n = pattern.subn(replacement, piece)
            found += n
        out.append(piece)
    return "".join(out), found


def _redact_private_keys(text: str) -> str:
    """PEM private key blocks (RFC 7468) whole, from BEGIN to END - on one line (a JSON string with \\n escapes)
    or over many; a block without its END is redacted to the end of the text. One pass: linear."""
    if "PRIVATE KEY-----" not in text:
        return text
    out, inside, pos = [], False, 0
    while pos <= len(text):
        if not inside:
            begin = _PEM_BEGIN.search(text, pos)
            if begin is None:
                out.append(text[pos:])
                break
            out.append(text[pos:begin.end()] + REDACTED)
            inside, pos = True, begin.end()
        else:
            end = _PEM_END.search(text, pos)
            if end is None:
                break
            out.append(text[end.start():end.end()])
            inside, pos = False, end.end()
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
