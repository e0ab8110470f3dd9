"""rack-free judged on Docker API dicts (corpus event format), KFD proc paths and showpids corpus text."""
import json
import os
import subprocess
import sys

from k3doctor.checks import rack

from k3doctor import testing
from k3doctor.inventory.types import Settings
from k3doctor.readings import CommandReading, Docker, DockerReading, FileReading, Readings, Unavailable
from k3doctor.registry import REGISTRY
from k3doctor.results import Status
from tests.corpus import load

CHECK = REGISTRY.checks["rack-free"]
NOW = 1473108000.0  # a few minutes after the corpus events (time 1473106693..1473107902)
NO_PIDS = ("==== ROCm System Management Interface ====\n==== KFD Processes ====\n"
           "No KFD PIDs currently running\n==== End of ROCm SMI Log ====\n")


def container(name, state="running", status="Up 2 hours", created=NOW - 7200, image="busybox"):
    return {"Id": name * 4, "Names": [f"/{name}"], "Image": image, "State": state, "Status": status,
            "Created": created, "Labels": {}}


def event(name, action, when, kind="container"):
    """An event in the Docker API/SDK shape (as in the corpus' docker-events-json-docker112.jsonl)."""
    return {"status": action, "id": f"{name}-id", "from": "img", "Type": kind, "Action": action,
            "Actor": {"ID": f"{name}-id", "Attributes": {"image": "img", "name": name}},
            "time": int(when), "timeNano": int(when * 1e9)}


def memuse(*percents):
    """rocm-smi --showmemuse in its GPU[n] line form (as rocm-smi 6.x prints it)."""
    return ("==== ROCm System Management Interface ====\n==== Current Memory Use ====\n"
            + "".join(f"GPU[{g}]\t\t: GPU Memory Allocated (VRAM%): {p}\n"
                      f"GPU[{g}]\t\t: GPU Memory Read/Write Activity (%): 0\n" for g, p in enumerate(percents))
            + "==== End of ROCm SMI Log ====\n")


IDLE = memuse(0, 0, 0, 0)
SQUEUE = "squeue --noheader --all --nodelist=localhost --states=all --format=%A|%i|%u|%T|%b|%j"
# What FIND_TOOL says on a node without Slurm (a Docker rack): the reading every test below gets by default.
NO_SQUEUE = CommandReading(SQUEUE, 127, "", "k3doctor: squeue is neither at /usr/bin/squeue nor on PATH "
                                             "(/usr/sbin:/usr/bin)\n")


# A node that runs no Slurm, as rack-free's Slurm readings show it (other rack-free tests start from it).
NO_SLURM = {"slurm": NO_SQUEUE, "slurm_uid": CommandReading("id -u", 0, "0\n", ""),
            **{f"slurm_conf:{path}": False for path in rack.SLURM_CONFIG_FILES}}


def squeue(*lines, rc=0, stderr=""):
    return CommandReading(SQUEUE, rc, "".join(f"{line}\n" for line in lines), stderr)


def readings(containers=(), events=(), kfd=(), pids=NO_PIDS, pids_rc=0, mem=IDLE, mem_rc=0, uid="0",
             pidns="pid:[4026531836]", busy=(0, 0, 0, 0), slurm=NO_SQUEUE, slurm_uid="0", slurm_conf=()):
    return Readings({
        "slurm": slurm,
        "slurm_uid": CommandReading("id -u", 0, f"{slurm_uid}\n", ""),
        **{f"slurm_conf:{path}": path in slurm_conf for path in rack.SLURM_CONFIG_FILES},
        "docker": DockerReading(containers=list(containers), events=list(events), now=NOW),
        "kfd": {f"/sys/class/kfd/kfd/proc/{p}": None for p in kfd},
        "pids": CommandReading("rocm-smi --showpids", pids_rc, pids, "" if pids_rc == 0 else "boom"),
        "memuse": CommandReading("rocm-smi --showmemuse", mem_rc, mem, "" if mem_rc == 0 else "boom"),
        "uid": CommandReading("id -u", 0, f"{uid}\n", ""),
        "pidns": CommandReading("readlink /proc/self/ns/pid", 0, f"{pidns}\n", ""),
        "busy": {f"/sys/class/drm/card{c}/device/gpu_busy_percent": FileReading("gpu_busy_percent", f"{pct}\n")
                 for c, pct in enumerate(busy)},
    })


