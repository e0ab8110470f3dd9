"""host-resources judged on plain readings in the formats the node prints (reference §12).

Memory comes from /proc/meminfo in the kernel's layout, free space from `stat -f` lines, the
checkpoint from the gather's `find -printf` listing; every rule is tried on one node of four.
"""
import pytest
from k3doctor.checks import host
from k3rig.fixtures import healthy_checkpoint, meminfo_text

from k3doctor import testing
from k3doctor.inventory.types import Node, Settings
from k3doctor.readings import Command, CommandReading, EngineFactCommand, FileReading, Readings, Unavailable
from k3doctor.registry import REGISTRY
from k3doctor.results import Status

CHECK = REGISTRY.checks[host.CHECK]
NODES = ("ct13", "ct14", "ct16", "ct17")
GB = 10**9
SHARDS = healthy_checkpoint()  # 96 shards, 1.42 TiB, as the rig's nodes hold them
S7, S42 = "model-00007-of-00096.safetensors", "model-00042-of-00096.safetensors"
ROOT, LOGS = "/var/lib/docker", "/root/k3ep16-logs"


def statfs(path, free_gb, total_gb=3840, fsid="21b566e2853da9e6"):
    """A `stat -f -c '%i %S %b %a %f %n'` line: 4 KiB blocks, root-reserved blocks on top of free."""
    blocks, avail = total_gb * GB // 4096, int(free_gb * GB) // 4096
    return f"{fsid} 4096 {blocks} {avail} {min(blocks, avail + 1000)} {path}\n"


def listing(shards, present=True, other=None):
    if not present:
        return "absent\0"
    records = [f"f {size} {name}" for name, size in shards.items()]
    records += [f"{t} 13 {name}" for name, t in (other or {}).items()]
    return "present\0" + "".join(f"{r}\0" for r in records)


def cmd(stdout, rc=0, stderr="", truncated=False):
    return CommandReading("sh -c ...", rc, stdout, stderr, timed_out=rc in (124, 137), truncated=truncated)


def node(mem=None, shards=None, docker=None, logs=None, **readings):
    """One node's readings: healthy unless told (Docker root and logs on separate file systems);
    ``mem`` overrides /proc/meminfo fields (kB), ``readings`` replace whole readings by name."""
    values = {
        "meminfo": FileReading("/proc/meminfo", meminfo_text(mem or {})),
        "checkpoint": cmd(listing(SHARDS if shards is None else shards)),
        "docker_root": cmd(docker if docker is not None else statfs(ROOT, 1200, fsid="aa01")),
        "log_dirs": cmd(logs if logs is not None else statfs(LOGS, 900, fsid="bb02")),
    }
    values.update(readings)
    return Readings(values)


def judge(faulty=None, nodes=NODES, inventory_nodes=None, **params):
    """Verdicts over the rack; ``faulty`` maps node -> node() keyword overrides."""
    per_node = {n: node(**(faulty or {}).get(n, {})) for n in nodes}
    return testing.judge(CHECK, per_node, nodes=inventory_nodes or {}, **params)


def findings(verdicts):
    return sorted((v.node or "", v.status.value, v.remediation) for v in verdicts if v.status != Status.PASS)


def only(verdicts):
    [v] = [v for v in verdicts if v.status != Status.PASS]
    return v


def without(name):
    return {k: v for k, v in SHARDS.items() if k != name}


def test_healthy_rack_passes_per_node_and_for_the_rack():
    verdicts = judge()
    assert findings(verdicts) == []
    assert {v.node for v in verdicts} == {*NODES, None}
    rack = [v for v in verdicts if v.node is None]
    assert [v.message for v in rack] == [
        "checkpoint on 4 node(s): 96 shards, 1,561,306,814,873 B, as expected (96 shards, 1,561,000,000,000 B ± 1 %)"]
    ct13 = [v.message for v in verdicts if v.node == "ct13"]
    assert ct13 == ["host RAM 251.5 GiB, swap 128.0 GiB",
                    f"1200.0 GB free on the file system of Docker root {ROOT} (3840.0 GB, 69 % used); "
                    f"900.0 GB free on the file system of log directory {LOGS} (3840.0 GB, 77 % used)",
                    "checkpoint /mnt/k3/Kimi-K3: 96 shards, 1,561,306,814,873 B, same sizes as on ct14, ct16, ct17"]


