#!/usr/bin/env bash
# Transformer Engine on one lent H200, side by side with the no-TE path: the same model, layout and
# batch in bf16 without TE (torch SDPA), with TE but no apex, with TE and apex (the NGC-like
# environment), and in fp8 with each TE recipe. The kit detects what each environment has and
# plans its flags; nothing here adds a Megatron flag for the environment.
#
# Before: shared/device-te (Transformer Engine 2.20.2 in /tmp/te-site, chunks carried over four
# calls) and, in .carry/, the megatron-core 0.19.2 wheel and the apex snapshot from shared/upstreams.
# Usage (repo root, OUT set): h200-te.sh setup | notes | te | apex
#   setup: megatron-core into /tmp/mc-site; apex built in the background (niced) into /tmp/apex-site
#   notes: the no-TE baseline runs (while Transformer Engine's extension builds: the call that
#          carries its last chunk starts `.te/install.sh` in the background, see device-te)
#   te:    TE without apex: bf16, fp8-delayed, fp8-current
#   apex:  TE with apex: bf16 and fp8-delayed
set -uo pipefail
OUT=${OUT:?set OUT to an output folder}
mkdir -p "$OUT/records" "$OUT/logs"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
MC=/tmp/mc-site TE=/tmp/te-site APEX=/tmp/apex-site
# The two models of the comparison, at the batch the no-TE campaigns measured best on one GPU.
MODELS=("1.3b tp1pp1 --mbs 8 --gbs 64" "2.7b tp1pp1 --mbs 8 --gbs 64")

run() {  # run <name> <python path> <bench run arguments...>
  local name=$1 path=$2; shift 2
  PYTHONPATH="$path:$PWD" python3 -m bench.capabilities > "$OUT/logs/$name.caps" 2>/dev/null
  # shellcheck disable=SC2086  # the model spec is words
  PYTHONPATH="$path:$PWD" timeout 300 python3 -m bench run $* --iters 12 --records-dir "$OUT/records" \
    --timeout 280 --hang-timeout 150 > "$OUT/logs/$name.txt" 2>&1
  echo "$name: exit $? $(cat "$OUT/logs/$name.caps")"; tail -n 2 "$OUT/logs/$name.txt"
}

each_model() {  # each_model <name suffix> <python path> [more bench options]
  local suffix=$1 path=$2; shift 2
  for spec in "${MODELS[@]}"; do
    run "${spec%% *}-$suffix" "$path" "$spec" "$@"
  done
}

case ${1:?setup, notes, te or apex} in
  setup)
    python3 -m pip install -q --no-index --no-deps --target $MC .carry/megatron_core-*.whl
    mkdir -p /tmp/apex-src && tar -xzf .carry/apex-*.tar.gz -C /tmp/apex-src --strip-components 1
    # Its own session, so it outlives this call; niced, so the GPU runs keep their CPU.
    setsid nohup nice -n 19 bash -c "cd /tmp/apex-src && TORCH_CUDA_ARCH_LIST=9.0 APEX_CPP_EXT=1 \
      APEX_CUDA_EXT=1 APEX_PARALLEL_BUILD=8 NVCC_APPEND_FLAGS='--threads 2' python3 -m pip wheel \
      --no-build-isolation --no-deps --no-index -w /tmp/apex-wheel . && python3 -m pip install -q \
      --no-index --no-deps --target $APEX /tmp/apex-wheel/apex-*.whl && touch $APEX/.done" \
      > /tmp/apex-build.log 2>&1 < /dev/null &
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    ;;
  notes)
    each_model bf16-no-te "$MC"
    ;;
  te)
    for _ in $(seq 60); do [ -f $TE/.done ] && break; sleep 5; done
    tail -n 2 /tmp/te-install.log
    for precision in bf16 fp8-delayed fp8-current; do
      each_model "$precision-te" "$TE:$MC" --precision "$precision"
    done
    ;;
  apex)
    for _ in $(seq 60); do [ -f $APEX/.done ] && break; sleep 5; done
    tail -n 3 /tmp/apex-build.log
    for precision in bf16 fp8-delayed; do
      each_model "$precision-te-apex" "$APEX:$TE:$MC" --precision "$precision"
    done
    ;;
esac
tar -czf "$OUT/records.tgz" -C "$OUT" records logs
