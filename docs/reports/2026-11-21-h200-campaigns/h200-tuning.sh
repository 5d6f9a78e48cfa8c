#!/usr/bin/env bash
# A/B runs of the kit's defaults: the runs of h200-tuning.toml, one group per call. Run from the
# repo root with megatron-core importable; OUT names the folder that receives records and logs.
# Usage: h200-tuning.sh x1 | x1-ab | x1-last (one H200) | x4 | x4-rest | x4-last (four H200s)
set -uo pipefail
OUT=${OUT:?set OUT to an output folder}
mkdir -p "$OUT/records" "$OUT/logs"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
campaign() {  # campaign <group or run name>; returns the campaign's exit status
  python3 -m bench run --campaign results/campaigns/h200-tuning.toml --only "$1" \
    --records-dir "$OUT/records" > "$OUT/logs/$1.txt" 2>&1
  local code=$?
  echo "$1 exit $code"; tail -n 8 "$OUT/logs/$1.txt"
  return $code
}
group=${1:?x1 or x4}
if [ "$group" = x4-last ]; then
  # 2.7b on four GPUs without overlap at gbs 512; then two one-GPU runs at once, on GPUs 0 and 1.
  campaign x4-last
  CUDA_VISIBLE_DEVICES=0 campaign x4-last-gpu0 &
  sleep 3  # run ids are made of the second a run starts in
  CUDA_VISIBLE_DEVICES=1 campaign x4-last-gpu1
  wait
else
  campaign "$group"
fi
