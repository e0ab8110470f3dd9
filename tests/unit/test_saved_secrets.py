"""Saved readings keep what the judges need and nothing else (issue 9 §4): secrets stay on the node."""
import json

import pytest

from k3doctor.gather import snapshot
from k3doctor.judging.runner import RunReport
from k3doctor.readings import Command, CommandReading, Docker, DockerReading, Unavailable
from k3doctor.redaction import REDACTED, SECRET_SHAPES, EnvValues, redact_secrets_counted, redact_text

ENV = ("PATH=/usr/bin\nHF_TOKEN=hf_SECRETSECRET\nLD_LIBRARY_PATH=/app/rjprefix/lib:/opt/rocm/lib\n"
       "MULTI=first line\nsecond line of a secret value\nHSA_TOOLS_LIB=/app/rjprefix/lib/libhsa_hotswap_rocjitsu.so\n")
CONTAINERS = [
    {"Id": "f00", "Names": ["/k3ep16"], "Image": "rocm/fw", "State": "running", "Status": "Up 1 h", "Created": 1,
     "Command": "sleep infinity", "Labels": {"owner": "k3"}},
    {"Id": "ba5", "Names": ["/sglang-bench"], "Image": "lmsys/sglang", "State": "running", "Status": "Up", "Created": 2,
     "Command": "python -m sglang --api-key sk-SECRETSECRET", "Labels": {"token": "lbl-SECRETSECRET"},
     "Mounts": [{"Source": "/home/alice/.cache/SECRETSECRET"}]},
]
EVENTS = [{"Type": "container", "Action": "create", "time": 5, "timeNano": 5_000_000_000,
           "Actor": {"ID": "ba5", "Attributes": {"name": "sglang-bench", "image": "lmsys/sglang",
                                                 "token": "lbl-SECRETSECRET"}}}]


def dumped(readings: dict) -> str:
    report = RunReport(results=[], nodes=["ct13"], duration_s=0.1, readings={"ct13": readings})
    # identifiers kept: these tests are about each reading's own policy (test_shareable.py: the pseudonyms)
    return snapshot.dump(report, "nodes:\n  - {name: ct13, host: h}\n", keep_identifiers=True)


def test_env_keeps_every_name_and_only_the_values_a_rule_names():
    spec = Command(("docker", "exec", "k3ep16", "env"), saved=EnvValues(("LD_LIBRARY_PATH", "HSA_TOOLS_LIB")))
    text = dumped({spec: CommandReading("docker exec k3ep16 env", 0, ENV, "")})
    assert "SECRETSECRET" not in text and "second line" not in text
    _, _, saved, _ = snapshot.load(text)
    (reading,) = saved["ct13"].values()
    assert reading.stdout.splitlines() == [
        f"PATH={REDACTED}", f"HF_TOKEN={REDACTED}", "LD_LIBRARY_PATH=/app/rjprefix/lib:/opt/rocm/lib",
        f"MULTI={REDACTED}", "HSA_TOOLS_LIB=/app/rjprefix/lib/libhsa_hotswap_rocjitsu.so"]
    assert list(saved["ct13"]) == [spec]  # the declaration round-trips, so the same check finds its reading


def test_docker_keeps_what_rack_free_judges_and_redacts_command_lines_labels_and_mounts():
    spec = Docker(events_since_s=1800)
    text = dumped({spec: DockerReading(containers=CONTAINERS, events=EVENTS, now=10.0)})
    assert "SECRETSECRET" not in text and "sglang --api-key" not in text
    _, _, saved, _ = snapshot.load(text)
    reading = saved["ct13"][spec]
    ours, theirs = reading.containers
    assert (theirs["Names"], theirs["Image"], theirs["State"], theirs["Created"]) == (
        ["/sglang-bench"], "lmsys/sglang", "running", 2)
    assert theirs["Command"] == REDACTED and theirs["Labels"] == {"token": REDACTED}
    assert theirs["Mounts"] == REDACTED and ours["Command"] == REDACTED
    (event,) = reading.events
    assert event["Action"] == "create" and event["Actor"] == {
        "ID": "ba5", "Attributes": {"name": "sglang-bench", "image": "lmsys/sglang", "token": REDACTED}}


def test_readings_without_a_declaration_and_unavailable_ones_are_saved_as_they_are():
    plain, env = Command(("dmesg",)), Command(("env",), saved=EnvValues())
    text = dumped({plain: CommandReading("dmesg", 0, "[ 1.0] amdgpu: HBM 432 GiB\n", ""),
                   env: Unavailable("node deadline reached")})
    _, _, saved, _ = snapshot.load(text)
    assert saved["ct13"][plain].stdout == "[ 1.0] amdgpu: HBM 432 GiB\n"
    assert json.loads(text)["nodes"]["ct13"][1]["reading"] == {"kind": "Unavailable",
                                                               "reason": "node deadline reached"}


@pytest.mark.parametrize("text,secret", [
    ("Namespace(api_key='sk-abcdefghijklmnopqrstu', port=8000)", "sk-abcdefghijklmnopqrstu"),
    ("launch --api-key XYZ123secret --port 8000", "XYZ123secret"),
    ("--password hunter2", "hunter2"), ('password: "x1y2z3"', "x1y2z3"),
    ("HF_TOKEN=hf_abcdefghijklmnopqrstuvw", "hf_abcdefghijklmnopqrstuvw"),
    ("curl -H 'Authorization: Bearer abcdefghijklmnopqrstuvwxyz'", "abcdefghijklmnopqrstuvwxyz"),
])
def test_free_text_loses_its_credentials(text, secret):
    assert secret not in redact_text(text) and REDACTED in redact_text(text)


def test_free_text_keeps_what_is_no_secret():
    text = "'max_num_batched_tokens': 2048, 'tokenizer': 'moonshotai/Kimi-K3', 'max_model_len': None"
    assert redact_text(text) == text


# One example per secret shape: the cheap trigger test in front of the shapes must let each through.
SHAPE_EXAMPLES = {
    "url credentials": "git clone https://bob:s3cr3tpass@github.example/x.git",
    "authorization header": "Proxy-Authorization: Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==",
    "cookie header": "Set-Cookie: session=abcdef0123456789",
    "NAME=value": "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENG",
    "--name value": "serve --api-key XYZ123secret --port 8000",
    "NAME<whitespace>value": "aws configure set aws_secret_access_key AbCdEf0123456789",
    "token shapes": "pushed with ghp_abcdefghijklmnopqrstuvwxyz0123 and AKIAIOSFODNN7EXAMPLE",
    "bearer": "BEARER abcdefghijklmnopqrstuvwxyz",
}


@pytest.mark.parametrize("what", [w for w, _, _ in SECRET_SHAPES] + ["PEM"])
def test_every_secret_shape_passes_the_trigger_filter(what):
    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----"
    text = SHAPE_EXAMPLES.get(what, pem)
    shape = next((p for w, p, _ in SECRET_SHAPES if w == what), None)
    assert shape is None or shape.search(text), f"the example of {what!r} is not one"
    redacted, found = redact_secrets_counted(text)
    assert found >= 1 and REDACTED in redacted
