#!/usr/bin/env bash
# One lent H200 (Python 3.12, torch 2.11 / CUDA 13, no network): the MS-AMP seed's five modes on the
# kit's megatron-core engine, each run by the kit's own `python -m bench run` on real data made by
# `python -m bench data`: bf16, te (Transformer Engine fp8, delayed scaling), msamp-o1, msamp-o2
# and fp4, at 1.3b (micro/global batch 4/32, 30 iterations: throughput and memory) and at 345m
# (8/16, 500 iterations: loss curves, throughput and memory). Plus the FP8-linear microbenchmark and
# the optimizer-step one (LBAdamW with the whole series against the series without its last patch).
#
# Carry .carry-msamp/ (the MS-AMP snapshot, cp312 wheels, GPT-2's BPE files) and install Transformer
# Engine 2.20.2 into /tmp/te-site first (the lent machines' recipe: its wheel in five chunks). The kit
# runs from a git bundle cloned on the machine, so that records carry the commit that ran. Each step
# runs in the foreground of one call (under 10 minutes): a lent machine ends a call's background jobs.
#   bash docs/reports/2026-11-25-h200-msamp/h200-msamp.sh setup   # wheels, MS-AMP twice, data (~5 min)
#   bash docs/reports/2026-11-25-h200-msamp/h200-msamp.sh bench   # the FP8-linear microbenchmark
#   bash docs/reports/2026-11-25-h200-msamp/h200-msamp.sh optim   # the optimizer-step microbenchmark
#   bash docs/reports/2026-11-25-h200-msamp/h200-msamp.sh runs    # the runs RUNS names, one by one
#   bash docs/reports/2026-11-25-h200-msamp/h200-msamp.sh collect # $OUT: records and logs
# RUNS picks runs by name (default: all ten, 1.3b first): <preset>-<mode>, or <preset>-<mode>:<mbs> for
# another micro-batch size at the same global batch.
set -uo pipefail
PYTHON=${PYTHON:-python3}
CARRY=${CARRY:-.carry-msamp}
SITE=${SITE:-/tmp/msamp-site}       # wheels and MS-AMP with its CUDA extensions
BEFORE=${BEFORE:-/tmp/msamp-before} # MS-AMP without the series' last patch, and its optimizer extension
TE_SITE=${TE_SITE:-/tmp/te-site}
WORK=${WORK:-/tmp/msamp-campaign}   # corpus, data, logs, records
HERE=$(dirname "$0")
mkdir -p "$WORK/logs" "$WORK/records"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$SITE:$TE_SITE:$PWD" PATH="$SITE/bin:$PATH"
summary="$WORK/logs/summary.txt"

step() {  # step NAME COMMAND...: run, log to $WORK/logs/NAME.txt, one summary line with the time
  local name=$1 start rc
  shift
  start=$(date +%s)
  "$@" > "$WORK/logs/$name.txt" 2>&1
  rc=$?
  echo "$name: exit $rc in $(( $(date +%s) - start )) s" | tee -a "$summary"
  if [ "$rc" -ne 0 ]; then tail -n 25 "$WORK/logs/$name.txt" | tee -a "$summary"; fi
  return "$rc"
}

