"""`check --save-readings` on the rig's real nodes (issue 32 §5): the default file names no node, address or
login of the rack and judges to the same verdicts; `--keep-identifiers` keeps them; `readings kept` and
`readings redact` say and make the difference."""
import json
import re
import socket

import pytest
import yaml

from tests.e2e.cli import k3, k3json

pytestmark = pytest.mark.e2e


def identifiers(rig) -> list:
    """What names the rig's rack: node names, SSH/data addresses, the login's key and known_hosts paths, and
    this machine's own host name (the nodes share its UTS name in their containers)."""
    inventory = yaml.safe_load(rig.inventory_path.read_text())
    return sorted({*(n.name for n in rig.nodes), *(n.host for n in rig.nodes), str(rig.identity_file),
                   str(rig.known_hosts), inventory["defaults"]["identity_file"], socket.gethostname()})


def found(values: list, text: str) -> list:
    """The ``values`` that ``text`` holds as whole words (a host name `vm` is not the `vm` of `kvm`)."""
    return [v for v in values if re.search(rf"(?<![\w.-]){re.escape(v)}(?![\w-])", text)]


def verdicts(doc: dict, names: dict) -> list:
    return sorted((r["check"], names.get(r["node"], r["node"] or ""), r["gpu"] if r["gpu"] is not None else -1,
                   r["status"], r["remediation"] or "") for r in doc["results"])


@pytest.mark.parametrize("scenario", ["healthy", "demo"])
def test_a_default_save_names_nothing_of_the_rack_and_judges_the_same(rig, tmp_path, scenario):
    rig.apply(scenario)
    saved = tmp_path / "state.json"
    rc, live = k3json("check", "--nodes", rig.inventory_path, "--save-readings", saved)
    text = saved.read_text()
    leaked = found(identifiers(rig), text)
    assert leaked == [], f"the shareable file still holds {leaked}"
    doc = json.loads(text)
    assert sorted(doc["nodes"]) == ["node1", "node2", "node3", "node4"]  # in inventory order: ct13 is node1
    assert doc["identifiers"]["pseudonyms"]["host names"] >= 4
    rc_again, again = k3json("judge", saved)
    pseudonyms = {n.name: f"node{i}" for i, n in enumerate(rig.nodes, 1)}
    assert (rc_again, verdicts(again, {})) == (rc, verdicts(live, pseudonyms))
    assert rc == (0 if scenario == "healthy" else 1)


def test_keep_identifiers_keeps_them_and_redact_makes_the_shareable_copy(rig, tmp_path):
    rig.apply("healthy")
    raw, shared = tmp_path / "raw.json", tmp_path / "shared.json"
    rc, out, err = k3("check", "--nodes", rig.inventory_path, "--only", "launch-config,kernel-health",
                      "--save-readings", raw, "--keep-identifiers")
    assert rc == 0, err
    assert f"readings saved to {raw}, identifiers KEPT as read" in err
    assert rig.nodes[0].name in raw.read_text() and rig.nodes[0].host in raw.read_text()
    rc, out, err = k3("readings", "kept", raw)
    assert rc == 0 and out.startswith("identifiers KEPT as read ("), err
    rc, out, err = k3("readings", "redact", raw, "-o", shared)
    assert rc == 0 and "shareable: identifiers replaced by pseudonyms" in out, err
    assert found(identifiers(rig), shared.read_text()) == []
    rc, out, err = k3("readings", "kept", shared)
    assert rc == 0 and out.startswith("shareable: ") and "\nkept: GPU models" in out, err
    assert k3("judge", shared, "--only", "launch-config,kernel-health")[0] == 0
