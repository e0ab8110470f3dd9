#!/usr/bin/env bash
# Side by side on one GPU host: nccl-tests all_reduce_perf / alltoall_perf (built here from the
# vendored source, against the NCCL that torch loads) and allreduce-probe through the launcher a
# rack uses (one-node inventory, transport: local, where: host, backend nccl), same sizes, same
# iteration counts; prints size | nccl-tests busbw | probe busbw | ratio for both collectives.
# Usage: bench/collectives_vs_nccl_tests.sh OUTDIR
#   GPUS (default: all torch sees), AR_MIN/AR_MAX (1M/4G), A2A_MIN/A2A_MAX (64K/4G), ITERS (20),
#   TIMERS (graph events: one probe run per timer; graph is the probe's default), BUILD (nccl-tests build dir, default OUTDIR/nccl-tests),
# The probe is started through bench/probe_direct.py: the registered check with this machine's local
# transport, past the rack prerequisites (UALink sysfs, amd-smi) that an NVIDIA bench host does not have.
set -uo pipefail
out=$(realpath -m "${1:?usage: $0 OUTDIR}")
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
gpus=${GPUS:-$(python3 -c 'import torch; print(torch.cuda.device_count())')}
ar_min=${AR_MIN:-1M} ar_max=${AR_MAX:-4G} a2a_min=${A2A_MIN:-64K} a2a_max=${A2A_MAX:-4G} iters=${ITERS:-20}
timers=${TIMERS:-graph events}
build=${BUILD:-$out/nccl-tests}
probe() { python3 "$here/probe_direct.py" "$inv" "$@"; }
bytes() { python3 -c 'import sys; s=sys.argv[1]; m={"K":10,"M":20,"G":30}; print(int(s[:-1]) << m[s[-1]] if s[-1] in m else int(s))' "$1"; }

{
  echo "== host"; uname -a; nproc
  nvidia-smi -L 2>&1; nvidia-smi topo -m 2>&1
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "gpus", torch.cuda.device_count(),
"nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)'
  env | grep -E '^(NCCL|TORCH_NCCL|TORCH_SYMM|NVSHMEM)_' | sort
} >"$out/env.txt" 2>&1
cat "$out/env.txt"

bin=$("$here/build_nccl_tests.sh" "$build" | tail -1) || { echo "nccl-tests build failed" >&2; exit 1; }
cat "$build/build-info.txt"
export LD_LIBRARY_PATH="$(cat "$build/nccl-libdir")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# -g: one process driving every GPU (no MPI); -w 5 -n ITERS as the probe's warm-up and timed iterations
"$bin/all_reduce_perf" -b "$ar_min" -e "$ar_max" -f 2 -g "$gpus" -w 5 -n "$iters" >"$out/all_reduce_perf.txt" 2>&1
echo "== all_reduce_perf: exit $?"
"$bin/alltoall_perf" -b "$a2a_min" -e "$a2a_max" -f 2 -g "$gpus" -w 5 -n "$iters" >"$out/alltoall_perf.txt" 2>&1
echo "== alltoall_perf: exit $?"

inv="$out/inventory.yaml"
printf 'cluster:\n  name: bench\n  gpus_per_node: %s\nnodes:\n  - {name: gpuhost, transport: local}\n' "$gpus" >"$inv"
reports=()
for timer in $timers; do
  t0=$SECONDS
  probe "$out/probe-$timer.json" where=host backend=nccl "timer=$timer" \
    "min_bytes=$(bytes "$ar_min")" "max_bytes=$(bytes "$ar_max")" alltoall_sizes=bytes \
    "alltoall_min_bytes=$(bytes "$a2a_min")" "alltoall_max_bytes=$(bytes "$a2a_max")" "iters=$iters" \
    sweep_s=300 alltoall_s=300 deadline_s=600
  echo "== probe ($timer): exit $? after $((SECONDS - t0)) s"
  reports+=("$out/probe-$timer.json")
  echo "== processes carrying a k3probe token afterwards:"
  ps -eo pid,stat,etime,args | grep -F 'k3probe:' | grep -v grep || echo "(none)"
done
# and a gloo run of 4 ranks on this host (host timing: the CI / rig path, nothing GPU-timed)
printf 'cluster:\n  name: bench\n  gpus_per_node: 4\nnodes:\n  - {name: cpuhost, transport: local}\n' >"$out/gloo.yaml"
python3 "$here/probe_direct.py" "$out/gloo.yaml" "$out/probe-gloo.json" where=host backend=gloo
echo "== probe (gloo x4): exit $?"
# a rank that stops inside the all-to-all: the probe must name the stage and rank, and leave nothing behind
# (the rig's hang drill, k3rig.hang: the node's python is a wrapper that stops that rank)
hung=$(python3 -m k3rig.hang "$inv" gpuhost:0@alltoall "$out/drill-alltoall") &&
  python3 "$here/probe_direct.py" "$hung" "$out/probe-hang-alltoall.json" where=host backend=nccl \
  min_bytes=1048576 max_bytes=1048576 alltoall_s=10
echo "== probe (rank 0 hung in the all-to-all): exit $?"
ps -eo pid,stat,etime,args | grep -F 'k3probe:' | grep -v grep || echo "(no k3probe process left)"
# the EP-dispatch shaped all-to-all (§19: tokens x 7168 at bf16 / fp8+scale / fp4+scale), uneven splits;
# nccl-tests has no such sizes, so these figures stand alone (all_reduce kept to 1 MiB)
probe "$out/probe-ep.json" where=host backend=nccl min_bytes=1048576 max_bytes=1048576 alltoall_splits=uneven
echo "== probe (ep, uneven): exit $?"
python3 - "$out/probe-ep.json" <<'PY' | tee "$out/ep.md"
import json, sys
[ev] = [r["evidence"] for r in json.load(open(sys.argv[1]))["results"] if r["node"] is None]
print(f"### EP-dispatch all-to-all, world {ev['world']}, {ev.get('timer')}, uneven splits")
print("| shape | bytes/rank | us | algbw GB/s | busbw GB/s | host-timed us |")
print("|---|---:|---:|---:|---:|---:|")
for r in ev.get("alltoall", []):
    print(f"| {r['shape']} | {r['bytes']} | {r['time_us']:.1f} | {r['algbw_gbs']:.2f} | {r['busbw_gbs']:.2f} | "
          f"{r.get('host_time_us', r['time_us']):.1f} |")
PY
python3 "$here/collectives_compare.py" "$out/all_reduce_perf.txt" "$out/alltoall_perf.txt" "${reports[@]}" \
  | tee "$out/compare.md"
