#!/usr/bin/env bash
# The in-time / delayed A/B of MS-AMP O2 against TE on two GPUs, as it ran on 2026-11-26, after
# `h100x2.sh setup` (NO_MDS=1) and the msamp-loss group: the kit's own `python -m bench run`, one
# run at a time, 20 iterations, micro-batch 8 (1.3b) or 4 (2.7b), global batch 32, real data.
# Each spec is "MODEL MBS PRECISION [MSAMP_SCALING]"; the three passes ran in this order:
#   bash ab-runs.sh ab  "1.3b 8 fp8-delayed" "1.3b 8 msamp-o2 delayed" "1.3b 8 msamp-o2 in-time" \
#                       "2.7b 4 fp8-delayed" "2.7b 4 msamp-o2 delayed" "2.7b 4 msamp-o2 in-time"
#   bash ab-runs.sh ab2 "2.7b 4 msamp-o2 in-time" "2.7b 4 msamp-o2 delayed" "2.7b 4 fp8-delayed"
#   bash ab-runs.sh ab3 "1.3b 8 msamp-o2 delayed" "1.3b 8 fp8-delayed"
set -u
pass=$1; shift
W=/tmp/h100x2
cd $W/kit
D=$(sed -n 's/^use: --data-path \([^ ]*\) .*/\1/p' $W/logs/data.txt)
export PYTHONPATH=$W/msamp-site:/tmp/te-site:$W/site:$W/kit PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
for spec in "$@"; do
  set -- $spec; extra=(); [ -n "${4:-}" ] && extra=(--msamp-scaling "$4")
  log=$W/logs/$pass-$1-$3-${4:-x}.txt s=$(date +%s)
  python3 -m bench run "$1" tp1pp1 --gpus 2 --mbs "$2" --gbs 32 --iters 20 --precision "$3" "${extra[@]}" \
    --data-path "$D" --records $W/records > "$log" 2>&1
  echo "$pass $spec: exit $? in $(( $(date +%s) - s )) s" >> $W/logs/summary.txt
  for dir in runs/*/; do [ -f "$dir/train.log" ] && cp "$dir/train.log" "$W/logs/$(basename "$dir").train.log"; done
done
echo "$pass-done" >> $W/logs/summary.txt