def judge(r, **params):
    return testing.judge(CHECK, r, node="ct13", settings=Settings(container="k3ep16"), **params)


def bad(verdicts):
    return [(v.status, v.remediation) for v in verdicts if v.status != Status.PASS]


def test_only_our_container_passes():
    [v] = judge(readings([container("k3ep16")], [event("k3ep16", "create", NOW - 60)]))
    assert v.status == Status.PASS


def test_never_filters_by_our_name_running_foreign_container_fails_with_state_and_age():
    [v] = judge(readings([container("k3ep16"), container("sglang-bench", status="Up 3 hours",
                                                           created=NOW - 3 * 3600)]))
    assert (v.status, v.remediation) == (Status.FAIL, "RACK-BUSY")
    assert v.message == "foreign container sglang-bench (busybox): state running (Up 3 hours); created 3 h ago"


def test_created_never_started_is_caught_and_says_why():
    [v] = judge(readings([container("k3ep16"), container("kimi-k3-dp8", "created", "Created", NOW - 120)],
                         [event("kimi-k3-dp8", "create", NOW - 120)]))
    assert v.status == Status.FAIL
    assert "created but never started" in v.message and "0 % GPU use" in v.message
    assert v.evidence["recent events"] == ["create 2 min ago"]


def test_exited_foreign_container_still_blocks():
    assert bad(judge(readings([container("old", "exited", "Exited (0) 2 days ago")]))) == \
        [(Status.FAIL, "RACK-BUSY")]


def test_corpus_events_foreign_create_start_in_window_fail_even_if_removed():
    events = [json.loads(line) for line in load("docker-events-json-docker112.jsonl").splitlines()]
    [v] = judge(readings(events=events))  # alpine: start (and kill/die/stop) ~22 min before NOW
    assert v.status == Status.FAIL
    assert v.message.startswith("foreign container alpine had start 21 min ago within the last 30 min")


def test_events_outside_window_or_of_other_actions_are_ignored():
    events = [event("x", "create", NOW - 31 * 60), event("y", "die", NOW - 10),
              event("bridge", "create", NOW - 10, kind="network")]
    assert judge(readings(events=events))[0].status == Status.PASS
    assert judge(readings(events=[event("x", "create", NOW - 31 * 60)]), window_min=45)[0].status == Status.FAIL


def test_full_engine_event_buffer_narrows_the_pass_to_what_it_holds():
    """A busy healthy node (healthchecks, execs) fills dockerd's 256 events in minutes: no WARN
    without a foreign container in them, but the PASS says how far back the history reaches."""
    events = [event("k3ep16", "exec_start: env", NOW - 300 + i) for i in range(256)]  # dockerd keeps 256
    [v] = judge(readings([container("k3ep16")], events))
    assert v.status == Status.PASS, v.message
    assert ("no foreign create/start in the 5 min the engine's history holds (dockerd keeps its last 256 "
            "events; the window asked is 30 min)") in v.message
    [whole] = judge(readings([container("k3ep16")], events[:-1]))
    assert whole.status == Status.PASS and "no foreign create/start in the last 30 min," in whole.message
    older = [event("k3ep16", "exec_start: env", NOW - 1900)] + events[1:]
    assert "in the last 30 min," in judge(readings([container("k3ep16")], older))[0].message
    foreign = events[1:] + [event("alice-bench", "create", NOW - 10)]
    assert [v.status for v in judge(readings([container("k3ep16")], foreign))] == [Status.FAIL]


