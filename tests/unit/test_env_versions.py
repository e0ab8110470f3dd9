"""env-versions: the §29 environment rules on both sides of their version edge, and strict where a version is unknown.

Versions are read in the container (RCCL's soname, ROCm's .info/version, aiter/ATOM metadata,
`amd-smi version`) and from the host's kernel release; each rule row states the range it holds for.
"""
import os
import subprocess

import pytest
from k3doctor.checks import env_versions  # noqa: F401  (registers the check)

from k3doctor import testing
from k3doctor.views.container import record_from_inspect
from k3doctor.views.env_rules import EDGES, RULES, judge, names_read
from k3doctor.views.versions import parse_probe
from k3doctor.parsers import ParseError
from k3doctor.readings import CommandReading, ContainerReading, FileReading
from k3doctor.registry import REGISTRY
from k3doctor.results import Status

CHECK = REGISTRY.checks["env-versions"]
ROCM_70 = "rocm=7.0.2-56\nrccl=librccl.so.1.0.70002\n"
ROCM_714 = "rocm=7.14.0-17\nrccl=librccl.so.1.0.71400\n"
HEALTHY = {"NCCL_MNNVL_ENABLE": "1", "NCCL_CUMEM_ENABLE": "1", "AITER_LOG_LEVEL": "WARNING"}


def readings(env: dict, probe: str = ROCM_714, probe_rc: int = 0, kernel: str | None = "6.8.0-60-generic\n",
             ranks: str = "@notrunning\n"):
    attrs = {"Name": "/k3ep16", "Id": "c0ffee", "Image": "sha256:1", "Config": {
        "Image": "rocm/fw-bringup:gfx1250-atom-20260918-ep8", "Env": [f"{k}={v}" for k, v in env.items()],
        "Cmd": ["sleep", "infinity"]}, "State": {"Running": True, "Status": "running"}, "HostConfig": {},
        "Mounts": []}
    keep = names_read()
    return {"container": ContainerReading(record_from_inspect(attrs, keep)),
            "ranks": CommandReading("sh", 0, ranks, ""),
            "versions": CommandReading("docker exec k3ep16 sh -c ...", probe_rc, probe,
                                       "" if probe_rc == 0 else "boom"),
            "kernel": FileReading("/proc/sys/kernel/osrelease", kernel)}


def run(env, probe=ROCM_714, **params):
    return testing.judge(CHECK, readings(env, probe), **params)


def rules_of(verdicts):
    return sorted((v.status.value, v.evidence["rule"], v.evidence["variable"]) for v in verdicts
                  if v.status != Status.PASS)


EDGE_SET = {"version_edges": {"rccl-8444": "7.10", "rccl-9464": "7.12", "atom-dspark-config": "0.3"}}


def test_the_probe_is_parsed_into_versions():
    found = parse_probe("rocm=7.14.0-17\nrccl=librccl.so.1.0.71400\naiter=0.1.7.dev12+g1a2b\natom=0.2.1\n"
                        "amdsmi=AMDSMI Tool: 27.1.0+6f1e | AMDSMI Library version: 27.1.0 | ROCm version: 10.1.0\n",
                        "6.8.0-60-generic\n")
    assert {n: f.version for n, f in found.items()} == {
        "rocm": (7, 14, 0), "rccl": (7, 14, 0), "aiter": (0, 1, 7), "atom": (0, 2, 1), "amdsmi": (27, 1, 0),
        "kernel": (6, 8, 0)}
    assert found["rccl"].source == "librccl.so.1.0.71400"
    with pytest.raises(ParseError):
        parse_probe("garbage from a broken shell\n", None)


@pytest.mark.parametrize("probe, edges, expected", [
    # NCCL_MNNVL_ENABLE and NCCL_CUMEM_ENABLE unset: a fault on RCCL before #8444 only (§29, §0.2)
    (ROCM_70, EDGE_SET, [("FAIL", "ENV-CUMEM-UNSET", "NCCL_CUMEM_ENABLE"), ("FAIL", "ENV-MNNVL-UNSET",
                                                                             "NCCL_MNNVL_ENABLE")]),
    (ROCM_714, EDGE_SET, []),
    # the edge's first release not known (the default): the strict rule, said so
    (ROCM_714, {}, [("FAIL", "ENV-CUMEM-UNSET", "NCCL_CUMEM_ENABLE"), ("FAIL", "ENV-MNNVL-UNSET",
                                                                        "NCCL_MNNVL_ENABLE")]),
    # RCCL not found in the container: strict, said so
    ("rocm=7.14.0\n", EDGE_SET, [("FAIL", "ENV-CUMEM-UNSET", "NCCL_CUMEM_ENABLE"),
                                 ("FAIL", "ENV-MNNVL-UNSET", "NCCL_MNNVL_ENABLE")]),
])
def test_unset_mnnvl_and_cumem_are_a_fault_only_before_pr_8444(probe, edges, expected):
    verdicts = run({"AITER_LOG_LEVEL": "WARNING"}, probe, **({"version_edges": edges["version_edges"]} if edges
                                                             else {}))
    assert rules_of(verdicts) == expected
    if expected and probe == ROCM_70:
        assert "rccl 7.0.2 (librccl.so.1.0.70002) is before 7.10, rocm-systems PR #8444" in verdicts[0].message
    elif expected and not edges:
        assert "the first release with rocm-systems PR #8444" in verdicts[0].message and "strict" in verdicts[0].message
    elif expected:
        assert "rccl version unknown (not found): the strict rule applies" in verdicts[0].message


