"""Sanity gate for a running Kimi-K3 endpoint, before any benchmark (reference §21, §22, §1).

A wrong stepping makes every token ``!`` with HTTP 200 (§1); a client model string that is not the
served name gets 400/404 for every request while the benchmark "completes" (§22); a chat answer cut
by ``max_tokens`` mid-thought has ``content: ''`` and no error (§21). None of these shows in
metrics, so the gate asks the server itself. Orchestration (``run_gate``) is kept apart from the
pure judges, which take an HTTP status and the decoded answer.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

from k3doctor.registry import remediation
from k3doctor.results import Result, Verdict, error, fail, passed, skip
from k3doctor.transport.http import EndpointError, parse_endpoint, request

SERVED_MODEL = "moonshotai/Kimi-K3"  # §17/§22: --served-model-name of the recipe
# Short deterministic prompts with one obvious continuation (§21: "The capital of France is" first).
PROMPTS = ("The capital of France is", "The chemical symbol for gold is", "Monday, Tuesday, Wednesday,")
CHAT_QUESTION = "What is 17 + 25? Reply with the number only."


@dataclass(frozen=True)
class Step:
    """One row of the gate's report (the renderers need only a name)."""

    name: str
    title: str


STEPS = (Step("gate-models", "/v1/models lists the served name"),
         Step("gate-completions", "short completions are real text"),
         Step("gate-chat", "a chat answer ends with finish_reason stop and content"))


@dataclass(frozen=True)
class GateSettings:
    model: str = SERVED_MODEL  # what clients (benchmarks, lm_eval) will send as `model`
    completion_max_tokens: int = 16  # §21
    chat_max_tokens: int = 4096  # §21: thinking needs room (32 -> content ''); < ~3500 is suspect
    logprobs: int = 5
    flat_spread_nats: float = 0.1  # a position whose top-k logprobs lie within this is "flat"
    flat_share: float = 0.5  # this share of flat positions = near-uniform output
    min_repeat_tokens: int = 4  # one token repeated at least this often and nothing else
    deadline_s: float = 300.0  # the whole gate
    request_timeout_s: float = 180.0  # one request (a 4096-token chat at ~30 ms/token is ~2 min)


NAME = remediation("GATE-MODEL-NAME", "clients send a model name the server does not serve", """
The server validates the `model` field: anything but the served name gets HTTP 400 (`Requested model
'<x>' does not match server model '<y>'`) or 404, and a benchmark then "completes" in under a second
with every metric 0.00 (reference §22). Launch with `--served-model-name moonshotai/Kimi-K3` and make
every client (benchmark_serving/aiperf `--served-model-name`/`--model`, lm_eval `model=`) send exactly
the name `GET /v1/models` lists (trailing slashes are stripped; a local path is not a name).""")
BANG = remediation("GATE-BANG-TOKENS", "every token is '!': code objects of the wrong stepping", """
Output made only of `!` with HTTP 200 is the stepping signature (reference §1): A0 silicon running B0
code objects without the rocjitsu translation (or a wrong prefix, §2). Any benchmark number from this
server is void. Check the declared stepping, run `k3doctor check --only rocjitsu-store`, fix the
translation prefix/env, relaunch, and run the gate again.""")
REPEAT = remediation("GATE-REPEATED-TOKEN", "the answer is one token repeated", """
A deterministic prompt answered with one token over and over is broken numerics, not a model quirk
(reference §21 sanity rules: reject repeated-token answers). Suspect the stepping/translation (§1, §2),
a kernel or patch fault (§14), or a wrong checkpoint; do not benchmark. Compare with the recipe's
expected answer (` Paris. The Eiffel Tower is located in Paris.`).""")
FLAT = remediation("GATE-FLAT-LOGPROBS", "logprobs are near-uniform or not finite", """
A healthy model is sure of ` Paris`; near-uniform top-k logprobs (or NaN/inf ones) mean the logits are
noise (reference §21: logprobs not near-uniform, reject non-finite). Same suspects as repeated tokens:
stepping/translation (§1, §2), patch integrity (§14), checkpoint; do not benchmark.""")
EMPTY = remediation("GATE-EMPTY-ANSWER", "the completion is empty", """
A short deterministic prompt came back with no text (reference §21: reject empty answers). Look at the
server log for the request (`k3doctor triage`), then at the sanity of the engine (§1, §14).""")
CUT = remediation("GATE-CHAT-CUT", "the chat answer has no content: max_tokens ran out mid-thought", """
Kimi-K3 thinks first: the chain of thought goes to `reasoning_content`, the answer to `content`. When
`max_tokens` runs out mid-thought, `content` is '' with `finish_reason: length` and no error, and lm_eval
scores 0 (reference §21). Give chat clients max_tokens of at least ~3500 (validated: 12288 with
max_length 16384, temperature 0), and make sure `--max-model-len` does not cap it (§17).""")
AUTH = remediation("GATE-AUTH", "the server refuses requests without credentials (HTTP 401/403)", """
The server asks for credentials (launched with `--api-key`, or behind an authenticating proxy): every
request without them gets HTTP 401/403. That is not a model-name mismatch and says nothing about the
model's answers: the gate sends no key, so it cannot judge this server. Ask it from where the key is not
needed, or check the answers by hand with the key (`curl -H "Authorization: Bearer $KEY" .../v1/models`).""")
SERVER = remediation("GATE-SERVER-ERROR", "the server answers with an HTTP error", """
The endpoint answered 5xx (or something that is not an OpenAI answer). Read node0's server log
(`k3doctor triage`); a ModelRunner that died while HTTP stays up looks like this (reference §16, §20).""")