# ------------------------------------------------------------------------------------------------ memory

def test_ram_below_the_minimum_fails_on_that_node():
    v = only(judge({"ct17": {"mem": {"MemTotal": 246947644}}}))
    assert (v.node, v.status, v.remediation) == ("ct17", Status.FAIL, "HOST-RAM-LOW")
    assert v.message.startswith("host RAM is 235.5 GiB (MemTotal), below min_mem_total_gib 240")
    assert v.evidence["MemTotal"] == 246947644 * 1024


def test_ram_at_the_minimum_passes_and_the_minimum_is_a_parameter():
    at_minimum = {"ct14": {"mem": {"MemTotal": 240 * 2**20}}}
    assert findings(judge(at_minimum)) == []
    assert findings(judge(at_minimum, min_mem_total_gib=241)) == [("ct14", "FAIL", "HOST-RAM-LOW")]


def test_no_swap_fails_on_that_node():
    v = only(judge({"ct13": {"mem": {"SwapTotal": 0, "SwapFree": 0}}}))
    assert (v.node, v.status, v.remediation) == ("ct13", Status.FAIL, "HOST-NO-SWAP")
    assert "swap is required (§12)" in v.message


def test_swap_below_min_swap_gib_fails_and_any_swap_passes_by_default():
    small = {"ct16": {"mem": {"SwapTotal": 4 * 2**20}}}  # 4 GiB
    assert findings(judge(small)) == []
    v = only(judge(small, min_swap_gib=64))
    assert (v.node, v.remediation) == ("ct16", "HOST-NO-SWAP")
    assert v.message == "swap is 4.0 GiB (SwapTotal), below min_swap_gib 64"


def test_low_ram_and_no_swap_are_both_named():
    verdicts = judge({"ct14": {"mem": {"MemTotal": 128 * 2**20, "SwapTotal": 0}}})
    assert findings(verdicts) == [("ct14", "FAIL", "HOST-NO-SWAP"), ("ct14", "FAIL", "HOST-RAM-LOW")]


@pytest.mark.parametrize("reading", [
    FileReading("/proc/meminfo", "MemTotal:       263724468 kB\nMemFree:        2501"),  # cut off
    FileReading("/proc/meminfo", meminfo_text({}), truncated=True),
    FileReading("/proc/meminfo", None, error="Permission denied"),
    Unavailable("node deadline of 120s reached"),
], ids=["cut-off", "truncated", "unreadable", "never-arrived"])
def test_unreadable_meminfo_is_an_error_on_that_node_and_the_rest_is_still_judged(reading):
    verdicts = judge({"ct16": {"meminfo": reading}})
    v = only(verdicts)
    assert (v.node, v.status) == ("ct16", Status.ERROR) and v.message.startswith("/proc/meminfo not readable")
    assert sum(1 for x in verdicts if x.node == "ct16" and x.status == Status.PASS) == 2  # disk and checkpoint


# ---------------------------------------------------------------------------------------------- free space

def test_docker_root_below_its_minimum_fails():
    v = only(judge({"ct14": {"docker": statfs(ROOT, 12.5, fsid="aa01")}}))
    assert (v.node, v.status, v.remediation) == ("ct14", Status.FAIL, "HOST-DISK-FULL")
    assert v.message == (f"only 12.5 GB free on the file system of Docker root {ROOT} (3840.0 GB, 100 % used): "
                         "the Docker root needs at least 20.0 GB (docker_root_min_free_gb)")


