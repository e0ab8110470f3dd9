import json

import pytest

from k3doctor.parsers import ParseError
from k3doctor.parsers.docker_events import container_from_api, event_from_dict
from tests.corpus import load

CONTAINER_ID = "405efae3b420464a9da7be7cd9de8d2ff160ffcfdac01517d9b686e8137f9053"


def corpus_events():
    """The corpus' events as the Docker SDK yields them: one decoded dict per JSON line."""
    return [json.loads(line) for line in load("docker-events-json-docker112.jsonl").splitlines() if line.strip()]


def test_events_json_legacy_docker112():
    events = [event_from_dict(d) for d in corpus_events()]
    assert [(e.type, e.action) for e in events] == [
        ("container", "start"), ("network", "connect"), ("container", "kill"), ("container", "kill"),
        ("container", "die"), ("network", "disconnect"), ("container", "stop"),
    ]
    start, connect, kill15, kill9, die = events[:5]
    assert (start.id, start.name, start.image) == (CONTAINER_ID, "alpine", "alpine")
    assert start.time == pytest.approx(1473106693.2629084)
    assert (kill15.attributes["signal"], kill9.attributes["signal"]) == ("15", "9")
    assert die.attributes["exitCode"] == "137" and die.exit_code == 137
    assert connect.name == "bridge" and connect.attributes["container"] == CONTAINER_ID
    assert start.exit_code is None


def test_event_from_sdk_dict_modern_and_legacy_only():
    modern = event_from_dict({
        "Type": "container", "Action": "create", "scope": "local", "time": 1760000000,
        "Actor": {"ID": "abc", "Attributes": {"name": "k3ep16", "image": "rocm/fw-bringup:x"}},
    })
    assert (modern.action, modern.name, modern.image, modern.time) == \
        ("create", "k3ep16", "rocm/fw-bringup:x", 1760000000)
    legacy = event_from_dict({"status": "create", "id": "abc", "from": "alpine", "time": 1})
    assert (legacy.type, legacy.action, legacy.id, legacy.image, legacy.name) == \
        ("container", "create", "abc", "alpine", None)


MODERN = {"Type": "container", "Action": "create", "time": 1760000000, "Actor": {"ID": "abc", "Attributes": {}}}


@pytest.mark.parametrize("d", [
    {"Type": "container", "time": 1},  # no action/id
    {"Type": "container", "Action": "start", "Actor": {"ID": "a"}},  # no time
    [1, 2],
    {**MODERN, "Action": 7},  # a non-string Action would silently drop out of "create/start"
    {**MODERN, "Action": ["create"]},
    {**MODERN, "Action": None, "status": "create"},  # Action present but not a string
    {**MODERN, "Type": {"container": 1}},
    {**MODERN, "Actor": {"ID": 12345}},
    {**MODERN, "Actor": "abc"},
    {**MODERN, "Actor": {"ID": "abc", "Attributes": ["name=x"]}},
    {**MODERN, "Actor": {"ID": "abc", "Attributes": {"exitCode": 10 ** 5000}}},  # str() of it would raise
    {**MODERN, "timeNano": 10 ** 400},  # would overflow the float division
    {**MODERN, "timeNano": "9" * 5000},  # past int()'s digit limit
    {**MODERN, "timeNano": -1},
    {**MODERN, "time": float("nan")},
    {**MODERN, "time": float("inf")},
    {**MODERN, "time": True},
])
def test_garbled_events_raise(d):
    with pytest.raises(ParseError):
        event_from_dict(d)


def test_container_from_api_list_entry():
    c = container_from_api({"Id": "f00", "Names": ["/sglang-bench"], "Image": "lmsysorg/sglang", "State": "running",
                            "Status": "Up 3 hours", "Created": 1760000000, "Labels": {"a": "b"}})
    assert (c.name, c.state, c.status, c.image, c.created, c.id, c.labels) == \
        ("sglang-bench", "running", "Up 3 hours", "lmsysorg/sglang", 1760000000, "f00", {"a": "b"})


@pytest.mark.parametrize("d", [
    {"Names": []}, {"Names": "/x"}, {"Names": [7]}, {"Names": ["/x"], "State": 1},
    {"Names": ["/x"], "Created": "yesterday"}, {"Names": ["/x"], "Labels": "a=b"},
    {"Names": ["/x"], "Labels": {"a": 1}},
    "x",
])
def test_garbled_container_entries_raise(d):
    with pytest.raises(ParseError):
        container_from_api(d)


class _NoRepr(dict):
    """An engine's entry whose repr must not be taken unless it is quoted in an error."""

    def __repr__(self):
        raise AssertionError("repr of a well-formed entry taken")


def test_a_well_formed_entry_is_not_printed_and_a_garbled_one_is_named_with_its_field():
    """An engine answers with thousands of events, some tens of KB each (an exec's command line): their text
    is made only for an error message, which still quotes the entry and the field at fault."""
    assert event_from_dict(_NoRepr(MODERN)).action == MODERN["Action"]
    assert container_from_api(_NoRepr({"Names": ["/x"], "Created": 1760000000})).name == "x"
    with pytest.raises(ParseError, match=r"^docker event \{'Type': .*: Actor\.ID is not a string: 12345$"):
        event_from_dict({**MODERN, "Actor": {"ID": 12345}})
    with pytest.raises(ParseError, match=r"^docker container list entry \{'Names': \['/x'\].*: Labels: 'a' -> 1 is"):
        container_from_api({"Names": ["/x"], "Labels": {"a": 1}})