AUTH_STATUSES = (401, 403, 407)  # credentials asked for or refused: never the name trap


def _auth_verdict(status: int, body_head: str) -> Verdict:
    return fail(f"HTTP {status}: the server refuses requests without credentials (an API key); the gate "
                "cannot judge its answers", evidence={"http_status": status, "body": body_head}, remediation=AUTH)


def _status_verdict(status: int, body_head: str) -> Verdict | None:
    """Verdict for a non-2xx answer (None for 2xx): 401/403 credentials, any other 4xx the name trap (§22),
    5xx a server fault."""
    if 200 <= status < 300:
        return None
    if status in AUTH_STATUSES:
        return _auth_verdict(status, body_head)
    if 400 <= status < 500:
        return fail(f"HTTP {status}: the server refuses the request (model name mismatch, §22)",
                    evidence={"http_status": status, "body": body_head}, remediation=NAME)
    return fail(f"HTTP {status} from the server", evidence={"http_status": status, "body": body_head},
                remediation=SERVER)


def served_names(doc) -> list:
    """The ids ``GET /v1/models`` lists; ValueError when the answer is not an OpenAI model list."""
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in data):
        raise ValueError("answer is not an OpenAI model list (`data[].id`)")
    return [m["id"] for m in data]


def judge_models(status: int, doc, body_head: str, model: str) -> Verdict:
    """§21 step 1 / §22: the endpoint answers and serves exactly the name clients send."""
    if status in AUTH_STATUSES:
        return _auth_verdict(status, body_head)
    if not 200 <= status < 300:
        return fail(f"GET /v1/models answered HTTP {status}", evidence={"http_status": status, "body": body_head},
                    remediation=SERVER)
    try:
        names = served_names(doc)
    except ValueError as exc:
        return error(f"GET /v1/models: {exc}", evidence={"body": body_head})
    if model not in names and model.rstrip("/") not in names:
        return fail(f"server serves {names or 'no model'}, clients send {model!r}: every request will get "
                    "HTTP 400/404", evidence={"served": names, "client_model": model}, remediation=NAME)
    return passed(f"serves {model!r}", evidence={"served": names})