def test_docker_root_without_room_for_the_epcheck_image_warns_and_zero_turns_it_off():
    tight = {"ct16": {"docker": statfs(ROOT, 300, fsid="aa01")}}
    v = only(judge(tight))
    assert (v.node, v.status, v.remediation) == ("ct16", Status.WARN, "HOST-DOCKER-ROOT-ROOM")
    assert "the epcheck image (~373 GB unpacked, §9) does not fit" in v.message
    assert findings(judge(tight, docker_root_warn_free_gb=0)) == []


def test_full_log_directory_fails():
    v = only(judge({"ct14": {"logs": "bb02 4096 16384 256 256 /root/k3ep16-logs\n"}}))  # a 64 MiB tmpfs, 1 MiB left
    assert (v.node, v.status, v.remediation) == ("ct14", Status.FAIL, "HOST-DISK-FULL")
    assert v.message == ("only 1.0 MB free on the file system of log directory /root/k3ep16-logs (67.1 MB, 98 % used): "
                         "the log directory needs at least 10.0 GB (log_min_free_gb)")


def test_docker_root_and_logs_on_one_full_file_system_are_one_finding_naming_both():
    same = {"ct17": {"docker": statfs(ROOT, 5), "logs": statfs(LOGS, 5)}}
    v = only(judge(same))
    assert (v.node, v.remediation) == ("ct17", "HOST-DISK-FULL")
    assert f"file system of Docker root {ROOT} and log directory {LOGS}" in v.message
    assert "the Docker root needs at least 20.0 GB" in v.message  # the larger need of the two
    assert v.evidence["paths"] == [ROOT, LOGS]


def test_file_systems_without_an_id_are_never_merged():
    v = judge({"ct13": {"docker": statfs(ROOT, 5, fsid="0"), "logs": statfs(LOGS, 5, fsid="0")}})
    assert findings(v) == [("ct13", "FAIL", "HOST-DISK-FULL")] * 2


def test_missing_log_directory_warns_and_a_missing_docker_root_is_an_error():
    verdicts = judge({"ct13": {"logs": f"absent {LOGS}\n"}, "ct14": {"docker": f"absent {ROOT}\n"}})
    assert findings(verdicts) == [("ct13", "WARN", "HOST-DISK-FULL"), ("ct14", "ERROR", None)]


@pytest.mark.parametrize("reading, says", [
    (Unavailable("Docker engine on ct16 not readable: Cannot connect to the Docker daemon at "
                 "unix:///var/run/docker.sock. Is the docker daemon running?"),  # as the gatherer words it
     "Docker root free space not readable: Docker engine on ct16 not readable: Cannot connect to the Docker daemon"),
    (Unavailable("Docker engine on ct16 reports no usable DockerRootDir (None)"), "no usable DockerRootDir"),
    (cmd("", rc=1, stderr=f"stat: cannot read file system information for '{ROOT}': Permission denied"),
     "stat -f exited 1: stat: cannot read file system information"),
    (cmd("", rc=124), "timed out"),
    (cmd(statfs(ROOT, 100)[:30]), "unexpected line"),  # cut off
    (cmd(statfs(ROOT, 100) + statfs(ROOT, 100)), "expected 1 line(s), got 2"),
    (cmd(statfs(ROOT, 100), truncated=True), "cut off"),
], ids=["engine-down", "no-root-dir", "stat-failed", "timed-out", "cut-off", "twice", "capped"])
def test_unreadable_docker_root_is_an_error_never_a_pass(reading, says):
    verdicts = judge({"ct16": {"docker_root": reading}})
    v = only(verdicts)
    assert (v.node, v.status) == ("ct16", Status.ERROR) and says in v.message
    assert not [x for x in verdicts if x.node == "ct16" and x.status == Status.PASS and "Docker root" in x.message]


def test_no_log_dirs_configured_reads_none():
    assert "log_dirs" not in CHECK.readings_for(Settings(checks={CHECK.name: {"log_dirs": []}}))
    assert findings(judge(log_dirs=[])) == []


# ---------------------------------------------------------------------------------------------- checkpoint

