#!/usr/bin/env bash
# Transformer Engine on one lent H200, side by side with the no-TE path: the same model, layout and
# batch in bf16 without TE (torch SDPA), with TE but no apex, with TE and apex (the NGC-like
# environment), and in fp8 with each TE recipe. The kit detects what each environment has and
# plans its flags; nothing here adds a Megatron flag for the environment.
#
# Before: shared/device-te (Transformer Engine 2.20.2 in /tmp/te-site, chunks carried over four
# calls) and, in .carry/, the megatron-core 0.19.2 wheel and the apex snapshot from shared/upstreams.
# Usage (repo root, OUT set): h200-te.sh setup | notes | te | rest
#   setup: megatron-core into /tmp/mc-site; apex built in the background (niced) into /tmp/apex-site
#   notes: the no-TE baseline runs
#   te:    TE without apex: bf16 and fp8-delayed (after `.te/install.sh` in the same call)
#   rest:  TE without apex in fp8-current; TE with apex: bf16, and fp8-delayed for 2.7b
# Everything comes back as one file, $OUT/records.tgz (records/ and logs/).
set -uo pipefail
OUT=${OUT:?set OUT to an output folder}
WORK=$OUT/work
mkdir -p "$WORK/records" "$WORK/logs"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
MC=/tmp/mc-site TE=/tmp/te-site APEX=/tmp/apex-site
# The two models of the comparison, at the batch the no-TE campaigns measured best on one GPU.
MODELS=("1.3b tp1pp1 --mbs 8 --gbs 64" "2.7b tp1pp1 --mbs 8 --gbs 64")

run() {  # run <name> <python path> <bench run arguments...>
  local name=$1 path=$2; shift 2
  # An environment that cannot train is a campaign mistake, not a run: stop before launching.
  PYTHONPATH="$path:$PWD" python3 -m bench.capabilities > "$WORK/logs/$name.caps" || exit 3
  # shellcheck disable=SC2086  # the model spec is words
  PYTHONPATH="$path:$PWD" timeout 300 python3 -m bench run $* --iters 12 --records-dir "$WORK/records" \
    --timeout 280 --hang-timeout 150 > "$WORK/logs/$name.txt" 2>&1
  echo "$name: exit $? $(cat "$WORK/logs/$name.caps")"; tail -n 2 "$WORK/logs/$name.txt"
}

each_model() {  # each_model <name suffix> <python path> [more bench options]
  local suffix=$1 path=$2; shift 2
  for spec in "${MODELS[@]}"; do
    run "${spec%% *}-$suffix" "$path" "$spec" "$@"
  done
}

finish() { tar -czf "$OUT/records.tgz" -C "$WORK" records logs && rm -rf "$WORK"; }
trap finish EXIT

case ${1:?setup, notes, te or rest} in
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
    for precision in bf16 fp8-delayed; do
      each_model "$precision-te" "$TE:$MC" --precision "$precision"
    done
    ;;
  rest)
    each_model fp8-current-te "$TE:$MC" --precision fp8-current
    for _ in $(seq 24); do [ -f $APEX/.done ] && break; sleep 5; done
    tail -n 1 /tmp/apex-build.log
    each_model bf16-te-apex "$APEX:$TE:$MC"
    run 2.7b-fp8-delayed-te-apex "$APEX:$TE:$MC" "${MODELS[1]}" --precision fp8-delayed
    ;;
esac
