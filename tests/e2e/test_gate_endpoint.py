"""`k3doctor gate` against a real HTTP server process answering in each pattern of §1, §21, §22.

Only the model is faked (k3rig.model_server): the CLI, its HTTP client and the server's HTTP
stack are real.
"""
import json
import select
import subprocess
import sys
import time

import pytest
from k3rig.model_server import FRAMING_TRICKLES

from tests.e2e import cli


@pytest.fixture
def server():
    procs = []

    def start(mode: str) -> str:
        proc = subprocess.Popen([sys.executable, "-m", "k3rig.model_server", "--mode", mode,
                                 "--lifetime", "120"], stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, f"model server ({mode}) did not start"
        return f"http://127.0.0.1:{proc.stdout.readline().strip()}"

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)


def gate(url, *args, timeout=120):
    rc, out, err = cli.k3("gate", "--endpoint", url, "--format", "json", *args, timeout=timeout)
    assert out, err
    doc = json.loads(out)
    return rc, {(r["check"], r["status"], r["remediation"]) for r in doc["results"]}, doc


def test_healthy_server_passes_the_gate(server):
    rc, seen, doc = gate(server("healthy"))
    assert rc == 0 and doc["verdict"] == "READY TO LAUNCH"
    assert {s for _, s, _ in seen} == {"PASS"} and len(doc["results"]) == 5


@pytest.mark.parametrize("mode,step,code", [
    ("bang", "gate-completions", "GATE-BANG-TOKENS"),
    ("repeat", "gate-completions", "GATE-REPEATED-TOKEN"),
    ("flat", "gate-completions", "GATE-FLAT-LOGPROBS"),
    ("empty", "gate-completions", "GATE-EMPTY-ANSWER"),
    ("chat-cut", "gate-chat", "GATE-CHAT-CUT"),
    ("name-mismatch", "gate-models", "GATE-MODEL-NAME"),
    ("http-404", "gate-completions", "GATE-MODEL-NAME"),
    ("http-500", "gate-completions", "GATE-SERVER-ERROR"),
])
def test_each_broken_answer_pattern_fails_with_its_cause(server, mode, step, code):
    rc, seen, _ = gate(server(mode))
    assert rc == 1
    assert (step, "FAIL", code) in seen
    assert {c for c, s, _ in seen if s == "FAIL"} == {step}  # named where it is, nowhere else


def test_client_model_string_that_differs_is_the_400_trap(server):
    rc, seen, doc = gate(server("healthy"), "--model", "/models/Kimi-K3")
    assert rc == 1 and ("gate-models", "FAIL", "GATE-MODEL-NAME") in seen
    assert "moonshotai/Kimi-K3" in doc["results"][0]["message"]


def test_garbage_answers_are_errors_not_passes(server):
    rc, seen, _ = gate(server("garbage"))
    assert rc == 2 and ("gate-models", "ERROR", None) in seen


@pytest.mark.parametrize("mode", ["hang", "trickle"])
def test_a_server_that_never_finishes_answering_ends_by_the_deadline(server, mode):
    url = server(mode)
    started = time.monotonic()
    rc, seen, doc = gate(url, "--deadline", "4")
    took = time.monotonic() - started
    assert rc == 2 and ("gate-models", "ERROR", None) in seen
    assert "deadline" in doc["results"][0]["message"]
    assert took < 60  # the deadline is 4 s; CLI start-up on a loaded box is the rest


@pytest.mark.parametrize("mode", FRAMING_TRICKLES)
def test_the_deadline_holds_against_a_server_trickling_inside_the_http_framing(server, mode):
    url = server(mode)
    started = time.monotonic()
    rc, seen, doc = gate(url, "--deadline", "5")
    took = time.monotonic() - started
    assert rc == 2 and ("gate-models", "ERROR", None) in seen
    assert "deadline" in doc["results"][0]["message"]
    assert took < 30, took  # the deadline is 5 s (+1 s measured in tests/unit/test_endpoint_deadline.py)


def test_nobody_listening_is_one_error_and_the_rest_say_why(server):
    rc, seen, _ = gate("http://127.0.0.1:9")
    assert rc == 2
    assert seen == {("gate-models", "ERROR", None), ("gate-completions", "SKIP", None),
                    ("gate-chat", "SKIP", None)}


def test_a_bad_endpoint_is_a_usage_error():
    rc, _, err = cli.k3("gate", "--endpoint", "ftp://x")
    assert rc == 3 and "http" in err and "Traceback" not in err


def test_explain_knows_the_gate_codes():
    rc, out, _ = cli.k3("explain", "GATE-BANG-TOKENS")
    assert rc == 0 and "§1" in out


def test_a_server_asking_for_an_api_key_is_not_a_name_mismatch(server):
    rc, seen, doc = gate(server("api-key"))
    assert rc == 1 and seen == {("gate-models", "FAIL", "GATE-AUTH"), ("gate-completions", "SKIP", None),
                                ("gate-chat", "SKIP", None)}
    assert doc["nodes"][0]["reachable"] is True and "credentials" in doc["results"][0]["message"]


def test_a_refused_connection_is_not_reachable(server):
    rc, _, doc = gate("http://127.0.0.1:9")
    assert rc == 2 and doc["nodes"] == [{"name": "127.0.0.1:9", "reachable": False, "round_trips": 0,
                                         "error": doc["nodes"][0]["error"]}]
    assert "refused" in doc["nodes"][0]["error"].lower()