def test_missing_checkpoint_directory_fails_on_that_node_and_the_others_still_agree():
    verdicts = judge({"ct16": {"checkpoint": cmd(listing({}, present=False))}})
    v = only(verdicts)
    assert (v.node, v.status, v.remediation) == ("ct16", Status.FAIL, "CHECKPOINT-INCOMPLETE")
    assert v.message.startswith("no checkpoint directory /mnt/k3/Kimi-K3 on this node")
    assert [x.message for x in verdicts if x.node is None][0].startswith("checkpoint on 3 node(s): 96 shards")


def test_missing_shard_is_named_on_its_node_only():
    v = only(judge({"ct14": {"shards": without(S42)}}))
    assert (v.node, v.status, v.remediation) == ("ct14", Status.FAIL, "CHECKPOINT-INCOMPLETE")
    assert v.message == ("checkpoint /mnt/k3/Kimi-K3 (95 shards, 1,544,944,212,127 B) differs from the copy on "
                         f"ct13, ct16, ct17: missing {S42}")
    assert v.evidence["missing"] == [S42]


def test_short_and_long_shards_are_named_with_both_sizes():
    short = only(judge({"ct16": {"shards": {**SHARDS, S7: 8_000_000_000}}}))
    assert (short.node, short.remediation) == ("ct16", "CHECKPOINT-INCOMPLETE")
    assert short.message.endswith(f"{S7} is 8,000,000,000 B, 16,405,433,791 B on ct13, ct14, ct17 (cut short)")
    longer = only(judge({"ct13": {"shards": {**SHARDS, S7: SHARDS[S7] + 1}}}))
    assert longer.node == "ct13" and longer.message.endswith(f"{S7} is 16,405,433,792 B, 16,405,433,791 B on ct14, "
                                                             "ct16, ct17")


def test_broken_symlink_shard_is_named():
    v = only(judge({"ct17": {"shards": without(S7), "checkpoint": cmd(listing(without(S7), other={S7: "l"}))}}))
    assert v.node == "ct17" and v.message.endswith(f": {S7} is a broken symlink")
    assert v.evidence["missing"] == [] and v.evidence["unusable"] == {S7: "a broken symlink"}


def test_file_no_other_node_has_is_named_as_extra():
    stray = "consolidated.safetensors"
    v = only(judge({"ct14": {"shards": {**SHARDS, stray: 1000}}}))
    assert v.node == "ct14" and v.message.endswith(f"not on the other nodes: {stray}")


def test_many_missing_shards_are_counted_not_all_listed():
    gone = [f"model-{i:05d}-of-00096.safetensors" for i in range(60, 97)]
    v = only(judge({"ct13": {"shards": {k: s for k, s in SHARDS.items() if k not in gone}}}))
    assert v.message.endswith(f"missing {gone[0]}, {gone[1]}, {gone[2]} and 34 more")
    assert v.evidence["missing"] == gone


def test_two_nodes_tie_is_broken_by_the_shard_numbering():
    v = only(judge({"ct14": {"shards": without(S42)}}, nodes=("ct13", "ct14")))
    assert v.node == "ct14" and v.message.endswith(f"missing {S42}")
    stray = only(judge({"ct13": {"shards": {**SHARDS, "extra.safetensors": 5}}}, nodes=("ct13", "ct14")))
    assert stray.node == "ct13" and stray.message.endswith("not on the other nodes: extra.safetensors")


def test_two_nodes_size_tie_names_the_shorter_copy():
    v = only(judge({"ct13": {"shards": {**SHARDS, S7: 10}}}, nodes=("ct13", "ct14")))
    assert v.node == "ct13" and "(cut short)" in v.message


def test_same_shard_missing_on_every_node_is_one_rack_finding_naming_it():
    faulty = {n: {"shards": without(S42)} for n in NODES}
    v = only(judge(faulty))
    assert (v.node, v.status, v.remediation) == (None, Status.FAIL, "CHECKPOINT-UNEXPECTED")
    assert v.message == ("the checkpoint copy the 4 node(s) agree on is not the expected one: 95 shards, expected 96; "
                         f"missing on every node: {S42}; 1,544,944,212,127 B in all, expected 1,561,000,000,000 B "
                         "± 1 % (§12: 96 shards, ~1.42 TiB)")