def test_gpu_process_from_showpids_corpus_and_kfd():
    """The seven `test_ref` rows hold /dev/kfd at 0 bytes on 0 GPUs: since §29 (0.2) such holders are INFO, never a
    foreign job (they used to be seven more FAILs); the 165 GiB pt_main_thread is the one job on the GPUs."""
    showpids = load("rocm-smi-showpids-spaces.txt")
    verdicts = judge(readings([container("k3ep16")], kfd=[1168514], pids=showpids))
    assert [v.status for v in verdicts] == [Status.FAIL]
    big = next(v for v in verdicts if v.evidence["pid"] == 1168514)
    assert big.message == ("GPU process pid 1168514 pt_main_thread on 1 GPU(s) holds 165.2 GiB VRAM: "
                           "the GPUs are in use")
    assert big.evidence["in /sys/class/kfd/kfd/proc"] is True


def test_kfd_only_process_is_named_by_pid():
    [v] = judge(readings(kfd=[4242]))
    assert v.status == Status.FAIL and "pid 4242" in v.message and "not in rocm-smi" in v.message


def test_unreadable_source_errors_but_does_not_hide_other_findings():
    r = readings([container("intruder")], pids="", pids_rc=127)
    verdicts = judge(r)
    assert sorted(v.status.value for v in verdicts) == ["ERROR", "FAIL"]
    assert any("rocm-smi --showpids not readable" in v.message for v in verdicts)
    r = Readings({"docker": Unavailable("engine down"), "kfd": {}, "pids": CommandReading("x", 0, NO_PIDS, ""),
                  "memuse": CommandReading("y", 0, IDLE, ""), "uid": CommandReading("id -u", 0, "0\n", ""),
                  "pidns": CommandReading("readlink /proc/self/ns/pid", 0, "pid:[4026531836]\n", ""), "busy": {},
                  **NO_SLURM})
    [v] = judge(r)
    assert v.status == Status.ERROR and "docker engine not readable" in v.message


def test_garbled_showpids_is_an_error_not_a_pass():
    [v] = judge(readings(pids="PID PROCESS NAME\ngarbage\n"))
    assert v.status == Status.ERROR


def test_reads_follow_window_and_settings():
    rack_free = REGISTRY.checks["rack-free"]
    specs = rack_free.readings_for(Settings(container="mine", checks={"rack-free": {"window_min": 10}}))
    assert specs["docker"] == Docker(events_since_s=600)
    assert rack_free.readings_for(Settings())["docker"].events_since_s == 30 * 60  # §3: the last 30 min
    # §29: at the configured path, else on the node's PATH (tests/unit/test_tool_paths.py runs the lookup)
    assert specs["pids"].argv[4:] == ("/opt/rocm/bin/rocm-smi", "--showpids")
    assert specs["memuse"].argv[4:] == ("/opt/rocm/bin/rocm-smi", "--showmemuse")


def test_idle_vram_passes_and_says_low_vram_proves_nothing():
    [v] = judge(readings([container("k3ep16")], mem=memuse(0, 1, 10, 0)))  # 10 % is InferenceX's "clean"
    assert v.status == Status.PASS
    assert "VRAM at most 10 % per GPU (low VRAM alone would not prove the node free" in v.message


def test_resident_vram_without_a_process_fails_per_gpu_with_its_percent():
    verdicts = judge(readings([container("k3ep16")], mem=memuse(0, 31, 0, 11)))
    # §29 (0.2): VRAM held with no owning process is an orphaned KFD context, with its own remedy (ForceRestart)
    assert [(v.status, v.gpu, v.remediation) for v in verdicts] == [(Status.FAIL, 1, "RACK-ORPHANED-VRAM"),
                                                                    (Status.FAIL, 3, "RACK-ORPHANED-VRAM")]
    assert verdicts[0].message.startswith("rocm-smi GPU[1] has 31 % VRAM allocated (max_vram_pct 10) and no process "
                                          "owns it: an orphaned KFD context")
    assert "0 % would prove nothing" in verdicts[0].message
    assert [v.gpu for v in judge(readings(mem=memuse(0, 31, 0, 11)), max_vram_pct=20)] == [1]


