"""rack-free never passes on a partial reading: rocm-smi cut off or covering fewer GPUs than the
node has, a reading cut at the output cap, a process table glued to "No KFD PIDs", or a Docker
event it cannot read (which must not hide the containers it can)."""
from k3doctor.checks import rack  # noqa: F401  (registers rack-free)

from k3doctor import testing
from k3doctor.inventory.types import Settings
from k3doctor.readings import CommandReading, DockerReading, Readings
from k3doctor.registry import REGISTRY
from k3doctor.results import Status
from tests.corpus import load
from tests.unit.test_check_rack import NO_SLURM

CHECK = REGISTRY.checks["rack-free"]
NOW = 1760000000.0
BANNER = "=" * 28 + " ROCm System Management Interface " + "=" * 28 + "\n"
END = "=" * 90 + "\n" + "=" * 34 + " End of ROCm SMI Log " + "=" * 35 + "\n"
NO_PIDS = BANNER + "No KFD PIDs currently running\n" + END


def memuse(*percents):
    return BANNER + "".join(f"GPU[{g}]\t\t: GPU Memory Allocated (VRAM%): {p}\n"
                            f"GPU[{g}]\t\t: GPU Memory Read/Write Activity (%): 0\n"
                            for g, p in enumerate(percents)) + END


def judge(mem=None, pids=NO_PIDS, events=(), containers=(), mem_truncated=False, gpus=4):
    r = Readings({
        "docker": DockerReading(containers=[{"Id": "c", "Names": ["/k3ep16"], "State": "running"}, *containers],
                                events=list(events), now=NOW),
        "kfd": {},
        "uid": CommandReading("id -u", 0, "0\n", ""),  # read as root: an empty process list means no process
        "pidns": CommandReading("readlink /proc/self/ns/pid", 0, "pid:[4026531836]\n", ""),  # on the host
        "pids": CommandReading("rocm-smi --showpids", 0, pids, ""),
        "memuse": CommandReading("rocm-smi --showmemuse", 0, memuse(0, 0, 0, 0) if mem is None else mem, "",
                                 truncated=mem_truncated),
        "busy": {},  # no gpu_busy_percent on these cards
        **NO_SLURM,
    })
    return testing.judge(CHECK, r, node="ct13", settings=Settings(container="k3ep16", gpus_per_node=gpus))


def statuses(verdicts):
    return [v.status for v in verdicts]


def test_the_complete_healthy_reading_passes():
    assert statuses(judge()) == [Status.PASS]


def test_memuse_cut_before_the_busy_gpu_is_an_error_not_a_pass():
    full = memuse(0, 0, 95, 0)
    assert statuses(judge(full)) == [Status.FAIL]
    [v] = judge(full[: full.index("GPU[2]")])
    assert v.status == Status.ERROR and "rocm-smi --showmemuse not readable" in v.message and "cut off" in v.message


def test_memuse_of_fewer_gpus_than_the_node_has_is_an_error():
    [v] = judge(memuse(0, 0))
    assert v.status == Status.ERROR and "not GPU[2], GPU[3] (the node has 4 GPU(s))" in v.message
    assert statuses(judge(memuse(0, 0), gpus=2)) == [Status.PASS]


def test_a_reading_cut_at_the_output_cap_is_an_error_even_if_it_parses():
    [v] = judge(mem_truncated=True)
    assert v.status == Status.ERROR and "output cap (cut off, not judged)" in v.message


def test_negative_vram_percent_is_an_error_not_a_pass():
    [v] = judge(memuse(0, -95, 0, 0))
    assert v.status == Status.ERROR and "'-95' is negative" in v.message


def test_no_kfd_pids_after_a_process_table_is_an_error_not_free():
    table = load("rocm-smi-showpids-spaces.txt")
    glued = table.replace("=" * 90 + "\n", "No KFD PIDs currently running\n" + "=" * 90 + "\n", 1)
    [v] = judge(pids=glued)
    assert v.status == Status.ERROR and "rocm-smi --showpids not readable" in v.message


def test_event_with_a_non_string_action_is_an_error_and_containers_are_still_judged():
    bad = {"Type": "container", "Action": ["create"], "time": NOW - 60,
           "Actor": {"ID": "abc", "Attributes": {"name": "intruder"}}}
    foreign = {"Id": "d", "Names": ["/sglang-bench"], "State": "running", "Status": "Up 1 hour", "Image": "sglang"}
    verdicts = judge(events=[bad], containers=[foreign])
    assert sorted(statuses(verdicts), key=str) == [Status.ERROR, Status.FAIL]
    error = next(v for v in verdicts if v.status == Status.ERROR)
    assert "docker events not readable" in error.message and "Action is not a string" in error.message
    assert any("sglang-bench" in v.message for v in verdicts if v.status == Status.FAIL)