def test_unpadded_shard_numbering_names_the_gap_unpadded():
    shards = {f"model-{i}-of-61.safetensors": 25_000_000_000 for i in range(1, 62) if i != 7}
    v = only(judge({n: {"shards": shards} for n in NODES}, shards=61, checkpoint_bytes=1_500_000_000_000))
    assert v.node is None and "missing on every node: model-7-of-61.safetensors" in v.message


def test_total_outside_the_tolerance_is_a_rack_finding_and_both_are_parameters():
    v = only(judge(checkpoint_bytes=1_700_000_000_000))
    assert (v.node, v.remediation) == (None, "CHECKPOINT-UNEXPECTED")
    assert "1,561,306,814,873 B in all, expected 1,700,000,000,000 B ± 1 %" in v.message
    assert findings(judge(checkpoint_bytes=1_700_000_000_000, checkpoint_tolerance_pct=10)) == []
    assert findings(judge(shards=95)) == [("", "FAIL", "CHECKPOINT-UNEXPECTED")]


def test_empty_checkpoint_directory_everywhere_is_one_rack_finding():
    v = only(judge({n: {"shards": {}} for n in NODES}))
    assert v.node is None and v.message.startswith("the checkpoint copy the 4 node(s) agree on is not the expected "
                                                   "one: 0 shards, expected 96")


@pytest.mark.parametrize("reading, says", [
    (cmd(listing(SHARDS)[:-20]), "cut off"),  # the gather cut it mid-record
    (cmd(listing(SHARDS), truncated=True), "cut off"),
    (cmd("find: '/mnt/k3/Kimi-K3': Permission denied\n", rc=1), "exited 1"),
    (cmd("garbage\0"), "unexpected output"),
    (cmd("absent\0f 1 x.safetensors\0"), "unexpected output"),
    (cmd(listing({S7: 1, **{S7 + "x": 2}}) + f"f 1 {S7}\0"), "listed twice"),
])
def test_unreadable_listing_is_an_error_and_that_node_is_left_out(reading, says):
    verdicts = judge({"ct17": {"checkpoint": reading}})
    v = only(verdicts)
    assert (v.node, v.status) == ("ct17", Status.ERROR) and says in v.message
    assert [x.message for x in verdicts if x.node is None][0].startswith("checkpoint on 3 node(s)")


def test_per_node_inventory_parameters_apply_to_that_node_only():
    ct14 = Node("ct14", "h", Settings(checks={CHECK.name: {"min_mem_total_gib": 300}}))
    verdicts = judge(inventory_nodes={"ct14": ct14, **{n: Node(n, "h", Settings()) for n in NODES if n != "ct14"}})
    assert findings(verdicts) == [("ct14", "FAIL", "HOST-RAM-LOW")]


def test_reads_follow_the_parameters():
    specs = CHECK.readings_for(Settings(checks={CHECK.name: {"checkpoint_dir": "/data/it's here",
                                                             "docker_root": "/srv/docker",
                                                             "log_dirs": ["/a b", "/c"]}}))
    assert set(specs) == {"meminfo", "checkpoint", "docker_root", "log_dirs"}
    assert "d='/data/it'\"'\"'s here'" in specs["checkpoint"].argv[2]
    assert type(specs["docker_root"]) is Command and "/srv/docker" in specs["docker_root"].argv[2]  # no engine
    assert "docker" not in specs["docker_root"].argv[2].replace("/srv/docker", "")
    assert "for p in '/a b' /c;" in specs["log_dirs"].argv[2]
    auto = CHECK.readings_for(Settings())["docker_root"]  # the engine's DockerRootDir, as $1: no docker CLI
    assert (type(auto), auto.fact, auto.argv[0:2], auto.argv[3:]) == (EngineFactCommand, "DockerRootDir",
                                                                     ("sh", "-c"), ("k3doctor",))
    assert "docker" not in auto.argv[2] and '"$1"' in auto.argv[2]
