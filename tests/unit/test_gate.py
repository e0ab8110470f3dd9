"""The sanity gate's judges on the answer shapes of reference §1, §21 and §22."""
import pytest
from k3rig.model_server import chat, completion

from k3doctor.probes.gate import GateSettings, judge_chat, judge_completion, judge_models
from k3doctor.results import Status

S = GateSettings()
PROMPT = "The capital of France is"


def test_models_lists_the_served_name():
    doc = {"data": [{"id": "moonshotai/Kimi-K3"}]}
    assert judge_models(200, doc, "", "moonshotai/Kimi-K3").status == Status.PASS
    v = judge_models(200, {"data": [{"id": "/models/Kimi-K3"}]}, "", "moonshotai/Kimi-K3")
    assert v.status == Status.FAIL and v.remediation == "GATE-MODEL-NAME"
    assert v.evidence == {"served": ["/models/Kimi-K3"], "client_model": "moonshotai/Kimi-K3"}


@pytest.mark.parametrize("doc", [{}, {"data": "x"}, {"data": [{"name": "k3"}]}, [], None])
def test_a_models_answer_that_is_not_a_model_list_is_an_error_not_a_pass(doc):
    assert judge_models(200, doc, "", "moonshotai/Kimi-K3").status == Status.ERROR


def test_healthy_completion_passes_and_shows_the_text():
    v = judge_completion(PROMPT, 200, completion("healthy", PROMPT), "", S)
    assert v.status == Status.PASS and "Paris" in v.message


@pytest.mark.parametrize("mode,code", [("bang", "GATE-BANG-TOKENS"), ("repeat", "GATE-REPEATED-TOKEN"),
                                       ("flat", "GATE-FLAT-LOGPROBS"), ("nan", "GATE-FLAT-LOGPROBS"),
                                       ("empty", "GATE-EMPTY-ANSWER")])
def test_broken_completions_fail_with_their_cause(mode, code):
    v = judge_completion(PROMPT, 200, completion(mode, PROMPT), "", S)
    assert (v.status, v.remediation) == (Status.FAIL, code)


@pytest.mark.parametrize("status,code", [(400, "GATE-MODEL-NAME"), (404, "GATE-MODEL-NAME"),
                                         (500, "GATE-SERVER-ERROR")])
def test_http_errors_on_a_completion(status, code):
    v = judge_completion(PROMPT, status, None, "Requested model", S)
    assert (v.status, v.remediation) == (Status.FAIL, code)
    assert v.evidence["http_status"] == status


@pytest.mark.parametrize("doc", [{}, {"choices": []}, {"choices": [{"text": 5}]},
                                 {"choices": [{"text": "x", "logprobs": {"top_logprobs": [{"a": "b"}]}}]}])
def test_a_completion_that_is_not_an_openai_answer_is_an_error(doc):
    assert judge_completion(PROMPT, 200, doc, "", S).status == Status.ERROR


def test_a_single_sure_position_is_not_called_flat():
    doc = completion("healthy", PROMPT)
    doc["choices"][0]["logprobs"]["top_logprobs"][0] = {" Paris": -3.0, " a": -3.01}
    assert judge_completion(PROMPT, 200, doc, "", S).status == Status.PASS


def test_chat_with_content_and_stop_passes():
    v = judge_chat(200, chat("healthy", 4096), "", S)
    assert v.status == Status.PASS and "42" in v.message


def test_chat_cut_mid_thought_fails_and_says_max_tokens():
    v = judge_chat(200, chat("chat-cut", 4096), "", S)
    assert (v.status, v.remediation) == (Status.FAIL, "GATE-CHAT-CUT")
    assert v.evidence["finish_reason"] == "length" and v.evidence["content"] == ""


def test_chat_stop_with_empty_content_still_fails():
    doc = chat("healthy", 4096)
    doc["choices"][0]["message"]["content"] = "  "
    assert judge_chat(200, doc, "", S).status == Status.FAIL


@pytest.mark.parametrize("doc", [{}, {"choices": [{}]}, {"choices": [{"message": {"content": 3}}]}])
def test_a_chat_answer_that_is_not_an_openai_answer_is_an_error(doc):
    assert judge_chat(200, doc, "", S).status == Status.ERROR


@pytest.mark.parametrize("status", [401, 403])
def test_credentials_refused_is_not_the_name_trap(status):
    from k3doctor.probes.gate import judge_models

    for v in (judge_completion(PROMPT, status, None, '{"error":"Unauthorized"}', S), judge_chat(status, None, "", S),
              judge_models(status, None, "", "moonshotai/Kimi-K3")):
        assert (v.status, v.remediation) == (Status.FAIL, "GATE-AUTH") and "model name" not in v.message