@pytest.mark.parametrize("probe", [ROCM_70, ROCM_714])
def test_explicit_zero_is_a_fault_on_every_rccl(probe):
    env = {**HEALTHY, "NCCL_MNNVL_ENABLE": "0", "NCCL_CUMEM_ENABLE": "0"}
    assert rules_of(run(env, probe, **EDGE_SET)) == [("FAIL", "ENV-CUMEM-OFF", "NCCL_CUMEM_ENABLE"),
                                                     ("FAIL", "ENV-MNNVL-OFF", "NCCL_MNNVL_ENABLE")]


@pytest.mark.parametrize("probe, expected", [
    (ROCM_70, [("FAIL", "ENV-AMD-SMI-LIB-UALOE-OFF", "RCCL_USE_AMD_SMI_LIB")]),  # before #9464: UALoE off
    (ROCM_714, [("WARN", "ENV-AMD-SMI-LIB", "RCCL_USE_AMD_SMI_LIB")]),  # since: not needed
])
def test_rccl_use_amd_smi_lib_disables_ualoe_only_before_pr_9464(probe, expected):
    assert rules_of(run({**HEALTHY, "RCCL_USE_AMD_SMI_LIB": "1"}, probe, **EDGE_SET)) == expected


@pytest.mark.parametrize("probe, expected", [
    ("rocm=7.12.1\n", []),  # MSCCL/NPKit still in RCCL before ROCm 7.13
    ("rocm=7.13.0\n", [("WARN", "ENV-CHECK-POINTERS-RENAMED", "NCCL_CHECK_POINTERS"),
                       ("WARN", "ENV-MSCCL-NPKIT-REMOVED", "NPKIT_DUMP_DIR"),
                       ("WARN", "ENV-MSCCL-NPKIT-REMOVED", "RCCL_MSCCL_ENABLE")]),
    ("", [("WARN", "ENV-CHECK-POINTERS-RENAMED", "NCCL_CHECK_POINTERS"),  # ROCm unknown: strict
          ("WARN", "ENV-MSCCL-NPKIT-REMOVED", "NPKIT_DUMP_DIR"),
          ("WARN", "ENV-MSCCL-NPKIT-REMOVED", "RCCL_MSCCL_ENABLE")]),
])
def test_msccl_and_npkit_variables_are_inert_from_rocm_7_13(probe, expected):
    env = {**HEALTHY, "RCCL_MSCCL_ENABLE": "1", "NPKIT_DUMP_DIR": "/tmp/npkit", "NCCL_CHECK_POINTERS": "1"}
    assert rules_of(run(env, probe + "rccl=librccl.so.1.0.71400\n", **EDGE_SET)) == expected


@pytest.mark.parametrize("probe, expected", [
    ("atom=0.2.9\n", []),  # before ecb8e6dae the variables are read
    ("atom=0.3.0\n", [("WARN", "ENV-DSPARK-MOVED", "ATOM_DSPARK_Q_BUCKETS")]),
])
def test_dspark_variables_moved_to_dspark_config(probe, expected):
    env = {**HEALTHY, "ATOM_DSPARK_Q_BUCKETS": "8", "ATOM_DSPARK_DISABLE_COMPILE": "1"}  # the latter still read
    assert rules_of(run(env, ROCM_714 + probe, **EDGE_SET)) == expected