def test_vram_of_a_named_gpu_process_is_not_reported_twice():
    [v] = judge(readings(kfd=[4242], mem=memuse(38, 0, 0, 0)))
    assert v.status == Status.FAIL and "pid 4242" in v.message


def test_unreadable_showmemuse_is_an_error_for_that_source_only():
    verdicts = judge(readings([container("intruder")], mem="", mem_rc=2))
    assert sorted(v.status.value for v in verdicts) == ["ERROR", "FAIL"]
    assert any(v.message.startswith("rocm-smi --showmemuse not readable") for v in verdicts)
    [v] = judge(readings(mem="WARNING: No JSON data to report\n"))
    assert v.status == Status.ERROR and "rocm-smi --showmemuse not readable" in v.message
    [v] = judge(readings(mem=memuse(0, 0, 0, 0).replace(": 0\n", ": N/A\n", 1)))
    assert (v.status, v.gpu) == (Status.ERROR, 0) and "VRAM use is unknown" in v.message


AGENT_PIDS = ("==== ROCm System Management Interface ====\n==== KFD Processes ====\nKFD process information:\n"
              "PID\tPROCESS NAME\tGPU(s)\tVRAM USED\tSDMA USED\tCU OCCUPANCY\n"
              "2211\tgpu-agent\t4\t0\t0\t0\n3344\tpython3\t1\t0\t0\t0\n==== End of ROCm SMI Log ====\n")


def test_zero_byte_kfd_holders_are_info_and_allow_listed_agents_are_named():
    """§29 (legacy-rocm-build #4411): rocm-smi --showpids lists mere /dev/kfd openers such as metrics agents."""
    [v] = judge(readings([container("k3ep16")], kfd=[2211, 3344], pids=AGENT_PIDS))
    assert v.status == Status.PASS
    assert "INFO: monitoring agent pid 2211 gpu-agent holds /dev/kfd at 0 bytes VRAM" in v.message
    assert "INFO: 0-byte KFD holder (not a job) pid 3344 python3" in v.message


def test_an_empty_process_list_read_as_non_root_is_an_error_not_free():
    """§29 (rocm-systems PR #9281): the SMI tools list no processes to a caller without rights."""
    verdicts = judge(readings([container("k3ep16")], uid="1000"))
    assert [v.status for v in verdicts] == [Status.ERROR]
    assert "read as uid 1000, not root" in verdicts[0].message
    assert [v.status for v in judge(readings([container("k3ep16")], uid="0"))] == [Status.PASS]


def test_an_empty_process_list_read_in_a_pid_namespace_is_an_error_not_free():
    """§29 (rocm-systems PR #3752): `amd-smi process` in a PID namespace says "No running processes detected" even
    as root; only the host's own PID namespace (inode 0xEFFFFFFC) sees every process."""
    verdicts = judge(readings([container("k3ep16")], pidns="pid:[4026532711]"))
    assert [v.status for v in verdicts] == [Status.ERROR]
    assert "read in PID namespace pid:[4026532711], not the host's pid:[4026531836]" in verdicts[0].message
    # a process the namespace does see is a finding of its own: the namespace only spoils an empty list
    assert bad(judge(readings([container("k3ep16")], kfd=[4242], pids=NO_PIDS, pidns="pid:[4026532711]"))) == [
        (Status.FAIL, "RACK-BUSY")]


def test_a_gpu_100_percent_busy_with_nothing_running_is_a_stalled_queue():
    """§29 (legacy-rocm-build #6530): "100 %" utilization at idle with no process on the GPU is a stalled queue,
    a WARN on that card; busy GPUs with a process on the node are that process's (already a FAIL)."""
    verdicts = judge(readings([container("k3ep16")], busy=(0, 100, 3, 0)))
    assert [(v.status, v.gpu, v.remediation) for v in verdicts] == [(Status.WARN, 1, "RACK-STALLED-QUEUE")]
    assert "card1 reads 100 % busy (gpu_busy_percent) with no GPU process" in verdicts[0].message
    assert bad(judge(readings([container("k3ep16")], busy=(0, 99, 0, 0)))) == []
    assert bad(judge(readings([container("k3ep16")], busy=(0, 99, 0, 0)), stalled_busy_pct=99)) == [
        (Status.WARN, "RACK-STALLED-QUEUE")]
    assert bad(judge(readings([container("k3ep16")], kfd=(4242,), busy=(100, 100, 100, 100)))) == [
        (Status.FAIL, "RACK-BUSY")]
    assert bad(judge(readings([container("k3ep16")], busy=("garbage",)))) == [(Status.ERROR, None)]


