"""Field signatures of reference §29 and §31.3 that on-call triage names in a rank's log: RCCL, MORI cco, Gloo, the c10d
rendezvous and aiter, each a row of (signal kind, step, finding, what it means, remediation). The line shapes are
k3doctor.parsers.atom_log's SIGNALS of the same kind; the first matching line of a rank is shown. The remediations
of triage's AgentX rows (§25, §29, §30: LMCache, aiter's log level, aiperf, GPU core files) are here too."""
from __future__ import annotations

from k3doctor.registry import remediation
from k3doctor.results import fail, warn

MORI_PARTIAL = remediation("TRIAGE-MORI-FABRIC-PARTIAL", "MORI left the UALink fabric for host LSA + RDMA", """
`ccoCommCreate: UALink fabric ready on only N/M ranks - using host LSA + RDMA` is logged at INFO, but the whole job
now runs off the fabric (MORI cco groups the scale-up team by ppod/vpod only over active/ready GPUs, §29). Run
`k3doctor check` before relaunching: ualink-state (all 16 cards active) and fabric-domain (one PPOD/VPOD).""")
MORI_LSA = remediation("TRIAGE-MORI-LSA-LAYOUT", "MORI cco refused the LSA team", """
`LSA team spans hosts ... fabric handle support is unavailable`: libhsakmt exports fabric handles only from
accel_state `ready` (rocm-systems #8051, §0.4) - check the driver/ROCm pairing. `non-contiguous lsa membership`
or `heterogeneous lsa sizes`: ranks must be LSA-major contiguous with the same local size on every node - check
--data-parallel-rank and --data-parallel-size-local on every node (§17).""")
MORI_VPOD = remediation("TRIAGE-MORI-VPOD-PARTIAL", "MORI_VPOD_ID is set on some ranks only", """
Manual vPOD grouping is all-or-none across the job (§29): unset MORI_VPOD_ID everywhere (the fabric's own vPOD
is right for wide EP) or set the same value on every rank, then relaunch. `k3doctor check` (env-versions)
finds it before launch.""")
MORI_HEAP = remediation("TRIAGE-MORI-HEAP", "MORI's symmetric heap is exhausted", """
`Out of heap memory! ... Increase via MORI_SHMEM_HEAP_SIZE`: EP32 exhausted the old 4 GiB default (ROCm/MAD
PR #168 raised it to 16 GiB, §29). Set MORI_SHMEM_HEAP_SIZE=16G (or more) on every rank.""")
AMD_SMI_LIB = remediation("TRIAGE-RCCL-AMD-SMI-LIB", "RCCL read no fabric version through amd-smi", """
`unexpected fabric info version 4294967295`: with RCCL_USE_AMD_SMI_LIB=1, RCCL before rocm-systems PR #9464
asks amd-smi, which never fills fabric_info.version, so every device fails the test and UALoE is off (§29, §20).
Unset RCCL_USE_AMD_SMI_LIB (ignore RCCL's own WARN that advises setting it) or use an RCCL with #9464.""")
SYMMETRIC = remediation("TRIAGE-RCCL-NO-SYMMETRIC-MEMORY", "RCCL ran without symmetric memory (VMM off)", """
`Symmetric memory is not supported` names the missing prerequisite (cuMemEnable, globalGinSupport): cuMem/VMM was
off, so MNNVL is too (§29). Leave NCCL_CUMEM_ENABLE unset on gfx1250 (auto enables it) or set 1, never 0.""")
GLOO = remediation("TRIAGE-GLOO-INTERFACE", "Gloo could not use the data-plane interface", """
GLOO_SOCKET_IFNAME takes one literal interface name (§29): NCCL's `^lo` syntax fails with `Unable to find
address for: ^lo`; unset, a hostname that resolves to 127.x makes Gloo fall back to loopback and
`connectFullMesh` fails towards 127.0.0.1. Set GLOO_SOCKET_IFNAME to the data-plane NIC on every rank and make
`getent hosts $(hostname)` return the data-plane address.""")
RENDEZVOUS = remediation("TRIAGE-RENDEZVOUS-UNREACHABLE", "a rank could not reach the rendezvous", """
`[c10d] The client socket has timed out ... trying to connect to (<ip>, <port>)` on a worker, or the master's
`DistStoreError: Timed out after N seconds waiting for workers` (§29): compare the address tried with node 0's
data-plane IP (--data-parallel-master-ip, §17/§18), then the port from that node (`k3doctor check` judges both;
MORI's bootstrap also uses random ports 10000-60000).""")
CODE_OBJECTS = remediation("TRIAGE-NO-CODE-OBJECTS", "a GPU library has no code objects for this GPU", """
`No compatible code objects found for: <gfx>`: the aiter (or other) wheel in the image was built without this
architecture (ROCm/ATOM #69, §29). Use an image built for the rack's gfx (gfx1250 wide EP, gfx950 MI355X) - a
wrong HSA_OVERRIDE_GFX_VERSION gives the same line.""")
DIAG_P2P = remediation("TRIAGE-RCCL-DIAG-P2P", "RCCL's diagnostics found a GPU pair whose P2P path fails", """
`NCCL_RUN_DIAGNOSTICS=1` checks every directed GPU pair of a node (N*(N-1) edges: 12 for 4 GPUs) and prints
`NCCL DIAG [INFO] p2p: <kind> srcRank=<a> dstRank=<b> path=...` for a failing one (§29): the intra-node path
between those GPUs is broken - check both GPUs' state (kernel-health, ualink-state) before any collective. The
line goes to stdout only (run with `stdbuf -oL`); one process per GPU.""")
DIAG_MULTI = remediation("TRIAGE-RCCL-DIAG-ONE-PROCESS", "RCCL diagnostics run with several GPUs in one process",
                         """
`peer-memory import failed ... handle=DIRECT` on gfx1250 is what one process driving several GPUs gets from
RCCL's P2P diagnostics (§29): run them one process per GPU before reading anything into the result.""")

