#!/usr/bin/env bash
# One GPU of the GPU machine (Python 3.12, torch 2.11 / CUDA 13, no network), Megatron-Core only:
# repeated runs of one configuration key and the loss checks, each by the kit's own
# `python -m bench run` from a clean clone of one kit commit, so every record names that commit and
# keeps its evidence (its series, its log tail, its train log in records/logs/).
#
# Carry .carry/ (ignored by git), made here:
#   bash docs/gpu-machine/one-gpu.sh kit-bundle   # .carry/kit.bundle: HEAD alone (one commit)
#   nox -s wheelhouse -- cuda --dest .carry/w --without te --without sources --without gpt2
#   .carry/data/: a corpus tokenized by `python -m bench data` (.bin/.idx) for the loss checks
#   .carry/apex-<commit>.tar.gz: NVIDIA apex's pinned snapshot (../shared/upstreams/), for `apex`
# Transformer Engine, where a step needs it, is installed as campaign.sh does (te-split here, the
# parts sent one per command, te-join and `bash .te/install.sh` there: /tmp/te-site).
# Steps (there, from the repository root; each in the foreground of one command):
#   bash docs/gpu-machine/one-gpu.sh setup        # clone the kit, install the wheels this Python lacks
#   bash docs/gpu-machine/one-gpu.sh apex         # build apex's C++/CUDA extensions for sm_90 (~170 s)
#   bash docs/gpu-machine/one-gpu.sh run NAME ARGS...  # python -m bench run ARGS, logged as NAME;
#                                                 # APEX=1 puts the built apex on its path
#   bash docs/gpu-machine/one-gpu.sh smoke NAME   # python -m bench.train.smoke (all-reduce, GEMMs) on
#                                                 # every GPU present: logs/NAME.json, logs/NAME.txt
#   bash docs/gpu-machine/one-gpu.sh collect      # $OUT: records.tgz (records and kept logs), summary.txt
# The machine's platform is the shared GPU hosts' local (NVLink multicast off), which records carry.
# It trains on every GPU present: on a machine of more than one, a run of one GPU says --gpus 1 (a
# campaign file meant for one GPU says gpus = 1 in its defaults).
set -uo pipefail
PYTHON=${PYTHON:-python3}
WORK=${WORK:-/tmp/one-gpu}
SITE=$WORK/site TE_SITE=${TE_SITE:-/tmp/te-site} APEX_SITE=$WORK/apex-site KIT=$WORK/kit
mkdir -p "$WORK/logs" "$WORK/records"
export PYTHONUNBUFFERED=1 BENCH_PLATFORMS_DIR=platforms/sites/shared-gpu-hosts
summary="$WORK/logs/summary.txt"

# shellcheck source=docs/gpu-machine/step.sh
. "$(dirname "${BASH_SOURCE[0]}")/step.sh"  # step NAME COMMAND...

setup() {
  rm -rf "$KIT" && git -c advice.detachedHead=false clone -q .carry/kit.bundle "$KIT" || return 1
  # A bundle of one commit clones without its parents: mark the clone shallow.
  git -C "$KIT" cat-file -e 'HEAD^' 2>/dev/null || git -C "$KIT" rev-parse HEAD > "$KIT/.git/shallow"
  git -C "$KIT" log -1 --format='kit %h %s' >> "$summary"
  { nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader
    "$PYTHON" --version; } >> "$summary" 2>&1
  # Only the wheels this Python lacks: a pinned copy on the path would shadow the machine's own.
  mapfile -t wheels < <("$PYTHON" - .carry/w/*.whl <<'PY'
import importlib.metadata as m, pathlib, sys
for wheel in sys.argv[1:]:
    try:
        m.version(pathlib.Path(wheel).name.split("-")[0])
    except m.PackageNotFoundError:
        print(wheel)
PY
)
  step install-wheels "$PYTHON" -m pip install -q --no-index --no-deps --target "$SITE" "${wheels[@]}" || return 1
  rm -rf "$WORK/data" && cp -r .carry/data "$WORK/data"
}

apex() {  # megatron-core then uses its fused layer norm, masked softmax and wgrad accumulation
  rm -rf /tmp/apex-src "$APEX_SITE" && mkdir -p /tmp/apex-src &&
    tar xzf .carry/apex-*.tar.gz -C /tmp/apex-src --strip-components=1 &&
    (cd /tmp/apex-src && step apex-build env TORCH_CUDA_ARCH_LIST=9.0 APEX_CPP_EXT=1 APEX_CUDA_EXT=1 \
       APEX_PARALLEL_BUILD=16 NVCC_APPEND_FLAGS="--threads 2" "$PYTHON" -m pip wheel -q \
       --no-build-isolation --no-deps --no-index -w /tmp/apex-wheel .) &&
    step apex-install "$PYTHON" -m pip install -q --no-index --no-deps --target "$APEX_SITE" \
      /tmp/apex-wheel/apex-*.whl
}

run() {  # run NAME ARGS...: the kit's run with Transformer Engine on the path where installed,
  # and apex where APEX=1 (the kit detects both in the training Python: its argv says which)
  local name=$1 path="$TE_SITE:$SITE:$KIT"
  shift
  [ -n "${APEX:-}" ] && path="$APEX_SITE:$path"
  # --records first: Megatron's own flags, after a '--', come last.
  (cd "$KIT" && step "$name" env PYTHONPATH="$path" "$PYTHON" -m bench run \
     --records "$WORK/records" "$@")
  grep -E 'TFLOP/s|recorded|record:|error' "$WORK/logs/$name.txt" | tail -n 12
  grep -E 'a torch op' "$WORK/logs/$name.txt" | tail -n 3  # the run's conditions: its host's pace
}

smoke() {  # smoke NAME: the smoke check's all-reduce and GEMM ceilings, its report beside the logs
  local name=$1
  (cd "$KIT" && step "$name" env PYTHONPATH="$TE_SITE:$SITE:$KIT" "$PYTHON" -m bench.train.smoke \
     --checks nccl,gemm --out "$WORK/logs/$name.json")
  grep -E '^  (nccl|gemm) |^result' "$WORK/logs/$name.txt"
}

collect() {
  # A run cut by the command's own limit (timeout) ends its ranks and writes its failed record
  # after the shell that started it has returned: wait for it (at most a minute), or the
  # collection goes without that record.
  local waited=0
  while pgrep -f -- "-m bench run" > /dev/null && ((waited++ < 60)); do sleep 1; done
  mkdir -p "$OUT" && cp "$summary" "$OUT/summary.txt"
  tar czf "$OUT/records.tgz" -C "$WORK" records
  tar czf "$OUT/logs.tgz" -C "$WORK" logs
}

case ${1:?kit-bundle, setup, apex, run, smoke or collect} in
  kit-bundle)
    rm -rf /tmp/kit-shallow && git clone -q --depth 1 "file://$PWD" /tmp/kit-shallow &&
      mkdir -p .carry && git -C /tmp/kit-shallow bundle create "$PWD/.carry/kit.bundle" HEAD ;;
  setup) setup ;;
  apex) apex ;;
  run) shift; run "$@" ;;
  smoke) smoke "${2:?smoke NAME}" ;;
  collect) collect ;;
  *) echo "unknown step $1" >&2; exit 2 ;;
esac