# --- Slurm jobs on the node (reference §30: pyxis/enroot jobs are not in `docker ps`) ---------------------------
UNCONFIGURED = ("squeue: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
                "squeue: error: fetch_config: DNS SRV lookup failed\n"
                "squeue: fatal: Could not establish a configuration source\n")


def test_a_foreign_slurm_job_on_the_node_fails_naming_job_user_and_gres():
    r = readings(slurm=squeue("4242|4242|alice|RUNNING|gres/gpu:8|kimi-agentx|c8",
                              "4243|4243|bob|PENDING|gres/gpu:8|next"))
    [v] = judge(r)
    assert (v.status, v.remediation) == (Status.FAIL, "RACK-BUSY")
    assert "Slurm job 4242 (kimi-agentx|c8) of alice is RUNNING" in v.message and "gres/gpu:8" in v.message
    assert v.evidence["job"] == "4242"  # the pending job holds nothing yet: not named


def test_a_job_allocated_before_its_gpu_processes_start_is_still_named():
    """An salloc whose image is still being imported holds no GPU, no VRAM, no container: Slurm alone knows."""
    [v] = judge(readings(slurm=squeue("77|77|carol|CONFIGURING|N/A|interactive")))
    assert v.status == Status.FAIL and "CONFIGURING" in v.message and v.evidence["gres"] is None


def test_an_array_element_is_named_as_its_users_see_it():
    [v] = judge(readings(slurm=squeue("5007|5000_7|dave|RUNNING|gres/gpu:8|sweep")))
    assert v.status == Status.FAIL and "Slurm job 5000_7 (sweep)" in v.message


def test_our_own_job_and_finished_jobs_pass_and_the_pass_says_slurm_was_read():
    r = readings(slurm=squeue("4242|4242|svc|RUNNING|gres/gpu:8|agentx", "4100|4100|bob|COMPLETED|gres/gpu:8|old",
                              "4101|4101|bob|CANCELLED|N/A|older", "4102|4102|bob|REQUEUED|N/A|again"))
    [v] = judge(r, own_slurm_jobs=["04242"])
    assert v.status == Status.PASS and "no other Slurm job" in v.message
    [v] = judge(readings(slurm=squeue()))
    assert v.status == Status.PASS and "no other Slurm job" in v.message


def test_a_health_check_leaves_slurms_own_allocations_alone():
    """`k3doctor node --slurm-drain` (slurm_jobs: ignore): a job Slurm placed there is no fault of the node."""
    [v] = judge(readings(slurm=squeue("4242|4242|alice|RUNNING|gres/gpu:8|agentx")), slurm_jobs="ignore")
    assert v.status == Status.PASS and "Slurm" not in v.message
    ignoring = Settings(container="k3ep16", checks={"rack-free": {"slurm_jobs": "ignore"}})
    assert not [name for name in CHECK.readings_for(ignoring) if name.startswith("slurm")]  # nothing asked either


def test_a_node_without_squeue_and_without_slurm_runs_no_slurm_and_says_so():
    [v] = judge(readings())
    assert v.status == Status.PASS and "no Slurm on the node" in v.message


def test_squeue_missing_on_a_node_slurm_manages_is_an_error():
    [v] = judge(readings(slurm_conf=("/run/slurm/conf/slurm.conf",)))
    assert v.status == Status.ERROR and "Slurm is configured on this node (/run/slurm/conf/slurm.conf)" in v.message


