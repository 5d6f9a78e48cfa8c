#!/usr/bin/env bash
# One lent H200: the smoke check (NCCL, bf16 GEMM ceiling, 2-layer training), then the runs of
# h200x1.toml (the one-GPU presets at tp1pp1, and 13b on one GPU, which cannot fit: a real
# out-of-memory record). Run from the repo root with megatron-core importable; OUT names the folder
# that receives records and logs. Every run leaves its record in $OUT/records.
set -uo pipefail
OUT=${OUT:?set OUT to an output folder}
mkdir -p "$OUT/records" "$OUT/logs"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -m bench.train.smoke --out "$OUT/logs/smoke.json" > "$OUT/logs/smoke.txt" 2>&1
echo "smoke exit $?"; tail -n 15 "$OUT/logs/smoke.txt"
python3 -m bench run --campaign results/campaigns/h200x1.toml --records-dir "$OUT/records" \
  > "$OUT/logs/campaign.txt" 2>&1
echo "campaign exit $?"; tail -n 12 "$OUT/logs/campaign.txt"
