#!/usr/bin/env bash
# Four lent H200s (NVLink): the runs of h200x4.toml, one group per call. Run from the repo root
# with megatron-core importable; OUT names the folder that receives records and logs.
# Usage: h200x4.sh layouts | sweep
set -uo pipefail
OUT=${OUT:?set OUT to an output folder}
mkdir -p "$OUT/records" "$OUT/logs"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
group=${1:?layouts or sweep}
python3 -m bench run --campaign results/campaigns/h200x4.toml --only "$group" \
  --records-dir "$OUT/records" > "$OUT/logs/$group.txt" 2>&1
echo "$group exit $?"; tail -n 12 "$OUT/logs/$group.txt"
