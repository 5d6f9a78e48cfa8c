#!/usr/bin/env bash
# The script that drives the GPU machine (one to eight GPUs, Python 3.12, torch 2.11 / CUDA 13, no
# network): a campaign file's groups (CAMPAIGN=results/campaigns/<file>.toml, by default
# h100x2.toml), group by group, each run by the kit's own `python -m bench run`. It is versioned
# here, in the kit: a report names this path and the commit it ran at, and is never given a copy.
# (It began as the 2026-11-25 two-H100 report's h100x2.sh, which stays in that report as it ran.)
#
# Carry .carry-mds/ (made by the gather-mds-carry.sh script of the 2026-11-23 Megatron-DeepSpeed
# report: DeepSpeed, Megatron-DeepSpeed and apex sources, cp312 wheels, GPT-2's BPE files) with
# kit.bundle in it (`bash campaign.sh kit-bundle` here: records carry the commit that ran; the
# bundle holds that commit alone, 7 MB where the whole history grew past 54 MB beside the tree), MS-AMP's snapshot (../shared/upstreams/ms-amp-<commit>.tar.gz) and colorlog's wheel in
# wheels/ (MS-AMP's logging imports it). .carry-mds/ keeps only kit.bundle (7 MB); the rest is in
# .carry-rest/, sent with .te-small/ and .carry-prebuilt/ before (`cp -r .carry-rest/. /tmp/carry/`).
# `setup` copies it to /tmp/carry, so later commands need not send it again: Transformer Engine 2.20.2's wheel, sent in five parts, fills a command's 64 MiB
# alone, and with the working tree past 20 MiB a 55 MB part no longer fits one command either: `te-split`
# (here) cuts the wheel into seven parts of 40 MB, .te/p0..p6, each sent with its own command
# (`mkdir -p /tmp/te-parts && cp .te/pN /tmp/te-parts/`), and `te-join` (there) joins them into the
# chunks install.sh reads. A command keeps only the ignored paths it carries, so TE's small files
# (.te/SHA256, deps/, install.sh, the meta wheel and the torch sdist) go first, in a command of their
# own that copies them to /tmp/te-small; the command after the last part runs `te-join`, copies them
# back into .te/ and runs `bash .te/install.sh`. TE goes to /tmp/te-site (its torch extension built on the machine). Check
# the GPUs' name first (`nvidia-smi -L`): a machine of two H200s can come for two H100s. Every step runs in the
# foreground of one command of at most 10 minutes, except `setup`, which is started in its own
# process session (setsid) and runs on, niced, while TE's parts are sent; run again, it skips what
# it has done. A later kit commit travels as .carry-kit/kit.bundle (read before /tmp/carry's).
# A machine is given back 30 s after a command ends: send the commands one right after the other.
# Builds from an earlier machine: `pack` returns MS-AMP's build (218-228 s) and TE's torch extension
# (90-110 s) with stamps of what they were built from (sources, patches, build script, torch). Kept
# here in .carry-prebuilt/ and sent in a first command of their own (`mkdir -p /tmp/carry/prebuilt &&
# cp .carry-prebuilt/* /tmp/carry/prebuilt/`), setup and `te-install` use them where the stamps still
# match, and build otherwise.
#   bash campaign.sh setup      # wheels, DeepSpeed, apex, Megatron-DeepSpeed, MS-AMP, data (~5 min);
#                             # NO_MDS=1, NO_APEX=1, NO_MSAMP=1: without them (groups wait for setup)
#   bash campaign.sh smoke      # python -m bench.train.smoke: all-reduce and GEMM ceilings
#   bash campaign.sh fp8-allreduce  # bench.train.fp8_allreduce on both GPUs: FP8 against bf16 reduction
#   bash campaign.sh fp8-linear # python -m bench.train.fp8_linear: MS-AMP's FP8 linear against TE's (needs TE and MS-AMP)
#   bash campaign.sh te-cast-check  # MS-AMP's delayed casts: TE's kernel against the torch cast, byte for byte
#   bash campaign.sh paper-adam-check  # PaperAdamW's Triton kernel on the GPU: tests/train/paper_adam_checks.py
#   bash campaign.sh GROUP...   # the campaign's groups (or runs by name: a run takes its first group's stack),
#                             # picked by the group's name: te, te-*, rest-te*, fp8-*, scaling: TE on the path;
#                             # apex: TE and apex; no-te: neither; mds*, *-zero*, *-mds: apex, real
#                             # data; mds-core: TE, real data; msamp campaign (CAMPAIGN=...): TE and
#                             # MS-AMP, real data
#   bash campaign.sh bg GROUP...  # the groups in their own process session: the command returns, they run on
#   bash campaign.sh wait GROUP S # until group GROUP has ended (its summary line), at most S seconds: a group
#                             # longer than one command (msamp-loss-repeats) runs over several `wait`s;
#                             # then `collect`, so every wait brings back the records made so far
#   bash campaign.sh collect    # $OUT: records.tgz, logs.tgz, summary.txt
#   bash campaign.sh pack       # $OUT: MS-AMP's build and TE's torch extension, each with its stamp
#   bash campaign.sh te-install # instead of `bash .te/install.sh`: skips the 90-110 s build of TE's torch
#                             # extension where a packed one of the same stamp is in /tmp/carry/prebuilt
#   bash campaign.sh kit-bundle # here: the kit at HEAD, one commit, into .carry-mds/kit.bundle
#   bash campaign.sh te-split   # here: .te/chunk0..4 into .te/p0..p6 (40 MB each)
#   bash campaign.sh te-join    # there: /tmp/te-parts/p0..p6 into /tmp/te-chunks (the wheel in chunk0)
set -uo pipefail
PYTHON=${PYTHON:-python3}
CARRY=${CARRY:-/tmp/carry}  # setup's copy of .carry-mds
WORK=${WORK:-/tmp/h100x2}
SITE=$WORK/site APEX_SITE=$WORK/apex-site TE_SITE=${TE_SITE:-/tmp/te-site} MSAMP_SITE=$WORK/msamp-site
MDS=${MDS:-/opt/Megatron-DeepSpeed}  # platforms/local.toml's megatron_deepspeed_dir
KIT=$WORK/kit
CAMPAIGN=${CAMPAIGN:-results/campaigns/h100x2.toml}
# RUN_ARGS: more options of `python -m bench run` for every group (e.g. --timeout 330), split on spaces
mkdir -p "$WORK/logs" "$WORK/records"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH="$SITE/bin:$PATH"
summary="$WORK/logs/summary.txt"

