import json

import pytest

from k3doctor.parsers import ParseError
from k3doctor.parsers.docker_events import (
    event_from_dict,
    parse_events_jsonl,
    parse_events_text,
    parse_ps_jsonl,
)
from tests.corpus import commands, load

CONTAINER_ID = "405efae3b420464a9da7be7cd9de8d2ff160ffcfdac01517d9b686e8137f9053"


def test_events_json_legacy_docker112():
    events = parse_events_jsonl(load("docker-events-json-docker112.jsonl"))
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


def test_events_default_text_format_docs():
    by_image, volumes = commands("docker-events-default-format-docs.txt")
    events = parse_events_text(by_image)
    assert [e.action for e in events] == ["create", "start", "kill", "kill", "die", "stop"]
    assert {(e.id, e.name, e.image) for e in events} == {("d9cd...4d70", "happy_meitner", "alpine")}
    assert events[2].attributes["signal"] == "15"
    assert events[4].exit_code == 137
    assert events[0].time == pytest.approx(1483548115.784240236)  # 2017-01-05T00:41:55.784240236+08:00
    mount = parse_events_text(volumes)[1]
    assert (mount.type, mount.action, mount.id) == ("volume", "mount", "test-event-volume-local")
    assert mount.attributes["read/write"] == "true" and mount.attributes["destination"] == "/foo"


def test_empty_streams_mean_no_events_or_containers():
    assert parse_events_jsonl("") == [] and parse_events_text("\n") == [] and parse_ps_jsonl("") == []


@pytest.mark.parametrize("parser, text", [
    (parse_events_jsonl, '{"Type":"container","Action":"start","Actor":{"ID":"a"'),  # truncated
    (parse_events_jsonl, '{"Type":"container","time":1}'),  # no action/id
    (parse_events_jsonl, '{"Type":"container","Action":"start","Actor":{"ID":"a"}}'),  # no time
    (parse_events_jsonl, "[1, 2]"),
    (parse_events_text, "2017-01-05T00:41:55.78+08:00 container"),
    (parse_events_text, "yesterday container create abc (name=x)"),
    (parse_events_text, "2017-01-05T00:41:55.78+08:00 container create abc (garbage)"),
    (parse_ps_jsonl, '{"Names":"web","State":"running"'),
    (parse_ps_jsonl, '{"Image":"nginx"}'),
    (parse_ps_jsonl, None),
])
def test_garbled_raises(parser, text):
    with pytest.raises(ParseError):
        parser(text)


def test_ps_json_docs():
    (container,) = parse_ps_jsonl(load("docker-ps-json-docs.jsonl"))
    assert (container.name, container.state, container.status, container.image) == (
        "boring_keldysh", "running", "Up 3 seconds", "nginx")
    assert container.created == 1615331705  # 2021-03-10 00:15:05 +0100
    assert container.labels == {"maintainer": "NGINX Docker Maintainers <docker-maint@nginx.com>"}


def test_ps_a_json_fixture():
    db, web = parse_ps_jsonl(load("docker-ps-a-json-fixture.jsonl"))
    assert (db.name, db.state, db.status, db.image) == ("demo-db-1", "running", "Up 47 hours", "postgres:16")
    assert db.labels == {"com.docker.compose.project": "demo", "com.docker.compose.service": "db"}
    assert (web.name, web.state, web.status) == ("web", "exited", "Exited (0) 5 minutes ago")
    assert web.labels == {} and web.id == "17ea558c6618"


def test_ps_row_from_sdk_style_dump():
    row = {"Names": "k3ep16", "Status": "Up 2 hours", "Image": "img", "CreatedAt": "not a date"}
    (container,) = parse_ps_jsonl(json.dumps(row))
    assert container.state is None and container.created is None