def _flat_share(top_logprobs: list, spread: float) -> float:
    """Share of positions whose top-k (k >= 2) logprobs lie within ``spread`` nats of each other."""
    positions = [list(p.values()) for p in top_logprobs if isinstance(p, dict) and len(p) >= 2]
    if not positions:
        return 0.0
    return sum(1 for vals in positions if max(vals) - min(vals) <= spread) / len(positions)


def _completion_parts(doc):
    """(text, tokens, token logprobs, top logprobs) of choices[0]; ValueError when absent or mistyped."""
    try:
        choice = doc["choices"][0]
        text = choice["text"]
    except (KeyError, IndexError, TypeError):
        raise ValueError("answer lacks choices[0].text") from None
    if not isinstance(text, str):
        raise ValueError("choices[0].text is not a string")
    lp = choice.get("logprobs") or {}
    if not isinstance(lp, dict):
        raise ValueError("choices[0].logprobs is not an object")
    tokens = [t for t in lp.get("tokens") or [] if isinstance(t, str)]
    values = [v for v in lp.get("token_logprobs") or [] if isinstance(v, (int, float)) and not isinstance(v, bool)]
    top = [t for t in lp.get("top_logprobs") or [] if isinstance(t, dict)]
    top_values = [v for t in top for v in t.values()]
    if any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in top_values):
        raise ValueError("top_logprobs holds non-numbers")
    return text, tokens, values + top_values, top


def judge_completion(prompt: str, status: int, doc, body_head: str, settings: GateSettings) -> Verdict:
    """§21 step 2: not all `!`, not one repeated token, not empty, logprobs finite and not near-uniform."""
    bad = _status_verdict(status, body_head)
    if bad:
        return bad
    try:
        text, tokens, logprobs, top = _completion_parts(doc)
    except ValueError as exc:
        return error(f"completion of {prompt!r}: {exc}", evidence={"body": body_head})
    evidence = {"prompt": prompt, "text": text[:200]}
    stripped = text.strip()
    if not stripped:
        return fail(f"{prompt!r} -> empty completion", evidence=evidence, remediation=EMPTY)
    if set(stripped) == {"!"}:
        return fail(f"{prompt!r} -> {stripped[:24]!r}: every token is '!' (wrong stepping / translation, §1)",
                    evidence=evidence, remediation=BANG)
    words = [t for t in (tokens or stripped.split()) if t.strip()]
    if len(words) >= settings.min_repeat_tokens and len(set(words)) == 1:
        return fail(f"{prompt!r} -> {words[0]!r} repeated {len(words)} times", evidence=evidence,
                    remediation=REPEAT)
    if any(not math.isfinite(v) for v in logprobs):
        return fail(f"{prompt!r}: non-finite logprobs", evidence=evidence, remediation=FLAT)
    share = _flat_share(top, settings.flat_spread_nats)
    if share >= settings.flat_share:
        evidence["flat_positions"] = round(share, 2)
        return fail(f"{prompt!r}: top-{settings.logprobs} logprobs near-uniform at {share:.0%} of positions",
                    evidence=evidence, remediation=FLAT)
    return passed(f"{prompt!r} -> {stripped[:40]!r}", evidence=evidence)


def judge_chat(status: int, doc, body_head: str, settings: GateSettings) -> Verdict:
    """§21 reasoning pitfall: finish_reason must be `stop` and `content` non-empty."""
    bad = _status_verdict(status, body_head)
    if bad:
        return bad
    try:
        choice = doc["choices"][0]
        message = choice["message"]
        content = message.get("content") or ""
        finish = choice.get("finish_reason")
    except (KeyError, IndexError, TypeError, AttributeError):
        return error("chat answer lacks choices[0].message", evidence={"body": body_head})
    if not isinstance(content, str):
        return error("chat answer's content is not a string", evidence={"body": body_head})
    reasoning = message.get("reasoning_content") or ""
    evidence = {"finish_reason": finish, "content": content[:200], "max_tokens": settings.chat_max_tokens,
                "reasoning_chars": len(reasoning) if isinstance(reasoning, str) else None}
    if finish != "stop" or not content.strip():
        return fail(f"chat answer has {'no' if not content.strip() else 'cut'} content "
                    f"(finish_reason {finish!r}, max_tokens {settings.chat_max_tokens})",
                    evidence=evidence, remediation=CUT)
    return passed(f"chat answer {content.strip()[:40]!r}, finish_reason stop", evidence=evidence)


