#!/usr/bin/env bash
# The README's main job on a fresh lent H200 whose Python has torch and nothing of the kit's stack
# (no network there): `pip install nox pydantic` from carried wheels, then `nox -s bench -- 1.3b
# tp1pp1` twice with a wheelhouse. The first start provisions the training venv, the second reuses
# it; every output line carries the seconds since its nox command began, so the logs show how long
# each start took before torchrun.
#
# Carry .p15/ (made here on a connected machine, Python 3.12 as on the GPU machine):
#   .p15/nox        wheels of nox and pydantic:   pip download --only-binary=:all: -d .p15/nox nox pydantic==2.11.7
#   .p15/wheelhouse the training stack (cuda):    python -m bench.running.provision wheelhouse cuda --dest .p15/wheelhouse --python python3.12
# Run from the repo root: OUT=$OUT bash docs/reports/2026-11-23-h200-provision/h200-provision.sh
set -uo pipefail
OUT=${OUT:?set OUT to an output folder}
mkdir -p "$OUT/records" "$OUT/logs"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

stamped() {  # stamped NAME COMMAND...: run it, each output line prefixed by seconds since start
  local name=$1; shift
  local start; start=$(date +%s.%N)
  "$@" 2>&1 | python3 -u -c 'import sys, time
t0 = float(sys.argv[1])
for line in sys.stdin:
    print(f"{time.time() - t0:8.2f} {line}", end="")' "$start" > "$OUT/logs/$name.txt"
  local rc=${PIPESTATUS[0]}
  echo "$name: exit $rc in $(python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.2f}')" "$start") s"
  return "$rc"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import sys, torch; print(sys.executable, "torch", torch.__version__)'
python3 -c 'import megatron.core' 2>/dev/null && echo "megatron-core is already here: not a fresh machine" && exit 1
stamped pip-install python3 -m pip install -q --no-index --find-links .p15/nox nox pydantic
for start in first second; do
  stamped "bench-$start" nox -s bench -- 1.3b tp1pp1 --wheelhouse .p15/wheelhouse \
    --records-dir "$OUT/records"
  grep -E 'provisioning|training venv|Running session|preflight|capabilit' "$OUT/logs/bench-$start.txt" | head -n 8
  tail -n 4 "$OUT/logs/bench-$start.txt"
done