DIAG_NO_P2P = remediation("TRIAGE-RCCL-DIAG-NO-P2P", "RCCL diagnostics ran but their P2P verdict was not read", """
With NCCL_RUN_DIAGNOSTICS=1 RCCL ends its checks with one `p2p:` line per process: `NCCL DIAG [OK] p2p: all
<n> directed GPU P2P edges verified` or `NCCL DIAG [INFO] p2p: <kind> srcRank=... dstRank=...` (§29). It goes to
stdout only: a log with `NCCL DIAG` lines but no `p2p:` line lost it (buffered stdout, a cut log, a process that
died first), so nothing about the GPU pairs is known - no PASS. Rerun with `stdbuf -oL` and one process per GPU,
and keep stdout in the log.""")
ROCR_GPU = remediation("TRIAGE-ROCR-GPU-FAULT", "ROCr reported a GPU hang or memory fault on a KFD node", """
`HW Exception by GPU node-N ... reason :GPU Hang` and `Memory access fault by GPU node-N ...` name the KFD
topology node, not the GPU index: CPU agents come first, so a 4-GPU gfx1250 tray has GPU nodes 2-5 and `node-3`
is its second card (§29). Confirm the card in `/sys/class/kfd/kfd/topology/nodes/N/properties` (or `rocminfo`:
`Node:` and `BDFID`), then read that GPU's kernel log (`k3doctor check --only kernel-health`): a hang leaves a
wedged GPU (reset the tray, §11). `Memory access fault ... on address (nil). Reason: unknown` with
HSA_OVERRIDE_GFX_VERSION set is the stale override (§29): unset it or make it match the GPU.""")