def _ask(endpoint, method, path, payload, deadline, settings):
    """(status, decoded JSON or None, head of the body) of one bounded request."""
    resp = request(endpoint, method, path, payload,
                   deadline=min(deadline, time.monotonic() + settings.request_timeout_s))
    head = resp.body[:300].decode("utf-8", "replace")
    doc = None
    if 200 <= resp.status < 300:
        try:
            doc = resp.json()
        except EndpointError:
            doc = None  # judged as "not an OpenAI answer" below
    return resp.status, doc, head


UNREACHABLE = "unreachable"  # evidence key of the gate-models ERROR when nothing answered


def unreachable(results: list) -> dict:
    """{endpoint: why} when the endpoint did not answer at all (the report says ``reachable: false``)."""
    return {r.node: r.evidence[UNREACHABLE] for r in results if r.check == "gate-models" and UNREACHABLE in r.evidence}


def run_gate(url: str, settings: GateSettings = GateSettings()) -> tuple:
    """(endpoint label, results): ask the server, judge each answer. Unreachable -> ERROR, never PASS."""
    endpoint = parse_endpoint(url)
    where = endpoint.label
    deadline = time.monotonic() + settings.deadline_s
    results = []

    def record(step: str, verdict: Verdict):
        results.append(Result(step, where, verdict.status, verdict.message, evidence=verdict.evidence,
                              remediation=verdict.remediation))

    try:
        status, doc, head = _ask(endpoint, "GET", "/v1/models", None, deadline, settings)
    except EndpointError as exc:  # named once; the other steps say why they did not run
        record("gate-models", error(f"endpoint not answering: {exc}", evidence={UNREACHABLE: str(exc)}))
        for step in STEPS[1:]:
            record(step.name, skip("not evaluated: the endpoint does not answer"))
        return where, results
    record("gate-models", judge_models(status, doc, head, settings.model))
    if status in AUTH_STATUSES:  # every request would be refused the same way: named once
        for step in STEPS[1:]:
            record(step.name, skip(f"not evaluated: the server answered HTTP {status} (credentials)"))
        return where, results
    # Ask with the name the server serves, so a name mismatch is named once (above) and the sanity of
    # the answers is still judged.
    try:
        model = served_names(doc)[0] if settings.model not in served_names(doc) else settings.model
    except (ValueError, IndexError):
        model = settings.model
    for prompt in PROMPTS:
        payload = {"model": model, "prompt": prompt, "max_tokens": settings.completion_max_tokens,
                   "temperature": 0, "logprobs": settings.logprobs}
        try:
            record("gate-completions", judge_completion(
                prompt, *_ask(endpoint, "POST", "/v1/completions", payload, deadline, settings), settings))
        except EndpointError as exc:
            record("gate-completions", error(f"completion of {prompt!r}: {exc}"))
    refused = [r for r in results[1:] if "http_status" in r.evidence]
    if refused:  # the server refuses requests: that is the finding, a chat request would only repeat it
        record("gate-chat", skip(f"not evaluated: completions answered HTTP {refused[0].evidence['http_status']}"))
        return where, results
    payload = {"model": model, "messages": [{"role": "user", "content": CHAT_QUESTION}],
               "max_tokens": settings.chat_max_tokens, "temperature": 0}
    try:
        record("gate-chat", judge_chat(*_ask(endpoint, "POST", "/v1/chat/completions", payload, deadline,
                                             settings), settings))
    except EndpointError as exc:
        record("gate-chat", error(f"chat completion: {exc}"))
    return where, results