# shellcheck source=docs/gpu-machine/step.sh
. "$(dirname "${BASH_SOURCE[0]}")/step.sh"  # step NAME COMMAND...

apex_build() {
  rm -rf /tmp/apex-src && mkdir -p /tmp/apex-src &&
    tar xzf "$CARRY"/apex-*.tar.gz -C /tmp/apex-src --strip-components=1 && cd /tmp/apex-src &&
    nice -n 19 env TORCH_CUDA_ARCH_LIST=9.0 APEX_CPP_EXT=1 APEX_CUDA_EXT=1 APEX_PARALLEL_BUILD=16 \
      NVCC_APPEND_FLAGS="--threads 2" "$PYTHON" -m pip wheel -q --no-build-isolation --no-deps \
      --no-index -w /tmp/apex-wheel . &&
    "$PYTHON" -m pip install -q --no-index --no-deps --target "$APEX_SITE" /tmp/apex-wheel/apex-*.whl
}

stamp() {  # stamp FILE...: what a build depends on (those files, this torch), in 16 hex digits
  { sha256sum "$@" | awk '{print $1}'; "$PYTHON" -c 'import torch; print(torch.__version__)'; } | sha256sum | cut -c1-16
}
msamp_stamp() { stamp "$CARRY"/ms-amp-*.tar.gz patches/ms-amp/* images/cuda/build-msamp.sh; }
te_stamp() { stamp /tmp/te-small/transformer_engine_torch-*.tar.gz; }  # the first command's copy: later ones lack .te/

msamp_install() {  # the MS-AMP build an earlier machine packed (`pack`) where its stamp matches, else a build
  local pack=$CARRY/prebuilt/msamp-site.tgz
  if [ -f "$pack" ] && [ "$(cat "$CARRY/prebuilt/msamp.stamp" 2>/dev/null)" = "$(msamp_stamp)" ]; then
    echo "MS-AMP: the packed build of stamp $(msamp_stamp)"
    mkdir -p "$MSAMP_SITE" && tar xzf "$pack" -C "$MSAMP_SITE"
  else
    msamp_build
  fi
}

msamp_build() {  # MS-AMP as the kit's CUDA image builds it (images/cuda/build-msamp.sh), in a folder of its own
  rm -rf /tmp/msamp-src /tmp/msamp-build && mkdir -p /tmp/msamp-src /tmp/msamp-build &&
    tar -xzf "$CARRY"/ms-amp-*.tar.gz -C /tmp/msamp-src --strip-components 1 &&
    cp images/cuda/build-msamp.sh bench/images/series.py /tmp/msamp-build/ &&
    nice -n 19 env PIP_TARGET="$MSAMP_SITE" PYTHONPATH="$MSAMP_SITE:$SITE" MAX_JOBS="${MSAMP_JOBS:-8}" \
      sh /tmp/msamp-build/build-msamp.sh /tmp/msamp-src "$PWD/patches/ms-amp/series" 9.0
}

mds_setup() {  # DeepSpeed and Megatron-DeepSpeed with its series, helpers and fused kernels
  [ -e "$WORK/deepspeed.done" ] || step install-deepspeed env DS_BUILD_OPS=0 PYTHONPATH="$SITE" "$PYTHON" -m pip install -q --no-index \
    --no-deps --no-build-isolation --target "$SITE" "$CARRY"/deepspeed-0.18.2.tar.gz || return 1
  touch "$WORK/deepspeed.done"
  rm -rf "$MDS" && mkdir -p "$MDS" && tar xzf "$CARRY"/megatron-deepspeed-*.tar.gz -C "$MDS" --strip-components=1
  step mds-series "$PYTHON" bench/images/series.py apply patches/megatron-deepspeed/series "$MDS" || return 1
  step mds-helpers make -C "$MDS/megatron/data" CPPFLAGS="$(PYTHONPATH=$SITE "$PYTHON" -m pybind11 --includes)" \
    LIBEXT="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')" || return 1
  step mds-fused-kernels nice -n 19 env PYTHONPATH="$SITE" bash -c "cd '$MDS' && '$PYTHON' -c 'import types
from megatron import fused_kernels
fused_kernels.load(types.SimpleNamespace(masked_softmax_fusion=True, rank=0))'"
}

setup() {
  [ -e "$CARRY/kit.bundle" ] || { mkdir -p "$CARRY" && cp -r .carry-mds/. "$CARRY"/; } || return 1
  # From a clone, not the working tree: each later command copies the tree afresh, and a patch
  # read while that copy runs is missing (Megatron-DeepSpeed's series failed so once).
  clone_kit "$WORK/setup-kit" && cd "$WORK/setup-kit" || return 1
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nvidia-smi topo -m; "$PYTHON" --version; } >> "$summary" 2>&1
  # Only the wheels this Python lacks (a pinned copy on the path would shadow the machine's own);
  # pybind11 always (the pinned one knows NumPy 2's C API).
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
  step install-wheels "$PYTHON" -m pip install -q --no-index --no-deps --target "$SITE" "${wheels[@]}" || return 1
  touch "$WORK/wheels.done"
  [ -e "$WORK/apex.done" ] || [ -n "${NO_APEX:-}" ] || ( step apex-build apex_build && touch "$WORK/apex.done" ) &
  [ -e "$WORK/msamp.done" ] || [ -n "${NO_MSAMP:-}" ] || ( step msamp-build msamp_install && touch "$WORK/msamp.done" ) &
  [ -n "${NO_MDS:-}" ] || mds_setup || return 1
  # Real text for the engine A/B: the Python documentation's topics and the standard library.
  "$PYTHON" - "$WORK/corpus.jsonl" <<'PY'
import json, pathlib, sys, sysconfig
from pydoc_data.topics import topics
texts = [p.strip() for t in topics.values() for p in t.split("\n\n") if len(p.strip()) > 80]
texts += [f.read_text(errors="replace") for f in sorted(pathlib.Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))]
with open(sys.argv[1], "w") as out:
    for text in texts:
        out.write(json.dumps({"text": text}) + "\n")
PY
  step data env PYTHONPATH="$SITE:$PWD" "$PYTHON" -m bench data "$WORK/corpus.jsonl" \
    --vocab-file "$CARRY/gpt2/gpt2-vocab.json" --merge-file "$CARRY/gpt2/gpt2-merges.txt" \
    --out-dir "$WORK/data" || return 1
  wait
  touch "$WORK/setup.done"
}

wait_for() {  # wait_for MARKER: until setup made it, or stop when setup has ended without it
  # A fresh machine (the last one given back) has no setup at all: stop at once, not after waiting.
  [ -e "$WORK/$1" ] || [ -e "$WORK/setup.started" ] || { echo "setup has not run on this machine" | tee -a "$summary"; return 1; }
  while [ ! -e "$WORK/$1" ]; do
    if [ -e "$WORK/setup.ended" ]; then echo "setup ended without $1" | tee -a "$summary"; return 1; fi
    sleep 5
  done
}

clone_kit() {  # clone_kit DIR: the kit at the bundled commit (.carry-kit's bundle before /tmp/carry's)
  local bundle=$CARRY/kit.bundle
  [ -f .carry-kit/kit.bundle ] && bundle=$PWD/.carry-kit/kit.bundle
  rm -rf "$1" && git -c advice.detachedHead=false clone -q "$bundle" "$1" || return 1
  # A bundle of one commit (kit-bundle) clones without its parents: mark the clone shallow there.
  git -C "$1" cat-file -e 'HEAD^' 2>/dev/null || git -C "$1" rev-parse HEAD > "$1/.git/shallow"
}

kit() {  # the kit at the bundled commit, fresh for each command; KEEP_KIT=1 keeps the last clone
  [ -n "${KEEP_KIT:-}" ] && return 0  # (a fix copied into it after it was cloned: say so in the report)
  clone_kit "$KIT" && git -C "$KIT" log -1 --format='kit %h %s' >> "$summary"
}

stack_of() {  # stack_of NAME...: per NAME, the group whose name picks its stack (a run named
  # alone takes its first group's; a group, its own)
  "$PYTHON" - "$CAMPAIGN" "$@" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    runs = tomllib.load(f).get("run", [])
for name in sys.argv[2:]:
    groups = next((run.get("group") for run in runs if run.get("name") == name), None)
    print(groups if isinstance(groups, str) else (groups or [name])[0])
PY
}

group() {  # group NAME: the campaign's runs of that group, or its run of that name
  local name=$1 path extra=() marker=wheels.done data=none
  case $(stack_of "$name") in
    no-te|*-no-te) path="$SITE" ;;
    apex|*-apex) path="$APEX_SITE:$TE_SITE:$SITE" marker=apex.done ;;
    mds-core|mds-core-*|*-megatron-core) path="$TE_SITE:$SITE" marker=setup.done data=tokens ;;
    mds|mds-*|*-zero*|*-mds) path="$APEX_SITE:$SITE" marker=setup.done data=gpt2 ;;
    msamp-*) path="$MSAMP_SITE:$TE_SITE:$SITE" marker=setup.done data=tokens ;;
    *) path="$TE_SITE:$SITE" ;;
  esac
  wait_for "$marker" || return 1
  # No measured run beside setup's compilers: a host-bound step shares the CPU with them.
  [ -e "$WORK/setup.ended" ] || echo "group-$name: waits for setup's builds" | tee -a "$summary"
  while [ ! -e "$WORK/setup.ended" ]; do sleep 5; done
  # The data step's prefix, read once setup has made it (an empty --data-path is refused).
  [ "$data" = none ] || extra=(--data-path "$(sed -n 's/^use: --data-path \([^ ]*\) .*/\1/p' "$WORK/logs/data.txt")")
  [ "$data" = gpt2 ] && extra+=(--vocab-file "$CARRY/gpt2/gpt2-vocab.json" --merge-file "$CARRY/gpt2/gpt2-merges.txt")
  (cd "$KIT" && step "group-$name" env PYTHONPATH="$path:$KIT" "$PYTHON" -m bench run \
     --campaign "$CAMPAIGN" --only "$name" "${extra[@]}" ${RUN_ARGS:-} --records "$WORK/records")
  grep -E '^ +[0-9.]+b |recorded|error' "$WORK/logs/group-$name.txt" | tail -n 30
  for dir in "$KIT"/runs/*/; do
    [ -f "$dir/train.log" ] && cp "$dir/train.log" "$WORK/logs/$(basename "$dir").train.log"
    [ -f "$dir/profile/torch_profile/rank-0.json.gz" ] && cp "$dir/profile/torch_profile/rank-0.json.gz" "$WORK/logs/$(basename "$dir").trace.json.gz"
  done
}

collect() {  # $OUT: records.tgz, logs.tgz, summary.txt and the five newest profiler traces
  mkdir -p "$OUT" && cp "$summary" "$OUT/summary.txt"
  tar czf "$OUT/records.tgz" -C "$WORK" records
  tar czf "$OUT/logs.tgz" -C "$WORK" --exclude='*.trace.json.gz' logs
  # Profiler traces one by one (each a few MB), beside the logs: the five newest, since at most
  # eight files come back and three are taken above.
  ls -t "$WORK"/logs/*.trace.json.gz 2>/dev/null | head -n 5 | while read -r trace; do cp "$trace" "$OUT/"; done
}

case ${1:?setup, smoke, collect or groups} in
  setup) rm -f "$WORK/setup.ended"; touch "$WORK/setup.started"; setup; touch "$WORK/setup.ended" ;;
  fp8-allreduce) wait_for wheels.done && kit; (cd "$KIT" && step fp8-allreduce env PYTHONPATH="$SITE:$KIT" \
           "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node 2 -m bench.train.fp8_allreduce \
           --out "$WORK/records/$(date -u +%Y-%m-%d)-h100x2-fp8-allreduce.json"); cat "$WORK/logs/fp8-allreduce.txt" ;;
  fp8-linear) wait_for msamp.done && kit; (cd "$KIT" && step fp8-linear env PYTHONPATH="$MSAMP_SITE:$TE_SITE:$SITE:$KIT" \
           "$PYTHON" -m bench.train.fp8_linear --out "$WORK/records/$(date -u +%Y%m%dT%H%M%SZ)-fp8-linear.json"); cat "$WORK/logs/fp8-linear.txt" ;;
  te-cast-check) wait_for msamp.done && kit; (cd "$KIT" && step te-cast-check env PYTHONPATH="$MSAMP_SITE:$TE_SITE:$SITE:$KIT" \
           "$PYTHON" docs/reports/2026-11-26-h200x2-msamp-scaling/te_cast_check.py); cat "$WORK/logs/te-cast-check.txt" ;;
  paper-adam-check) wait_for wheels.done && kit; (cd "$KIT" && for check in roundings kernel_matches_torch against_fp32_adamw state_dict_roundtrip; do
           step "paper-adam-$check" env PYTHONPATH="$SITE:$KIT" PAPER_ADAM_CHECK_DEVICE=cuda "$PYTHON" tests/train/paper_adam_checks.py "$check"
           tail -n 2 "$WORK/logs/paper-adam-$check.txt"; done) ;;
  smoke) wait_for wheels.done && kit; (cd "$KIT" && step smoke env PYTHONPATH="$TE_SITE:$SITE:$KIT" "$PYTHON" -m bench.train.smoke \
           --checks nccl,gemm --out "$WORK/records/$(date -u +%Y-%m-%d)-smoke.json"); cat "$WORK/logs/smoke.txt" ;;
  kit-bundle)  # here: HEAD alone (a depth-1 clone's bundle) into .carry-mds/kit.bundle
    rm -rf /tmp/kit-shallow && git clone -q --depth 1 "file://$PWD" /tmp/kit-shallow &&
      mkdir -p .carry-mds && git -C /tmp/kit-shallow bundle create "$PWD/.carry-mds/kit.bundle" HEAD ;;
  te-split) rm -f .te/p? && cat .te/chunk0 .te/chunk1 .te/chunk2 .te/chunk3 .te/chunk4 | split -b 40000000 -d -a1 - .te/p ;;
  te-join)  # install.sh joins chunk0..4: the whole wheel in chunk0, the rest empty; sha256sum checks the join
    mkdir -p /tmp/te-chunks && cat /tmp/te-parts/p? > /tmp/te-chunks/chunk0 &&
      for n in 1 2 3 4; do : > /tmp/te-chunks/chunk$n; done ;;
  te-install)  # .te/install.sh's steps, with the torch extension an earlier machine packed where its stamp matches
    whl=$(ls "$CARRY"/prebuilt/transformer_engine_torch-*.whl 2>/dev/null | head -n 1)
    if [ -z "$whl" ] || [ "$(cat "$CARRY/prebuilt/te-torch.stamp" 2>/dev/null)" != "$(te_stamp)" ]; then
      bash .te/install.sh; exit
    fi
    echo "Transformer Engine's torch extension: the packed wheel of stamp $(te_stamp)"
    name=$(awk '{print $2}' .te/SHA256) && cat /tmp/te-chunks/chunk0 /tmp/te-chunks/chunk1 \
      /tmp/te-chunks/chunk2 /tmp/te-chunks/chunk3 /tmp/te-chunks/chunk4 > "/tmp/$name" &&
      (cd /tmp && sha256sum -c "$OLDPWD/.te/SHA256") &&
      "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$TE_SITE" "/tmp/$name" .te/deps/*.whl &&
      "$PYTHON" -m zipfile -e .te/transformer_engine-*.whl /tmp/te-meta &&
      cp -r /tmp/te-meta/transformer_engine-*.dist-info "$TE_SITE/" &&
      "$PYTHON" -m zipfile -e "$whl" "$TE_SITE" &&
      PYTHONPATH="$TE_SITE" "$PYTHON" -c "import transformer_engine.pytorch, transformer_engine as t; print('Transformer Engine', t.__version__)" &&
      touch "$TE_SITE/.done" ;;
  pack)  # $OUT: MS-AMP's build and TE's torch extension with their stamps, for .carry-prebuilt next time
    mkdir -p "$OUT"
    [ -e "$WORK/msamp.done" ] && tar czf "$OUT/msamp-site.tgz" -C "$MSAMP_SITE" . && msamp_stamp > "$OUT/msamp.stamp"
    cp /tmp/te-wheel/transformer_engine_torch-*.whl "$OUT/" 2>/dev/null && te_stamp > "$OUT/te-torch.stamp"
    ls -la "$OUT" ;;
  bg) shift
    # Marked before it returns: a group in the same command must wait for setup, not find none.
    [ "${1:-}" = setup ] && rm -f "$WORK/setup.ended" && touch "$WORK/setup.started"
    (setsid nohup bash "$0" "$@" > "$WORK/logs/bg-$(date +%s).out" 2>&1 < /dev/null &) ;;
  wait)
    # A machine started afresh since setup has nothing to wait for: say so at once.
    [ -f "$summary" ] || { echo "wait: no $summary: this machine has not been set up (run setup)"; exit 3; }
    end=$(( $(date +%s) + ${3:?wait GROUP SECONDS} ))
    until grep -q "^group-$2: exit" "$summary" 2>/dev/null || [ "$(date +%s)" -ge "$end" ]; do sleep 5; done
    tail -n 3 "$summary"; grep -E '^ +[0-9.]+[bm] |iteration +[0-9]+/' "$WORK/logs/group-$2.txt" 2>/dev/null | tail -n 4
    # Every wait brings back what has finished: a machine lost between two commands loses nothing.
    [ -z "${OUT:-}" ] || collect > /dev/null 2>&1
    grep -q "^group-$2: exit" "$summary" ;;  # exit status 0 once the group has ended
  collect) collect ;;
  *)
    wait_for wheels.done || exit 1
    kit
    for name in "$@"; do group "$name"; done ;;
esac