@pytest.mark.parametrize("env, expected", [
    ({"AITER_LOG_LEVEL": "WARN"}, [("WARN", "ENV-AITER-LOG-LEVEL", "AITER_LOG_LEVEL")]),
    ({"AITER_LOG_LEVEL": "warning"}, []),  # upper-cased by aiter: valid
    ({"TMPDIR": "/dev/shm/k3"}, [("WARN", "ENV-TMPDIR-SHM", "TMPDIR")]),
    ({"TMPDIR": "/tmp"}, []),
    ({"MORI_CCO_FABRIC_DISABLE": "1"}, [("FAIL", "ENV-MORI-FABRIC-DISABLE", "MORI_CCO_FABRIC_DISABLE")]),
    ({"MORI_VPOD_ID": "2", "MORI_CCO_FABRIC_LENIENT": "1"}, [("WARN", "ENV-MORI-LENIENT", "MORI_CCO_FABRIC_LENIENT"),
                                                             ("WARN", "ENV-MORI-MANUAL", "MORI_VPOD_ID")]),
])
def test_the_version_independent_rows_of_section_29(env, expected):
    assert rules_of(run({**HEALTHY, **env}, **EDGE_SET)) == expected


def test_a_healthy_environment_passes_and_says_what_it_read():
    [v] = run(HEALTHY, ROCM_714 + "atom=0.3.0\n", **EDGE_SET)
    assert v.status == Status.PASS and "rocm 7.14.0" in v.message and "not read: aiter, amdsmi" in v.message


def test_an_unreadable_version_probe_is_an_error_not_a_pass():
    [v] = testing.judge(CHECK, readings(HEALTHY, "", probe_rc=2))
    assert v.status == Status.ERROR and "version probe" in v.message


def test_bad_version_edges_are_refused():
    assert "no edge 'rccl-9999'" in CHECK.param_problem("version_edges", {"rccl-9999": "7.1"})
    assert "is not a version" in CHECK.param_problem("version_edges", {"rccl-8444": "soon"})
    assert CHECK.param_problem("version_edges", {"rccl-8444": "7.10"}) is None


def test_every_edge_a_rule_names_exists_and_every_rule_id_is_unique():
    assert {rule.edge for rule in RULES} - {None} <= set(EDGES)
    assert len({rule.id for rule in RULES}) == len(RULES)
    # the strict row of a variable comes before its everlasting one (first row that fires is the one reported)
    found = parse_probe("", None)
    assert [r.id for r, *_ in judge({"RCCL_USE_AMD_SMI_LIB": "1", **HEALTHY}, found, EDGES)] == [
        "ENV-AMD-SMI-LIB-UALOE-OFF"]


def test_every_rule_row_is_explainable():
    for rule in RULES:
        assert rule.id in REGISTRY.remediations and rule.applies in REGISTRY.remediations[rule.id].text


def test_mori_vpod_id_on_some_ranks_only_is_a_fault():
    """§29: `MORI_VPOD_ID set on N/M ranks - manual vPOD grouping must be all-or-none across the job`."""
    env = "".join(f"{k}={v}\n" for k, v in HEALTHY.items())
    ranks = (f"@rank 1004 ATOM::DP4TP0\n{env}MORI_VPOD_ID=2\n@rank 1005 ATOM::DP5TP0\n{env}")
    verdicts = testing.judge(CHECK, readings(HEALTHY, ranks=ranks), **EDGE_SET)
    assert sorted((v.status.value, v.remediation) for v in verdicts) == [("FAIL", "ENV-MORI"), ("WARN", "ENV-MORI")]
    assert any("MORI_VPOD_ID is set on rank pid 1004 but not on the other ranks" in v.message for v in verdicts)


@pytest.mark.parametrize("probe, expected", [
    ("rocm=7.13.1\n", []),  # before ROCm 7.14 the allocator setting is harmless
    ("rocm=7.14.0\n", [("WARN", "ENV-HIP-EXPANDABLE-SEGMENTS", "PYTORCH_HIP_ALLOC_CONF")]),
    ("", [("WARN", "ENV-HIP-EXPANDABLE-SEGMENTS", "PYTORCH_HIP_ALLOC_CONF")]),  # ROCm unknown: strict
])
def test_expandable_segments_hang_on_rocm_7_14(probe, expected):
    """§29 (pytorch/pytorch #192259): `Tensor.to('cuda')` hangs in hsaKmtMemoryVaMap on ROCm 7.14."""
    env = {**HEALTHY, "PYTORCH_HIP_ALLOC_CONF": "garbage_collection_threshold:0.8, expandable_segments:True"}
    assert rules_of(run(env, probe + "rccl=librccl.so.1.0.71400\n", **EDGE_SET)) == expected
    off = {**HEALTHY, "PYTORCH_HIP_ALLOC_CONF": "expandable_segments:False"}
    assert rules_of(run(off, probe + "rccl=librccl.so.1.0.71400\n", **EDGE_SET)) == []


