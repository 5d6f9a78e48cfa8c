#!/usr/bin/env bash
# One lent H200: the smoke check (NCCL, bf16 GEMM ceiling, 2-layer training) and the one-GPU
# presets at tp1pp1, and 13b on one GPU, which cannot fit (a real out-of-memory record). Run from the repo root with megatron-core importable; OUT names the folder
# that receives records and logs. Every run leaves its record in $OUT/records.
set -uo pipefail
OUT=${OUT:?set OUT to an output folder}
mkdir -p "$OUT/records" "$OUT/logs"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -m bench.smoke --out "$OUT/logs/smoke.json" > "$OUT/logs/smoke.txt" 2>&1
echo "smoke exit $?"; tail -n 15 "$OUT/logs/smoke.txt"
for spec in "345m tp1pp1" "1.3b tp1pp1" "2.7b tp1pp1" "2.7b tp1pp1 --mbs 8" "13b tp1pp1 --gbs 8"; do
  name=$(echo "$spec" | tr ' ' '_')
  # shellcheck disable=SC2086  # spec is words
  timeout 240 python3 -m bench run $spec --iters 15 --records-dir "$OUT/records" \
    --timeout 200 --hang-timeout 120 > "$OUT/logs/$name.txt" 2>&1
  echo "$spec exit $?"; tail -n 4 "$OUT/logs/$name.txt"
done
