"""Shareable saved readings (issue 32 §5): no host-identifying value survives, and each pseudonym is the same
wherever its original was, so the checks that compare sources or nodes still agree."""
import json

import yaml

from k3doctor.gather import shareable, snapshot
from k3doctor.views.ifnames import HOSTNAME_LOOKUP
from k3doctor.views.network import own_addresses, parse_local_routes, parse_proc_net_tcp

INVENTORY = """cluster: {name: rack-a}
defaults: {user: alice, identity_file: /home/alice/.ssh/id_ed25519}
ssh: {known_hosts: /home/alice/.ssh/known_hosts}
nodes:
  - {name: gpu-node-017, host: gpu-node-017.lab.example.com, data_ip: 10.210.11.14}
  - {hosts: "ct[13-14]", user: bob}
"""
SECRETS = ("gpu-node-017", "lab.example.com", "10.210.11.14", "alice", "bob", "ct13", "ct14", "id_ed25519",
           "b8:3f:d2:11:22:33", "AF54E92B0A5D57C8", "7843934696581995200", "6cdb410c2f219ac0",
           "3a6e2f64-5c2b-4a1e-9f0e-1b2c3d4e5f60", "9034655720432782706", "8.8.4.4", "2a00:1450:4001:82b::200e",
           "hf_abcdefghijklmnopqrstu")
ROUTES = "local 10.210.11.14 dev enp1s0f1 proto kernel scope host src 10.210.11.14\nlocal 127.0.0.0/8 dev lo\n"
TCP = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
       "   0: 0E0BD20A:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1\n")


def entry(spec: dict, **reading) -> dict:
    kind = "FileReading" if spec["kind"] == "File" else "CommandReading"
    base = {"path": spec.get("path")} if kind == "FileReading" else {"command": "x", "rc": 0, "stderr": ""}
    return {"spec": {"saved": None, "timeout_s": None, **spec} if kind != "FileReading" else spec,
            "reading": {"kind": kind, **base, **reading}}


def document() -> dict:
    node = [
        entry({"kind": "Command", "argv": list(HOSTNAME_LOOKUP)},
              stdout="gpu-node-017\n127.0.1.1 gpu-node-017.lab.example.com gpu-node-017\n"),
        entry({"kind": "Command", "argv": ["ip", "-4", "route", "show", "table", "local"]}, stdout=ROUTES),
        entry({"kind": "File", "path": "/proc/net/tcp"}, content=TCP, error=None, truncated=False),
        entry({"kind": "Command", "argv": ["ip", "-o", "link", "show"]},
              stdout="2: enp1s0f1: <UP> mtu 9000\\    link/ether b8:3f:d2:11:22:33 brd ff:ff:ff:ff:ff:ff\n"),
        entry({"kind": "Command", "argv": ["amd-smi", "static"]},
              stdout="        ASIC_SERIAL: 0xAF54E92B0A5D57C8\n"
                     "        PPOD_ID: 4c8fab1c-fb8b-42aa-92ae-ea17ca953bdb\n"),
        entry({"kind": "File", "path": "/sys/class/kfd/kfd/topology/nodes/1/properties"},
              content="unique_id 7843934696581995200\nhive_id 9034655720432782706\n", error=None, truncated=False),
        entry({"kind": "Command", "argv": ["rocm-smi", "--showuniqueid", "--json"]},
              stdout='{"card0": {"Unique ID": "0x6cdb410c2f219ac0"}}'),
        entry({"kind": "File", "path": "/proc/sys/kernel/random/boot_id"},
              content="3a6e2f64-5c2b-4a1e-9f0e-1b2c3d4e5f60\n", error=None, truncated=False),
        entry({"kind": "Command", "argv": ["sh", "-c", "echo \"@host $(hostname)\""]}, stdout="@host vm\n@absent\n"),
        entry({"kind": "Command", "argv": ["dmesg"]},
              stdout="[ 0.4] Serial: 8250/16550 driver, 4 ports\n[ 9.1] nfs: server 8.8.4.4 not responding, vm size "
                     "is 512\n[ 9.2] peer 2a00:1450:4001:82b::200e at 14:25:56 HF_TOKEN=hf_abcdefghijklmnopqrstu\n"
                     "[ 9.3] ppod_id 00000000-0000-0000-0000-000000000000 /home/alice/k3 ct13 said hello to ct14\n"),
    ]
    return {"schema": snapshot.SCHEMA, "inventory": INVENTORY, "overrides": ["ualoe-fabric.pairs=ct13,ct14"],
            "unreachable": {"ct14": "ssh: connect to 10.210.11.15 refused"},
            "nodes": {"gpu-node-017": node, "ct13": [entry({"kind": "Command", "argv": ["true"]}, stdout="")]}}