def test_non_default_rccl_tuning_is_information_in_the_pass():
    """§29: RCCL_DDA_*, RCCL_CE_*, RCCL_IGNORE_ARCH_TABLE, NCCL_MIN/MAX_CTAS are "non-default tuning" [INFO]."""
    [v] = run({**HEALTHY, "RCCL_IGNORE_ARCH_TABLE": "1", "RCCL_CE_ALLREDUCE": "0"}, **EDGE_SET)
    assert v.status == Status.PASS
    assert "INFO: container k3ep16: RCCL_CE_ALLREDUCE is set: non-default RCCL tuning" in v.message
    assert "RCCL_IGNORE_ARCH_TABLE is set: non-default RCCL tuning" in v.message
    [v] = run(HEALTHY, **EDGE_SET)
    assert "non-default RCCL tuning" not in v.message


def libs_listing(tmp_path, host_major, image_major):
    """Run the real listing script in a local shell: the image's ROCm at ROCM_PATH, a host ROCm on LD_LIBRARY_PATH."""
    from k3doctor.views.versions import amdsmi_libs
    host, image = tmp_path / "host-rocm/lib", tmp_path / "rocm/lib"
    for directory, major in ((host, host_major), (image, image_major)):
        directory.mkdir(parents=True)
        for name in (f"libamd_smi.so.{major}", f"libamd_smi.so.{major}.0.0", "libamd_smi.so"):
            (directory / name).write_text("")
    inner = amdsmi_libs("k3ep16").inner
    env = {"PATH": os.environ["PATH"], "ROCM_PATH": str(tmp_path / "rocm"), "LD_LIBRARY_PATH": f"{host}:"}
    return subprocess.run(list(inner), capture_output=True, text=True, timeout=10, env=env).stdout


def test_libamd_smi_of_two_generations_on_one_library_path_is_a_warning(tmp_path):
    """§29: amd-smi 27.0 renamed the SONAME libamd_smi.so.26 -> .27; an image/host mix through LD_LIBRARY_PATH."""
    listing = libs_listing(tmp_path, 26, 27)
    r = {**readings(HEALTHY), "amdsmi_libs": CommandReading("docker exec k3ep16 sh -c ...", 0, listing, "")}
    found = [v for v in testing.judge(CHECK, r, **EDGE_SET) if v.status != Status.PASS]
    [v] = found
    assert (v.status, v.remediation) == (Status.WARN, "ENV-AMD-SMI-SONAME-MIX")
    assert f"libamd_smi.so.26 in {tmp_path}/host-rocm/lib; libamd_smi.so.27 in {tmp_path}/rocm/lib" in v.message


def test_one_libamd_smi_generation_passes_and_an_unreadable_listing_is_an_error(tmp_path):
    listing = libs_listing(tmp_path, 27, 27)
    r = {**readings(HEALTHY), "amdsmi_libs": CommandReading("docker exec k3ep16 sh -c ...", 0, listing, "")}
    assert [v.status for v in testing.judge(CHECK, r, **EDGE_SET)] == [Status.PASS]
    r["amdsmi_libs"] = CommandReading("docker exec k3ep16 sh -c ...", 0, "garbage\n", "")
    assert [v.status for v in testing.judge(CHECK, r, **EDGE_SET)] == [Status.ERROR]


@pytest.mark.parametrize("rocr, hip, failed", [
    ("4,5,6,7", "4,5,6,7", True),  # §31.3: the node's numbers given to HIP, which indexes ROCr's 4 GPUs
    ("4,5,6,7", "0,1,2,3", False), ("0,1", "1, 2", True), ("GPU-aa11,GPU-bb22", "1", False),
    ("4,5,6,7", None, False), (None, "4,5", False), ("", "3", False), ("0,1", "GPU-aa11", False)])
def test_a_hip_index_past_the_rocr_list_fails(rocr, hip, failed):
    env = {**HEALTHY, **({"ROCR_VISIBLE_DEVICES": rocr} if rocr is not None else {}),
           **({"HIP_VISIBLE_DEVICES": hip} if hip is not None else {})}
    verdicts = run(env)
    assert rules_of(verdicts) == ([("FAIL", "ENV-HIP-PAST-ROCR", "HIP_VISIBLE_DEVICES")] if failed else [])
    if failed:
        assert f"HIP_VISIBLE_DEVICES={hip} with ROCR_VISIBLE_DEVICES={rocr}" in verdicts[0].message
        assert verdicts[0].remediation == "ENV-VISIBLE-DEVICES"


def test_rocr_visible_devices_is_read_for_the_two_variable_rule():
    assert {"ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"} <= set(names_read())
