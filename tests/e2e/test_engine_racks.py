"""A full 18-tray rack (72 GPUs in one PPOD, reference §4) and a second rack, checked through `k3doctor node` +
`k3doctor merge` with an inventory `racks:`. Each tray is a light one: a mount namespace over the rig's fixture
tree (fake sysfs, amd-smi, rocm-smi, dmesg; no sshd, no dockerd) running the real `k3doctor node --json` for the
GPU, fabric and kernel-log checks; the cluster judges then run per rack, where the fabric domain and the accel
ids are defined (§4, §7)."""
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from k3rig import missing_requirements
from k3rig.fixtures import NodeState, write_tree

from tests.e2e.cli import k3json

pytestmark = pytest.mark.e2e

RACK_A, RACK_B = tuple(range(1, 19)), (1, 2, 3, 4)  # a full rack of 18 trays; a small second rack
OTHER_PPOD = "9b1f4e27-5c3a-4d88-b0e6-2f7a91c4d305"  # rack B is a PPOD of its own
ODD_PPOD = "5d0c8a61-2f4e-4b7a-9c3d-81e6f0a2b479"
CHECKS = "ualink-state,gpu-inventory,hbm-uniform,fabric-domain,kernel-health"
# Only what a tray's GPU checks read; /root and /mnt stay the host's, where this interpreter lives.
TRAY_BINDS = ("sys/class", "sys/module", "opt", "proc/sys/kernel/random/boot_id", "usr/bin/dmesg", "proc/meminfo")


@pytest.fixture(autouse=True)
def _needs_root():
    if missing_requirements():
        pytest.skip("light trays need root and the rig's tools: " + "; ".join(missing_requirements()))


def trays():
    return [(f"a-ct{t}", NodeState(tray=t, rack_trays=RACK_A)) for t in RACK_A] + \
        [(f"b-ct{t}", NodeState(tray=t, rack_trays=RACK_B, ppod_id=OTHER_PPOD)) for t in RACK_B]


def write_inventory(path, names):
    path.write_text(yaml.safe_dump({
        "cluster": {"name": "two-racks", "stepping": "B0", "hbm_gib_per_gpu": 432, "gpus_per_node": 4},
        "nodes": [{"name": n, "transport": "local"} for n in names],
        "racks": {"A": [n for n in names if n.startswith("a-")], "B": [n for n in names if n.startswith("b-")]},
    }, sort_keys=False))


def run_trays(tmp_path, states):
    """Every tray's `k3doctor node --json` line, each in its own mount namespace over its fixture tree."""
    inventory = tmp_path / "racks.yaml"
    write_inventory(inventory, [name for name, _ in states])

    def one(item):
        name, state = item
        tree = tmp_path / name
        write_tree(tree, state)
        binds = " && ".join(f"mount --bind {tree / rel} /{rel}" for rel in TRAY_BINDS)
        script = (f"{binds} && exec {sys.executable} -m k3doctor.cli node --json --nodes {inventory} "
                  f"--name {name} --only {CHECKS}")
        proc = subprocess.run(["unshare", "-m", "--propagation", "private", "--", "/bin/sh", "-c", script],
                              capture_output=True, text=True, timeout=180)
        assert proc.stdout.startswith("{"), f"{name}: rc {proc.returncode}: {proc.stderr[-1000:]}"
        return proc.stdout

    with ThreadPoolExecutor(4) as pool:
        lines = list(pool.map(one, states))
    (tmp_path / "results.jsonl").write_text("".join(lines))
    return inventory, tmp_path / "results.jsonl"


def test_a_full_rack_is_quiet_and_the_second_racks_faults_are_named_in_it(tmp_path):
    """Rack A (18 healthy trays, 72 GPUs) gives no finding; rack B, a PPOD of its own, is no mismatch with it. In
    rack B, b-ct3 has an odd PPOD_ID, and b-ct2's kernel log shows an import from remote AccId 1, which is b-ct1
    card 2 there (the same id in rack A is a-ct1's: only the rack's own accel ids say whose it is)."""
    states = dict(trays())
    states["b-ct3"].ppod_id = ODD_PPOD
    states["b-ct2"].dmesg_extra = ["amdgpu 0001:01:00.0: amdgpu: HELLO: Send failed to remote AccId:1"]
    inventory, results = run_trays(tmp_path, list(states.items()))
    rc, doc = k3json("merge", results, "--nodes", inventory, "--only", CHECKS)
    assert len(doc["nodes"]) == 22
    bad = sorted((r["check"], r["node"], r["gpu"], r["status"]) for r in doc["results"] if r["status"] != "PASS")
    assert rc == 1 and bad == [("fabric-domain", "b-ct3", g, "FAIL") for g in range(4)] + [
        ("kernel-health", "b-ct1", 2, "FAIL")], json.dumps(doc["results"], indent=1)[:3000]
    fabric = {r["node"]: r["message"] for r in doc["results"] if r["check"] == "fabric-domain"}
    # the PASS line also says amd-smi 27.1's PHYSICAL_ACC_ID was cross-checked with sysfs (reference §29)
    cross = "; PHYSICAL_ACC_ID agrees with sysfs accel_id on 4 GPU(s)"
    assert all(fabric[f"a-ct{t}"].endswith(f"(72 GPUs compared){cross}") for t in RACK_A)
    assert fabric["b-ct1"].endswith(f"(16 GPUs compared){cross}")
    hbm = sorted(r["message"] for r in doc["results"] if r["check"] == "hbm-uniform")
    assert hbm == ["rack A: all 72 GPUs report 432 GiB HBM", "rack B: all 16 GPUs report 432 GiB HBM"]
    kernel = next(r for r in doc["results"] if r["check"] == "kernel-health" and r["status"] == "FAIL")
    assert kernel["evidence"]["seen_in"] == "b-ct2" and "b-ct1 card2" in kernel["message"]


def test_check_over_ssh_judges_each_rack_of_the_rig_on_its_own(rig, tmp_path):
    """The 4-node rig split into two racks: ct16's other PPOD_ID is a mismatch within one rack, not across two."""
    rig.apply("ppod-mismatch")
    split = yaml.safe_load(rig.inventory_path.read_text())
    split["racks"] = {"A": ["ct13", "ct14", "ct17"], "B": ["ct16"]}
    (tmp_path / "split.yaml").write_text(yaml.safe_dump(split))
    for inventory, failing in ((rig.inventory_path, {"ct16"}), (tmp_path / "split.yaml", set())):
        rc, doc = k3json("check", "--nodes", inventory, "--only", "fabric-domain")
        assert {r["node"] for r in doc["results"] if r["status"] == "FAIL"} == failing, doc["results"]
        assert rc == (1 if failing else 0) and not [r for r in doc["results"] if r["status"] in ("ERROR", "WARN")]