IPC_HANDLE = remediation("TRIAGE-IOMMU-NOT-PT", "hipIpcGetMemHandle failed: the IOMMU is not in pass-through", """
`NCCL WARN hipIpcGetMemHandle failed : invalid argument` is RCCL failing to share GPU memory between processes
with the IOMMU translating (§31.3, beside §29's `iommu=pt` rule). Add `iommu=pt` to the kernel command line
(GRUB_CMDLINE_LINUX, update-grub, reboot) on every node; `k3doctor check` (iommu-pt) reads /proc/cmdline.""")
GFX950_ONLY = remediation("TRIAGE-GFX950-ONLY-KERNEL", "a gfx950-only kernel was chosen on another GPU", """
`AssertionError: mla_gluon requires gfx950 (CDNA4), got gfx942`: the recipe picks kernels built for MI355X
(gfx950) on an MI300X/MI325X (gfx942) node (vLLM #51964, §31.3). Use a recipe and image for the node's GPU:
ATOM's Kimi-K3 recipe targets MI355 only; on MI325X only vLLM's emulation or int4 path runs it (§31.4).""")
HSA_1016 = remediation("TRIAGE-HSA-EXCEPTION-1016", "HSA exception 0x1016 killed a worker (long context)", """
`HSA_STATUS_ERROR_EXCEPTION ... code: 0x1016`, then `Worker proc VllmWorker-N died unexpectedly`, is Kimi-K3 at
TP8 on MI355X at ~337K tokens of context (vLLM #50347, §31.3). Lower --max-model-len below that length (or keep
requests under it) until the image carries the fix, then relaunch.""")
APERTURE = remediation("TRIAGE-AITER-VSKIP", "memory aperture violation (0x29): aiter's VSKIP on MI300X", """
`HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION ... code: 0x29` on MI300X is aiter's VSKIP path, on by default when
AITER_ENABLE_VSKIP is unset (aiter #1143, §31.3). Set AITER_ENABLE_VSKIP=0 in the engine's environment on gfx942
nodes and relaunch.""")
NUMA = remediation("TRIAGE-NUMA-BALANCING", "automatic NUMA balancing is on", """
`NCCL WARN NUMA auto balancing enabled which can lead to variability in the RCCL performance!`: the kernel moves
pages between NUMA nodes under the job (kernel.numa_balancing=1, §31.3). `sysctl -w kernel.numa_balancing=0` on
every node (and in /etc/sysctl.d to keep it); `k3doctor check` (numa-balancing) reads it before launch.""")
# AgentX (MI355X TP8, LMCache + state offload, aiperf): §25, §29, §30
LMCACHE_CUDA = remediation("TRIAGE-LMCACHE-CUDA-BUILD", "LMCache's CUDA build runs on ROCm", """
`Failed to import backend lmcache.c_ops: libcudart.so...` is only a warning, but the offload tier then has no
native ops (PyPI lmcache on ROCm, reference §29). Install the ROCm build (v0.5.3rc2-rocm with cupy-rocm-7-0)
and check `python -c 'import lmcache.c_ops'` in the container before an offload run.""")
LMCACHE_SERVER = remediation("TRIAGE-LMCACHE-SERVER-HUNG", "the LMCache server did not come up", """
`Timed out waiting for LMCache server`: its L1 pool is pinned whole and non-swappable; 2399 GiB hung it in D
state (§29). Keep L1 under ~60% of free /dev/shm and the per-rank sizes x ranks under ~80% of MemTotal
(`k3doctor recipe diff` shows the arithmetic); fixed MP ports 6555/8090 collide between cells.""")
AITER_LEVEL = remediation("TRIAGE-AITER-LOG-LEVEL", "AITER_LOG_LEVEL is not a level aiter knows", """
aiter accepts DEBUG, INFO, WARNING or ERROR (upper-cased; §29); anything else falls back to INFO and its kernel
logs flood the server log for the whole replay. Set AITER_LOG_LEVEL=WARNING.""")
AIPERF_METRICS = remediation("TRIAGE-AIPERF-NO-ATOM-METRICS", "aiperf found no `atom:` server metrics", """
aiperf fails the run when the server's /metrics shows no metric starting `atom:` (AIPERF_REQUIRED_SERVER_METRIC_
PREFIX=atom:, §30): check `curl :$PORT/metrics | grep ^atom:` before the benchmark, and that
AIPERF_SERVER_METRICS_URLS names this server's port.""")
GPUCORE = remediation("TRIAGE-GPUCORE", "GPU core dumps in the run's directory", """
`gpucore files exist. not good`: a GPU fault left core files, which the launcher then deletes (§30). Collect
them first, then match the kernel log (`k3doctor triage` reads dmesg) for the fault that wrote them.""")


