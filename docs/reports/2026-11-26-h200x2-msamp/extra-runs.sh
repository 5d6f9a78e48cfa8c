#!/usr/bin/env bash
# The runs of this campaign that are not a campaign group, as they ran on the GPU machines after
# docs/reports/2026-11-25-h100x2-parallelism/h100x2.sh had set them up (its $WORK, sites and kit
# clone; run from the project's root there):
#   bash extra-runs.sh 2.7b-pair     # machine 1: 2.7b dp2, te against msamp-o2 at 4/32, real data
#   bash extra-runs.sh reduce-ab     # machine 2: 1.3b dp2 bf16, Megatron's reduction against the
#                                    # kit's two FP8 ones, mock data, no TE (only the wheels step
#                                    # of `h100x2.sh setup` had finished; the rest built, niced, beside)
set -uo pipefail
W=${WORK:-/tmp/h100x2}
K=$W/kit
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

one() {  # one NAME PYTHONPATH ARGS...: a run by the kit's CLI, logged as the campaign's runs are
  local name=$1 path=$2
  shift 2
  (cd "$K" && env PYTHONPATH="$path:$K" python3 -m bench run "$@" --records "$W/records" \
     > "$W/logs/$name.txt" 2>&1)
  echo "$name: exit $?" | tee -a "$W/logs/summary.txt"
  grep -E '^ +[0-9.]+b ' "$W/logs/$name.txt"
}

case ${1:?2.7b-pair or reduce-ab} in
  2.7b-pair)
    data=$(sed -n 's/^use: --data-path \([^ ]*\) .*/\1/p' "$W/logs/data.txt")
    for precision in fp8-delayed msamp-o2; do
      one "2.7b-dp2-$precision" "$W/msamp-site:/tmp/te-site:$W/site" 2.7b tp1pp1 --gpus 2 --mbs 4 \
        --gbs 32 --iters 20 --precision "$precision" --data-path "$data"
    done ;;
  reduce-ab)
    for reduction in bf16 fp8-shared-scale fp8-allgather; do
      one "1.3b-dp2-reduce-$reduction" "$W/site" 1.3b tp1pp1 --gpus 2 --mbs 8 --gbs 32 --iters 12 \
        --grad-reduce "$reduction"
    done ;;
esac
for dir in "$K"/runs/*/; do
  [ -f "$dir/train.log" ] && cp "$dir/train.log" "$W/logs/$(basename "$dir").train.log"
done
