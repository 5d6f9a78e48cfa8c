#!/bin/bash
# Start the queued runs one by one, keeping at most 3 train.py of ours running.
cd "$(dirname "$0")"
run() {  # tag mode args...
  while [ $(for p in logs/*.pid; do kill -0 $(cat $p) 2>/dev/null && echo x; done | wc -l) -ge 3 ]; do sleep 10; done
  tag=$1; shift; TAG=$tag ./launch.sh "$@"; sleep 5
}
S="--warmup 20 --lr 2e-3 --min-lr 2e-4 --out results-highlr"
run s-delayed delayed $S --probe-every 25
run s-in-time in-time $S
run s-ref ref $S
G="--warmup 0 --init-std 0.006 --lr 3e-4 --min-lr 3e-5 --out results-gpurecipe"
run g-delayed-m1 delayed-m1 $G
