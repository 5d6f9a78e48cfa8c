#!/usr/bin/env bash
# One lent H200 (Python 3.12, torch 2.11 / CUDA 13, nothing else installed, no network):
# Megatron-DeepSpeed at the pinned commit with the kit's patch series and DeepSpeed 0.18.2, run by
# the kit's own `python -m bench run --engine megatron-deepspeed` on real data made by
# `python -m bench data`: 1.3b tp1pp1 in bf16 (attention through torch's SDPA, patch 0011, and,
# for the A/B, upstream's unfused core attention) and in fp16 (dynamic loss scaling, LUMI's
# precision), the same model, data and batch on the megatron engine, for the side by side; then,
# with NVIDIA apex built here meanwhile (fused layer norm, FusedAdam), both engines again.
#
# Carry .carry-mds/ (made here by docs/reports/2026-11-23-h200-mds-fusions/gather-mds-carry.sh). Run from the repo root:
#   OUT=$OUT bash docs/reports/2026-11-23-h200-mds-fusions/h200-megatron-deepspeed.sh
# RUNS picks runs by name (default: mds-bf16 mds-bf16-unfused mds-fp16 megatron-bf16
# mds-bf16-apex megatron-bf16-apex; also mds-bf16-mbs8 and mds-bf16-without-last-patch, the A/B
# of the series' last patch; on a two-GPU machine mds-2.7b-zero1, mds-2.7b-zero2, mds-6.7b-zero1,
# mds-6.7b-zero2 and megatron-6.7b-dp2, the same data and batch 32 at micro-batch 2). OUT receives: records/*.json (one per run), logs.tar.gz (every
# step's log and each run's train.log), summary.txt. About 12 minutes: installs 0.5 min,
# fused-kernel and apex builds ~3.5 min side by side, six runs of 16 iterations at gbs 32 ~1.3 min
# each. Start it in the background
# (setsid) and collect $OUT in later calls: it outlasts the device's 10 minutes per call.
# DRY_RUN=1 (a machine without a GPU, PYTHON a 3.12 with torch): every step but the fused-kernel
# build runs for real, and the runs are printed (--dry-run) instead of started.
set -uo pipefail
OUT=${OUT:?set OUT to an output folder}
PYTHON=${PYTHON:-python3}
CARRY=${CARRY:-.carry-mds}
SITE=${SITE:-/tmp/mds-site}              # DeepSpeed, megatron-core and the light dependencies
MDS=${MDS:-/opt/Megatron-DeepSpeed}      # platforms/local.toml's megatron_deepspeed_dir (default)
WORK=${WORK:-/tmp/mds-campaign}          # corpus, data, logs
APEX_SITE=${APEX_SITE:-/tmp/apex-site}  # apex, added to the path for the last runs only
MBS=${MBS:-4} GBS=${GBS:-32} ITERS=${ITERS:-16}
mkdir -p "$OUT/records" "$WORK/logs"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
summary="$WORK/logs/summary.txt"
: > "$summary"

step() {  # step NAME COMMAND...: run, log to $WORK/logs/NAME.txt (NAME-2.txt... for a repeated
  # name; the file is $last_log), one summary line with the time
  local name=$1 start rc n=1
  shift
  last_log="$WORK/logs/$name.txt"
  while [ -e "$last_log" ]; do n=$((n + 1)); last_log="$WORK/logs/$name-$n.txt"; done
  start=$(date +%s)
  "$@" > "$last_log" 2>&1
  rc=$?
  echo "$name: exit $rc in $(( $(date +%s) - start )) s" | tee -a "$summary"
  if [ "$rc" -ne 0 ]; then tail -n 25 "$last_log" | tee -a "$summary"; fi
  return "$rc"
}

