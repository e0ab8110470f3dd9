#!/usr/bin/env bash
# A launch script written the way InferenceX's benchmarks/single_node/agentic/kimik3_fp4_mi355x_atom_mtp.sh
# is (reference §30): exports, one `case` per concurrency, the DRAM budget in integer arithmetic, the server
# in the background, a readiness poll, then aiperf. This one matches recipe kimi-k3-mi355x-agentx.
set -euo pipefail

: "${CONC:?CONC must be set by the harness}"
MODEL=${MODEL:-moonshotai/Kimi-K3}
TP=${TP:-8}
PORT=${PORT:-8888}
RESULT_DIR=${RESULT_DIR:-results}
DRAM_UTILIZATION=${DRAM_UTILIZATION:-0.086}
AVAILABLE_CPU_DRAM_MIB=3095781   # configs/runners.yaml cluster:mi355x-amds
GPUS_PER_NODE=8

if [ "$TP" -ne 8 ]; then
    echo "Error: Kimi-K3 MXFP4 is a 1.56 TB checkpoint and only fits at TP=8 on"
    echo "288 GB gfx950 parts (~195 GB/GPU). Got TP=$TP."
    exit 1
fi
if [ -z "${MODEL_PATH:-}" ]; then
    hf download "$MODEL"
    MODEL_PATH=$MODEL
fi

export PYTHONNOUSERSITE=1
export AITER_LOG_LEVEL=WARNING
export AITER_SITUV2_A4W4=1
export AITER_QUICK_REDUCE_QUANTIZATION=INT4
export AITER_FLYDSL_STAGE2_FP8=1
export ATOM_MLA_MAX_SPLIT_PER_BATCH=256
export ATOM_STATE_CHECKPOINT_DEMAND=0

case "$CONC" in
    1)  MAX_NUM_SEQS=32; MAX_BATCHED=8192; GPU_MEM_UTIL=0.88; REPLAYSSM=0; SPEC_TOKENS=6; SPEC_AL=3.75; OFFLOAD=none ;;
    4)  MAX_NUM_SEQS=32; MAX_BATCHED=8192; GPU_MEM_UTIL=0.88; REPLAYSSM=0; SPEC_TOKENS=2; SPEC_AL=2.51; OFFLOAD=none ;;
    8)  MAX_NUM_SEQS=16; MAX_BATCHED=8192; GPU_MEM_UTIL=0.88; REPLAYSSM=1; SPEC_TOKENS=2; SPEC_AL=2.51; OFFLOAD=lmcache ;;
    10) MAX_NUM_SEQS=16; MAX_BATCHED=4096; GPU_MEM_UTIL=0.90; REPLAYSSM=0; SPEC_TOKENS=2; SPEC_AL=2.51; OFFLOAD=lmcache ;;
    *)  echo "no profile for CONC=$CONC"; exit 1 ;;
esac
export ATOM_ENABLE_REPLAYSSM=$REPLAYSSM

EXTRA_ARGS=()
if [ "$OFFLOAD" = lmcache ]; then
    DRAM_MIB=$(( AVAILABLE_CPU_DRAM_MIB < 2861022 ? AVAILABLE_CPU_DRAM_MIB : 2861022 ))
    TOTAL_CPU_DRAM_GB=$(echo "scale=0; $DRAM_MIB * 1048576 * $DRAM_UTILIZATION * $TP / $GPUS_PER_NODE / 1000000000" | bc)
    export PYTHONHASHSEED=0
    export LMCACHE_LOCAL_CPU=True
    export LMCACHE_MAX_LOCAL_CPU_SIZE=$((TOTAL_CPU_DRAM_GB / TP))   # per rank: every rank pins its own pool
    export LMCACHE_CHUNK_SIZE=256
    export OFFLOAD_STATE=1
    export OFFLOAD_STATE_STAGING_GROUPS=8
    export OFFLOAD_STATE_MIN_LOAD_TOKENS=0
    export OFFLOAD_GPU_STAGING_CHUNKS=16
    # OFFLOAD_PROFILE stays unset on purpose: statistics only, and the measured runs had it off.
    EXTRA_ARGS+=(--state-checkpoint-slots 16)
    EXTRA_ARGS+=(--kv-transfer-config '{"kv_connector":"lmcache_offload","kv_role":"offload"}')
fi

SPEC_ARGS=(--method dspark --draft-model Inferact/Kimi-K3-DSpark --num-speculative-tokens "$SPEC_TOKENS")
if [ "${EVAL_ONLY:-false}" != true ]; then
    SPEC_ARGS+=(--spec-decode-acceptance-length "$SPEC_AL")
fi
QUANT='{"quant_type":"ptpc_fp8","exclude":["lm_head","model.embed_tokens","*self_attn.[qkv]_conv1d*","*block_sparse_moe.experts*","*block_sparse_moe.routed_expert_*","*vision_tower*","*mm_projector*"]}'

mkdir -p "$RESULT_DIR"
python3 -m atom.entrypoints.openai_server --model "$MODEL_PATH" --host 0.0.0.0 --server-port "$PORT" \
    --trust-remote-code --tensor-parallel-size "$TP" --kv_cache_dtype fp8 --block-size 128 \
    --max-num-seqs "$MAX_NUM_SEQS" --max-num-batched-tokens "$MAX_BATCHED" \
    --gpu-memory-utilization "$GPU_MEM_UTIL" --enable_prefix_caching \
    --state-checkpoint-interval-tokens -1 "${EXTRA_ARGS[@]}" \
    --online_quant_config "$QUANT" "${SPEC_ARGS[@]}" > "$RESULT_DIR/server.log" 2>&1 &
SERVER_PID=$!

until curl -sf "http://localhost:$PORT/health" > /dev/null; do
    sleep 5
done

export AIPERF_SERVER_METRICS_URLS="http://localhost:$PORT/metrics"
export AIPERF_REQUIRED_SERVER_METRIC_PREFIX=atom:
export AIPERF_HTTP_TCP_USER_TIMEOUT=900000
aiperf profile --model "$MODEL" --tokenizer "$MODEL" --url "http://localhost:$PORT" \
    --concurrency "$CONC" --benchmark-duration 3600 --artifact-dir "$RESULT_DIR"
BENCH_RC=$?
kill "$SERVER_PID" 2>/dev/null || true
exit $BENCH_RC
