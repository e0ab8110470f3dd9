#!/usr/bin/env bash
# Prove allreduce-probe on a real GPU host through the launcher path a rack uses: a one-node
# inventory (transport: local, where: host), backend nccl, sweep 1 MiB..4 GiB; then a forced
# hang (local rank 1 stops before it reaches the rendezvous), then an intermittent hang (rank 1
# stops in communicator init on the first run only); `ps` after each run shows what is left.
# Usage: bench/allreduce_h200.sh OUTDIR   (repo root; k3doctor installed; GPUS/BACKEND override)
set -uo pipefail
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out"
gpus=${GPUS:-$(python3 -c 'import torch; print(torch.cuda.device_count())')}
backend=${BACKEND:-nccl}
inv="$out/inventory.yaml"
printf 'cluster:\n  name: bench\n  gpus_per_node: %s\nnodes:\n  - {name: gpuhost, transport: local}\n' "$gpus" >"$inv"

{
  echo "== host"; uname -a; nproc
  nvidia-smi -L 2>&1; nvidia-smi topo -m 2>&1
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "gpus", torch.cuda.device_count(),
"nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)'
  env | grep -E '^(NCCL|TORCH_NCCL|TORCH_SYMM|NVSHMEM)_' | sort
} >"$out/env.txt" 2>&1
cat "$out/env.txt"

probe() {  # name, extra --set options...
  local name=$1; shift
  local t0=$SECONDS
  k3doctor check --nodes "$inv" --only allreduce-probe --format json -o "$out/$name.json" \
    --set allreduce-probe.where=host --set "allreduce-probe.backend=$backend" "$@"
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - t0)) s"
  echo "== $name: processes carrying a k3probe token afterwards:" >>"$out/ps.txt"
  ps -eo pid,stat,etime,args | grep -F 'k3probe:' | grep -v grep >>"$out/ps.txt" || echo "(none)" >>"$out/ps.txt"
}

drill() {  # NAME NODE[:LOCAL]@STAGE[@once]: an inventory whose node runs the rig's hang drill (k3rig.hang)
  python3 -m k3rig.hang "$out/inventory.yaml" "$2" "$out/drill-$1"
}

probe healthy
inv=$(drill rendezvous gpuhost:1@rendezvous) && probe hang-rendezvous
inv=$(drill init-once gpuhost:1@init@once) && probe hang-init-once --set allreduce-probe.init_s=20
inv="$out/inventory.yaml"
cat "$out/ps.txt"

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
for name in ("healthy", "hang-rendezvous", "hang-init-once"):
    doc = json.load(open(f"{out}/{name}.json"))
    print(f"\n### {name}: {doc['verdict']} (exit {doc['exit_code']}, {doc['duration_s']} s)")
    for r in doc["results"]:
        ev = r["evidence"]
        print(f"{r['status']} {r['node'] or 'cluster'} [{r['remediation']}] {r['message']}")
        if r["node"] is not None:
            continue
        print(f"  elapsed_s {ev.get('elapsed_s')}  run_ids {ev.get('run_ids')}  stage_s {ev.get('stage_s')}")
        for run in [ev] + ev.get("hierarchy", []):
            print(f"  run {run.get('run')}: wall {run.get('wall_s')} s, failed_stage {run.get('failed_stage')}, "
                  f"missing_ranks {run.get('missing_ranks')}, killed {run.get('killed_ranks')}, "
                  f"cleanup {run.get('cleanup')}")
        if ev.get("sizes"):
            print(f"  {'bytes':>12} {'time_us':>10} {'algbw GB/s':>11} {'busbw GB/s':>11}")
            for row in ev["sizes"]:
                print(f"  {row['bytes']:>12} {row['time_us']:>10.1f} {row['algbw_gbs']:>11.2f} {row['busbw_gbs']:>11.2f}")
PY