setup() {
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; "$PYTHON" --version; } | tee -a "$summary"
  # Only the wheels this Python lacks (a pinned copy on the path would shadow the machine's own).
  mapfile -t wheels < <("$PYTHON" - "$CARRY"/wheels/*.whl <<'PY'
import importlib.metadata as m, pathlib, sys
for wheel in sys.argv[1:]:
    try:
        m.version(pathlib.Path(wheel).name.split("-")[0])
    except m.PackageNotFoundError:
        print(wheel)
PY
)
  step install-wheels "$PYTHON" -m pip install -q --no-index --no-deps --target "$SITE" "${wheels[@]}" || return 1
  # MS-AMP at the pin with the kit's series, and its CUDA extensions for this GPU (dist_op needs the
  # msccl submodule, which the snapshot lacks; one GPU does not use it).
  rm -rf /tmp/msamp-src && mkdir -p /tmp/msamp-src &&
    tar -xzf "$CARRY"/ms-amp-*.tar.gz -C /tmp/msamp-src --strip-components 1 || return 1
  step msamp-series "$PYTHON" bench/images/series.py apply patches/ms-amp/series /tmp/msamp-src || return 1
  arch=$("$PYTHON" -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability())')
  for part in . msamp/operators/arithmetic msamp/operators/fp4_quantize msamp/optim; do
    step "msamp-build-${part##*/}" env TORCH_CUDA_ARCH_LIST="$arch" MAX_JOBS=16 bash -c \
      "cd /tmp/msamp-src/$part && '$PYTHON' -m pip install -q --no-index --no-deps --no-build-isolation --target '$SITE' ." || return 1
  done
  # The same without the series' last patch (the optimizer's), for the optimizer-step comparison.
  rm -rf "$BEFORE" && mkdir -p "$BEFORE/src" "$BEFORE/series" "$BEFORE/site" && cp patches/ms-amp/*.patch "$BEFORE/series/" &&
    sed '$d' patches/ms-amp/series > "$BEFORE/series/series" &&
    tar -xzf "$CARRY"/ms-amp-*.tar.gz -C "$BEFORE/src" --strip-components 1 || return 1
  step msamp-series-before "$PYTHON" bench/images/series.py apply "$BEFORE/series/series" "$BEFORE/src" || return 1
  step msamp-build-optim-before env TORCH_CUDA_ARCH_LIST="$arch" MAX_JOBS=16 bash -c \
    "cd '$BEFORE/src/msamp/optim' && '$PYTHON' -m pip install -q --no-index --no-deps --no-build-isolation --target '$BEFORE/site' ." || return 1
  # Real text: the Python documentation's topics and the standard library's sources.
  "$PYTHON" - "$WORK/corpus.jsonl" <<'PY'
import json, pathlib, sys, sysconfig
from pydoc_data.topics import topics
texts = [p.strip() for t in topics.values() for p in t.split("\n\n") if len(p.strip()) > 80]
stdlib = pathlib.Path(sysconfig.get_paths()["stdlib"])
texts += [f.read_text(errors="replace") for f in sorted(stdlib.glob("*.py"))]
with open(sys.argv[1], "w") as out:
    for text in texts:
        out.write(json.dumps({"text": text}) + "\n")
print(len(texts), "documents")
PY
  step data "$PYTHON" -m bench data "$WORK/corpus.jsonl" --vocab-file "$CARRY/gpt2/gpt2-vocab.json" \
    --merge-file "$CARRY/gpt2/gpt2-merges.txt" --out-dir "$WORK/data" || return 1
  grep '^prepared\|^already\|^use:' "$WORK/logs/data.txt" | tee -a "$summary"
  touch "$WORK/setup.done"
}

run() {  # run NAME: NAME is <preset>-<mode>[:<mbs>]
  local name=${1%%:*} preset=${1%%-*} mode prefix batch
  mode=${name#*-}
  prefix=$(sed -n 's/^use: --data-path \([^ ]*\) .*/\1/p' "$WORK/logs/data.txt")
  if [ "$preset" = 345m ]; then batch=(--mbs 8 --gbs 16 --iters 500 --timeout 900)
  else batch=(--mbs 4 --gbs 32 --iters 30 --timeout 480); fi
  [ "$1" = "$name" ] || batch[1]=${1#*:}
  case $mode in bf16) precision=bf16 ;; te) precision=fp8-delayed ;; *) precision=$mode ;; esac
  step "${1/:/-mbs}" "$PYTHON" -m bench run "$preset" tp1pp1 --precision "$precision" "${batch[@]}" \
    --data-path "$prefix" --records-dir "$WORK/records" --hang-timeout 300
}

case ${1:?setup, bench, optim, runs or collect} in
  setup) setup ;;
  bench) step fp8-linear "$PYTHON" "$HERE/fp8_linear_bench.py"; cat "$WORK/logs/fp8-linear.txt" ;;
  optim)
    step optimizer-before env PYTHONPATH="$BEFORE/src:$BEFORE/site:$PYTHONPATH" "$PYTHON" \
      "$HERE/optimizer_step_bench.py" lbadamw
    step optimizer "$PYTHON" "$HERE/optimizer_step_bench.py" lbadamw te-fusedadam torch-adamw
    cat "$WORK/logs/optimizer-before.txt" "$WORK/logs/optimizer.txt" ;;
  runs)
    read -ra names <<< "${RUNS:-1.3b-bf16 1.3b-te 1.3b-msamp-o1 1.3b-msamp-o2 1.3b-fp4 345m-bf16 345m-te 345m-msamp-o1 345m-msamp-o2 345m-fp4}"
    for name in "${names[@]}"; do run "$name"; done
    for dir in runs/*/; do [ -f "$dir/train.log" ] && cp "$dir/train.log" "$WORK/logs/$(basename "$dir").train.log"; done
    touch "$WORK/runs.done" ;;
  collect)
    mkdir -p "$OUT" && cp "$summary" "$OUT/summary.txt"
    tar czf "$OUT/records.tar.gz" -C "$WORK" records
    tar czf "$OUT/logs.tar.gz" -C "$WORK" logs ;;
esac