def rocr_card(fields: dict, first_gpu_node: int, per_node: int) -> tuple:
    """(card index on the node or None, how it was mapped) for ROCr's ``GPU node-N`` (§29: KFD topology node,
    CPU agents first; ``first_gpu_node`` is the first GPU's KFD node, 2 on a two-socket gfx1250 tray)."""
    node = int(fields["node"])
    card = node - first_gpu_node
    if not 0 <= card < per_node:
        return None, (f"KFD topology node {node} is not one of this layout's GPU nodes {first_gpu_node}-"
                      f"{first_gpu_node + per_node - 1}: read /sys/class/kfd/kfd/topology/nodes/{node}/properties")
    return card, (f"KFD topology node {node} = card {card} of the node (GPU nodes start at {first_gpu_node}, after "
                  f"the CPU agents; not GPU index {node}; confirm in "
                  f"/sys/class/kfd/kfd/topology/nodes/{node}/properties)")


FIELD_SIGNATURES = (
    ("mori_fabric_partial", "triage-config", fail, "MORI left the UALink fabric: the whole job runs on host LSA + "
     "RDMA", MORI_PARTIAL),
    ("mori_lsa_refused", "triage-fatal", fail, "MORI cco refused the LSA team", MORI_LSA),
    ("mori_vpod_partial", "triage-config", fail, "MORI_VPOD_ID set on some ranks only", MORI_VPOD),
    ("mori_heap", "triage-fatal", fail, "MORI's symmetric heap is exhausted", MORI_HEAP),
    ("rccl_fabric_version", "triage-config", fail, "RCCL_USE_AMD_SMI_LIB switched UALoE off (RCCL before #9464)",
     AMD_SMI_LIB),
    ("rccl_no_symmetric", "triage-config", warn, "RCCL symmetric memory unsupported: VMM/cuMem was off", SYMMETRIC),
    ("gloo_interface", "triage-config", fail, "Gloo could not use the data-plane interface", GLOO),
    ("rendezvous_timeout", "triage-startup", fail, "rendezvous unreachable", RENDEZVOUS),
    ("no_code_objects", "triage-fatal", fail, "no code objects for this GPU", CODE_OBJECTS),
    ("rccl_diag_p2p_failed", "triage-fatal", fail, "RCCL diagnostics: a GPU pair's P2P path fails", DIAG_P2P),
    ("rccl_diag_multi_gpu", "triage-config", warn, "RCCL diagnostics ran several GPUs in one process", DIAG_MULTI),
    ("hip_ipc_handle", "triage-config", fail, "hipIpcGetMemHandle failed: the IOMMU is not in pass-through",
     IPC_HANDLE),
    ("gfx950_only_kernel", "triage-config", fail, "a gfx950-only kernel (mla_gluon) on another GPU", GFX950_ONLY),
    ("hsa_exception_1016", "triage-fatal", fail, "HSA exception 0x1016 (long context on MI355X TP8)", HSA_1016),
    ("aperture_violation", "triage-fatal", fail, "memory aperture violation 0x29 (aiter VSKIP on MI300X)", APERTURE),
    ("numa_balancing", "triage-config", warn, "automatic NUMA balancing is on", NUMA),
)
