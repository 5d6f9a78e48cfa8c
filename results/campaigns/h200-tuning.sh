#!/usr/bin/env bash
# A/B runs for issue 3's remaining work: what the fused AdamW, the fused cross entropy, a larger
# global batch and the data-parallel overlap / bf16 gradient defaults buy. Run from the repo root
# with megatron-core importable; OUT names the folder that receives records and logs.
# Usage: h200-tuning.sh x1 | x1-ab | x1-last (one H200) | x4 | x4-rest | x4-last (four H200s)
set -uo pipefail
OUT=${OUT:?set OUT to an output folder}
mkdir -p "$OUT/records" "$OUT/logs"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
run() {  # run <name> <bench run arguments...>; returns the run's exit status
  local name=$1; shift
  # The kit's options go first: whatever follows '--' in "$@" is for Megatron.
  timeout 300 python3 -m bench run --records-dir "$OUT/records" --timeout 280 \
    --hang-timeout 120 "$@" > "$OUT/logs/$name.txt" 2>&1
  local code=$?
  echo "$* exit $code"; tail -n 3 "$OUT/logs/$name.txt"
  return $code
}
case ${1:?x1 or x4} in
  x1)
    run 2.7b-gbs64-foreach 2.7b tp1pp1 --mbs 8 --gbs 64 --iters 11 -- --kit-torch-adam foreach
    if run 2.7b-gbs64 2.7b tp1pp1 --mbs 8 --gbs 64 --iters 11; then
      run 2.7b-gbs64-ce 2.7b tp1pp1 --mbs 8 --gbs 64 --iters 11 -- --cross-entropy-loss-fusion
      run 2.7b-gbs128 2.7b tp1pp1 --mbs 8 --gbs 128 --iters 11
    else
      run 2.7b-gbs128-foreach 2.7b tp1pp1 --mbs 8 --gbs 128 --iters 11 -- --kit-torch-adam foreach
    fi
    ;;
  x4)  # with the fused loss and fused AdamW as defaults; A/B of the data-parallel defaults
    run 2.7b-dp4-gbs512 2.7b tp1pp1 --mbs 8 --gbs 512 --iters 11
    run 2.7b-dp4-gbs128 2.7b tp1pp1 --mbs 8 --gbs 128 --iters 11
    run 2.7b-dp4-gbs128-no-overlap 2.7b tp1pp1 --mbs 8 --gbs 128 --iters 11 --no-overlap
    run 2.7b-dp4-gbs128-fp32-grads 2.7b tp1pp1 --mbs 8 --gbs 128 --iters 11 --grad-reduce fp32
    run 6.7b-dp4-gbs128 6.7b tp1pp1 --mbs 4 --gbs 128 --iters 11
    run 2.7b-dp4-gbs128-unfused-loss 2.7b tp1pp1 --mbs 8 --gbs 128 --iters 11 --no-fused-loss
    ;;
  x4-rest)  # the x4 runs after the first two again: their records did not come back (too many files)
    run 2.7b-dp4-gbs128-no-overlap 2.7b tp1pp1 --mbs 8 --gbs 128 --iters 11 --no-overlap
    run 2.7b-dp4-gbs128-fp32-grads 2.7b tp1pp1 --mbs 8 --gbs 128 --iters 11 --grad-reduce fp32
    run 6.7b-dp4-gbs128 6.7b tp1pp1 --mbs 4 --gbs 128 --iters 11
    run 2.7b-dp4-gbs128-unfused-loss 2.7b tp1pp1 --mbs 8 --gbs 128 --iters 11 --no-fused-loss
    ;;
  x4-last)  # 2.7b on four GPUs without overlap at gbs 512; then the one-GPU 2.7b runs with the
    # current defaults, two at once on GPUs 0 and 1
    run 2.7b-dp4-gbs512-no-overlap 2.7b tp1pp1 --mbs 8 --gbs 512 --iters 11 --no-overlap
    CUDA_VISIBLE_DEVICES=0 run 2.7b-gbs64 2.7b tp1pp1 --mbs 8 --gbs 64 --iters 11 &
    sleep 3  # run ids are made of the second a run starts in
    CUDA_VISIBLE_DEVICES=1 run 2.7b-gbs128 2.7b tp1pp1 --mbs 8 --gbs 128 --iters 11
    wait
    ;;
  x1-last)  # one H200 alone: 2.7b at 8/128 with the current defaults, and 1.3b at a larger batch
    run 2.7b-gbs128 2.7b tp1pp1 --mbs 8 --gbs 128 --iters 11
    run 1.3b-mbs8-gbs128 1.3b tp1pp1 --mbs 8 --gbs 128 --iters 11
    ;;
  x1-ab)  # the two A/B runs of x1 whose kit options a first version of run() put after '--'
    run 2.7b-gbs64-foreach 2.7b tp1pp1 --mbs 8 --gbs 64 --iters 11 -- --kit-torch-adam foreach
    run 2.7b-gbs64-ce 2.7b tp1pp1 --mbs 8 --gbs 64 --iters 11 -- --cross-entropy-loss-fusion
    ;;
esac
