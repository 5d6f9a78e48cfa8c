#!/usr/bin/env bash
# Four lent H200s (NVLink): 6.7b and 13b in several layouts, then a 13b sweep. Run from the repo
# root with megatron-core importable; OUT names the folder that receives records and logs.
# Usage: h200x4.sh layouts | sweep
set -uo pipefail
OUT=${OUT:?set OUT to an output folder}
mkdir -p "$OUT/records" "$OUT/logs"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
run() {  # run <name> <bench run arguments...>
  local name=$1; shift
  timeout 300 python3 -m bench run "$@" --records-dir "$OUT/records" --timeout 280 \
    --hang-timeout 120 > "$OUT/logs/$name.txt" 2>&1
  echo "$* exit $?"; tail -n 3 "$OUT/logs/$name.txt"
}
case ${1:?layouts or sweep} in
  layouts)
    run 6.7b-dp4 6.7b tp1pp1 --iters 12
    run 6.7b-dp4-mbs4 6.7b tp1pp1 --mbs 4 --iters 12
    run 6.7b-tp2pp2 6.7b tp2pp2 --iters 12
    run 6.7b-tp4pp1 6.7b tp4pp1 --iters 12
    run 6.7b-tp1pp4 6.7b tp1pp4 --iters 12
    run 13b-dp4 13b tp1pp1 --iters 12
    run 13b-dp4-mbs2 13b tp1pp1 --mbs 2 --iters 12
    ;;
  sweep)
    run 13b-sweep 13b --sweep --gbs 32
    ;;
esac