finish() {
  cp "$summary" "$OUT/summary.txt"
  for run in runs/*/; do [ -f "$run/train.log" ] && cp "$run/train.log" "$WORK/logs/$(basename "$run").train.log"; done
  tar czf "$OUT/logs.tar.gz" -C "$WORK" logs
  exit "${1:-0}"
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no GPU"; } | tee -a "$summary"
"$PYTHON" --version | tee -a "$summary"

# 1. DeepSpeed 0.18.2 from its sdist (no ops prebuilt: they build just in time) and the wheels.
# Only what the machine's Python lacks: a pinned older copy on PYTHONPATH would shadow the machine's
# own (seen: regex 2024.11.6 broke its transformers, which megatron.training imports). pybind11
# always: it only builds the dataset helpers, and the pinned one knows NumPy 2's C API.
mapfile -t wheels < <("$PYTHON" - "$CARRY"/wheels/*.whl <<'PY'
import importlib.metadata as m, pathlib, sys
for wheel in sys.argv[1:]:
    name = pathlib.Path(wheel).name.split("-")[0]
    try:
        if name != "pybind11":
            m.version(name)
            continue
    except m.PackageNotFoundError:
        pass
    print(wheel)
PY
)
step install-wheels "$PYTHON" -m pip install -q --no-index --no-deps --target "$SITE" "${wheels[@]}" || finish 1
step install-deepspeed env DS_BUILD_OPS=0 PYTHONPATH="$SITE" "$PYTHON" -m pip install -q --no-index \
  --no-deps --no-build-isolation --target "$SITE" "$CARRY"/deepspeed-0.18.2.tar.gz || finish 1
export PYTHONPATH="$SITE:$PWD" PATH="$SITE/bin:$PATH"
step versions "$PYTHON" -c 'import deepspeed, torch, megatron.core, tiktoken, tokie, numpy, pybind11
print("deepspeed", deepspeed.__version__, "torch", torch.__version__, "megatron-core", megatron.core.__version__,
      "numpy", numpy.__version__, "pybind11", pybind11.__version__)' || finish 1
cat "$WORK/logs/versions.txt" | tail -n 1 | tee -a "$summary"

# NVIDIA apex (the snapshot carried), built for this GPU while the rest sets up
# (DEVICE.md: ~170 s alone). Its own step log; the apex runs wait for it.
apex_build() {
  rm -rf /tmp/apex-src && mkdir -p /tmp/apex-src && tar xzf "$CARRY"/apex-*.tar.gz -C /tmp/apex-src --strip-components=1 &&
  cd /tmp/apex-src && env TORCH_CUDA_ARCH_LIST="$(PYTHONPATH="$SITE" "$PYTHON" -c 'import torch
print("%d.%d" % torch.cuda.get_device_capability())')" APEX_CPP_EXT=1 APEX_CUDA_EXT=1 \
    APEX_PARALLEL_BUILD=8 NVCC_APPEND_FLAGS="--threads 2" \
    "$PYTHON" -m pip wheel -q --no-build-isolation --no-deps --no-index -w /tmp/apex-wheel . &&
  "$PYTHON" -m pip install -q --no-index --no-deps --target "$APEX_SITE" /tmp/apex-wheel/apex-*.whl
}
if [ "${DRY_RUN:-0}" != 1 ]; then
  ( step apex-build apex_build ) &
  apex_pid=$!
fi

# 2. Megatron-DeepSpeed at the pin, the kit's series applied exactly, dataset helpers built.
rm -rf "$MDS" && mkdir -p "$MDS" && tar xzf "$CARRY"/megatron-deepspeed-*.tar.gz -C "$MDS" --strip-components=1
step patch "$PYTHON" bench/images/series.py apply patches/megatron-deepspeed/series "$MDS" || finish 1
step helpers make -C "$MDS/megatron/data" CPPFLAGS="$("$PYTHON" -m pybind11 --includes)" \
  LIBEXT="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')" || finish 1

# 3. The fused softmax kernels, built once for this GPU before the runs (each run then loads them).
if [ "${DRY_RUN:-0}" != 1 ]; then
  step fused-kernels bash -c "cd '$MDS' && '$PYTHON' -c 'import types
from megatron import fused_kernels
fused_kernels.load(types.SimpleNamespace(masked_softmax_fusion=True, rank=0))'" || finish 1
fi

# 4. Real text: the Python documentation's topics (one document per paragraph) and
#    Megatron-DeepSpeed's own Markdown, tokenized by the kit.
"$PYTHON" - "$WORK/corpus.jsonl" "$MDS" <<'PY'
import json, pathlib, sys
from pydoc_data.topics import topics
texts = [p.strip() for t in topics.values() for p in t.split("\n\n") if len(p.strip()) > 80]
texts += [md.read_text(errors="replace") for md in sorted(pathlib.Path(sys.argv[2]).rglob("*.md"))]
with open(sys.argv[1], "w") as out:
    for text in texts:
        out.write(json.dumps({"text": text}) + "\n")
print(len(texts), "documents")
PY
step data "$PYTHON" -m bench data "$WORK/corpus.jsonl" --vocab-file "$CARRY/gpt2/gpt2-vocab.json" \
  --merge-file "$CARRY/gpt2/gpt2-merges.txt" --out-dir "$WORK/data" || finish 1
grep '^prepared\|^already' "$WORK/logs/data.txt" | tee -a "$summary"
prefix=$(sed -n 's/^use: --data-path \([^ ]*\) .*/\1/p' "$WORK/logs/data.txt")

# 5. The runs: same model, data and batch on both engines.
data=(--gbs "$GBS" --iters "$ITERS" --data-path "$prefix" --records-dir "$OUT/records"
      --timeout 240 --hang-timeout 180)
if [ "${DRY_RUN:-0}" = 1 ]; then data+=(--dry-run); fi
common=(1.3b tp1pp1 --mbs "$MBS" "${data[@]}")
# Two GPUs (a two-GPU machine): data parallel with ZeRO-1 or -2, micro-batch 2, longer limits.
two=(--gpus 2 --mbs 2 "${data[@]}" --timeout 420 --hang-timeout 300)
# Megatron-DeepSpeed tokenizes nothing at run time but builds GPT-2's tokenizer from the files; the
# megatron engine reads the same ids with its null tokenizer (it refuses --vocab-file).
tokenizer=(--vocab-file "$CARRY/gpt2/gpt2-vocab.json" --merge-file "$CARRY/gpt2/gpt2-merges.txt")
mds=("${common[@]}" "${tokenizer[@]}" --engine megatron-deepspeed)
apex_ready() {  # the apex build's outcome, waited for once
  if [ -z "${apex_ok:-}" ]; then
    apex_ok=no
    if [ "${DRY_RUN:-0}" != 1 ] && wait "$apex_pid" && [ -d "$APEX_SITE/apex" ]; then apex_ok=yes; fi
  fi
  [ "$apex_ok" = yes ]
}
last_patch=$(grep -v '^#' patches/megatron-deepspeed/series | tail -n 1)
run() {  # run NAME: one run of the campaign, by name
  local apex=()
  case $1 in *-apex)
    apex_ready || { echo "$1: skipped, apex did not build" | tee -a "$summary"; return; }
    apex=(env PYTHONPATH="$APEX_SITE:$PYTHONPATH") ;;
  esac
  case $1 in
    mds-bf16|mds-bf16-apex) step "$1" "${apex[@]}" timeout 280 "$PYTHON" -m bench run "${mds[@]}" --precision bf16 ;;
    mds-bf16-mbs8) step "$1" timeout 280 "$PYTHON" -m bench run "${mds[@]}" --precision bf16 --mbs 8 ;;
    mds-bf16-unfused) step "$1" timeout 280 "$PYTHON" -m bench run "${mds[@]}" --precision bf16 --no-fused-attention ;;
    mds-bf16-without-last-patch)  # the A/B of the series' last patch: reversed for this run only
      patch -R -p1 --fuzz=0 -s -d "$MDS" < "patches/megatron-deepspeed/$last_patch" &&
        step "$1" timeout 280 "$PYTHON" -m bench run "${mds[@]}" --precision bf16
      patch -p1 --forward --fuzz=0 -s -d "$MDS" < "patches/megatron-deepspeed/$last_patch" ;;
    mds-fp16) step "$1" timeout 280 "$PYTHON" -m bench run "${mds[@]}" --precision fp16 ;;
    megatron-bf16|megatron-bf16-apex) step "$1" "${apex[@]}" timeout 240 "$PYTHON" -m bench run "${common[@]}" --engine megatron --precision bf16 ;;
    mds-2.7b-zero1|mds-2.7b-zero2|mds-6.7b-zero1|mds-6.7b-zero2)
      IFS=- read -r _ model zero <<< "$1"
      step "$1" timeout 480 "$PYTHON" -m bench run "$model" "dp2$zero" "${two[@]}" "${tokenizer[@]}" \
        --engine megatron-deepspeed --precision bf16 ;;
    megatron-6.7b-dp2) step "$1" timeout 480 "$PYTHON" -m bench run 6.7b dp2 "${two[@]}" --engine megatron --precision bf16 ;;
    *) echo "$1: no such run" | tee -a "$summary" ;;
  esac
}
read -ra runs <<< "${RUNS:-mds-bf16 mds-bf16-unfused mds-fp16 megatron-bf16 mds-bf16-apex megatron-bf16-apex}"
run_logs=()
for name in "${runs[@]}"; do
  last_log=""
  run "$name"
  if [ -n "$last_log" ]; then run_logs+=("$last_log"); fi
done
for log in "${run_logs[@]}"; do tail -n 4 "$log" | tee -a "$summary"; done
finish 0