def test_squeue_without_any_slurm_configuration_is_no_slurm_node():
    """squeue installed on a node Slurm does not manage: its fatal() before any query (src/common/read_config.c)."""
    [v] = judge(readings(slurm=squeue(rc=1, stderr=UNCONFIGURED)))
    assert v.status == Status.PASS and "no Slurm configuration on the node" in v.message


def test_a_configless_cluster_whose_controller_does_not_answer_is_an_error():
    """The same fatal() after DNS named a configless server that did not answer: a Slurm node, jobs unknown."""
    down = ("squeue: error: fetch_config: Failed to fetch remote configs from slurmctld-a:6817: Connection refused\n"
            "squeue: fatal: Could not establish a configuration source\n")
    [v] = judge(readings(slurm=squeue(rc=1, stderr=down)))
    assert v.status == Status.ERROR and "Slurm job list not readable" in v.message
    [v] = judge(readings(slurm=squeue(rc=1, stderr=UNCONFIGURED), slurm_conf=("/etc/slurm/slurm.conf",)))
    assert v.status == Status.ERROR


def test_an_empty_list_read_as_another_user_proves_nothing():
    """PrivateData=jobs: Slurm shows a non-root caller its own jobs only; a foreign job it did show is still named."""
    [v] = judge(readings(slurm=squeue(), slurm_uid="1000"))
    assert v.status == Status.ERROR and "uid 1000, not root" in v.message
    [v] = judge(readings(slurm=squeue("4242|4242|alice|RUNNING|N/A|x"), slurm_uid="1000"))
    assert v.status == Status.FAIL


def test_squeue_that_fails_or_prints_what_it_never_prints_is_an_error_never_a_free_node():
    failing = squeue(rc=1, stderr="squeue: error: Unable to contact slurm controller (connect failure)\n")
    for reading in (failing, squeue("not a squeue line"), squeue("x1|x1|bob|RUNNING|N/A|job"),
                    squeue("9|9|bob|EXPEDITING|N/A|a state of a newer Slurm"),
                    CommandReading(SQUEUE, 0, "4242|4242|alice|RUNNING|N/A|cut", "")):
        [v] = judge(readings(slurm=reading))
        assert v.status == Status.ERROR and "Slurm job list not readable" in v.message, (reading, v)


def test_a_job_name_with_any_character_but_a_newline_is_one_line():
    [v] = judge(readings(slurm=squeue("8|8|eve|RUNNING|N/A|odd\x1cname\u2028here")))
    assert v.status == Status.FAIL and "odd\x1cname\u2028here" in v.message


def test_slurm_parameters_are_checked_and_reach_squeue_as_single_words():
    assert CHECK.param_problem("own_slurm_jobs", ["4242", 17]) is None
    for bad in (["$SLURM_JOB_ID"], ["4242_7"], ["\u0664\u0662"]):
        assert "Slurm job ids" in CHECK.param_problem("own_slurm_jobs", bad), bad
    assert CHECK.param_problem("slurm_node", "gpu-17.rack2") is None
    for bad in ("ct[13-17]", "-w", "a b", "a,b"):
        assert "one Slurm node name" in CHECK.param_problem("slurm_node", bad), bad
    settings = Settings(container="k3ep16", checks={"rack-free": {"slurm_node": "gpu17"}})
    slurm = CHECK.readings_for(settings)["slurm"]
    assert "--nodelist=gpu17" in slurm.argv and "--all" in slurm.argv
    assert "unset SQUEUE_ACCOUNT" in slurm.argv[2] and "SQUEUE_USERS" in slurm.argv[2]


def test_the_job_k3doctor_runs_in_is_ours_besides_those_the_inventory_names():
    """`salloc ... k3doctor check` (or a step of the launch's batch job): $SLURM_JOB_ID is the allocation."""
    code = "from k3doctor.checks import rack; print(rack.OWN_SLURM_JOB)"
    for value, expected in (("5150", "5150"), ("", "None"), ("not-a-job", "None")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "SLURM_JOB_ID": value}).stdout.strip()
        assert out == expected, (value, out)