def shared() -> tuple:
    doc, replaced = shareable.pseudonymize(document())
    return doc, replaced, {e["spec"].get("path") or " ".join(e["spec"]["argv"]): e["reading"]
                           for e in doc["nodes"]["node1"]}


def test_no_identifying_value_survives_anywhere_in_the_file():
    doc, replaced, _ = shared()
    text = json.dumps(doc)
    assert [s for s in SECRETS if s.lower() in text.lower()] == []
    assert replaced == {"host names": 5, "IP addresses": 4, "MAC addresses": 1, "serial numbers and unique ids": 3,
                        "UUIDs": 1, "user names": 2, "secrets": 1}


def test_node_names_are_node_pseudonyms_in_inventory_order_everywhere():
    doc, _, readings = shared()
    assert list(doc["nodes"]) == ["node1", "node2"] and list(doc["unreachable"]) == ["node3"]
    inventory = yaml.safe_load(doc["inventory"])
    assert [n["name"] for n in inventory["nodes"]] == ["node1", "node2", "node3"]  # the node set written out
    assert "identity_file" not in inventory["defaults"] and "known_hosts" not in inventory["ssh"]
    assert doc["overrides"] == ["ualoe-fabric.pairs=node2,node3"]
    assert readings["dmesg"]["stdout"].splitlines()[3].endswith("/home/user1/k3 node2 said hello to node3")


def test_an_address_is_the_same_pseudonym_in_routes_lookup_inventory_and_proc_net_tcp():
    doc, _, readings = shared()
    data_ip = yaml.safe_load(doc["inventory"])["nodes"][0]["data_ip"]
    (own,) = own_addresses(parse_local_routes(readings["ip -4 route show table local"]["stdout"])) - {
        __import__("ipaddress").ip_address("127.0.0.0")}
    (listener,) = parse_proc_net_tcp(readings["/proc/net/tcp"]["content"])
    assert str(own) == data_ip == str(listener.address) and own.is_private and listener.port == 8080
    lookup = readings[" ".join(HOSTNAME_LOOKUP)]["stdout"]
    assert lookup == "node1\n127.0.1.1 host1 node1\n"  # the loopback the §29 rule judges is kept
    assert readings['sh -c echo "@host $(hostname)"']["stdout"] == "@host host2\n@absent\n"  # short, but its own


def test_one_gpu_id_in_decimal_and_in_hex_gets_one_pseudonym_and_sentinels_stay():
    _, _, readings = shared()
    kfd = readings["/sys/class/kfd/kfd/topology/nodes/1/properties"]["content"]
    rocm = json.loads(readings["rocm-smi --showuniqueid --json"]["stdout"])["card0"]["Unique ID"]
    assert kfd == "unique_id 0000000000000000002\nhive_id 0000000000000000003\n" and int(rocm, 16) == 2
    smi = readings["amd-smi static"]["stdout"]
    assert "ASIC_SERIAL: 0x0000000000000001" in smi  # hex stays hex, of its width
    assert "4c8fab1c-fb8b-42aa-92ae-ea17ca953bdb" in smi  # a fabric domain, compared across sources: kept
    dmesg = readings["dmesg"]["stdout"]
    assert "Serial: 8250/16550 driver" in dmesg and "vm size is 512" in dmesg and "at 14:25:56" in dmesg
    assert "00000000-0000-0000-0000-000000000000" in dmesg and "2001:db8::1" in dmesg and "198.18.0.1" in dmesg


def test_a_saved_file_says_what_it_holds_and_keep_identifiers_keeps_them():
    from k3doctor.judging.runner import RunReport

    report = RunReport(results=[], nodes=["ct13"], duration_s=0.1, readings={"ct13": {}})
    raw = json.loads(snapshot.dump(report, "nodes:\n  - {name: ct13, host: 10.1.2.3}\n", keep_identifiers=True))
    assert raw["identifiers"] == "kept" and "10.1.2.3" in raw["inventory"]
    assert shareable.summary(raw).startswith("identifiers KEPT as read")
    default = json.loads(snapshot.dump(report, "nodes:\n  - {name: ct13, host: 10.1.2.3}\n"))
    assert default["identifiers"] == {"pseudonyms": {"host names": 1, "IP addresses": 1}}
    assert "ct13" not in json.dumps(default) and snapshot.load(json.dumps(default))[2] == {"node1": {}}
