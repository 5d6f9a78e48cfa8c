#!/usr/bin/env bash
# Runs h200-te-attention.toml on one lent H200 with Transformer Engine 2.20.2 (shared/device-te, in
# /tmp/te-site) and megatron-core 0.19.2 (carried in .carry/). The kit detects TE and plans its
# flags; nothing here adds a Megatron flag for the environment.
# Usage (repo root, OUT set): h200-te-attention.sh setup | pairs | more
#   setup: megatron-core into /tmp/mc-site (any call before the TE runs)
#   pairs, more: the campaign's groups (after `bash .te/install.sh` on the same machine)
# Each group comes back as one file, $OUT/te-<group>.tgz (records/ and logs/).
set -uo pipefail
OUT=${OUT:?set OUT to an output folder}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
group=${1:?setup, pairs or more}
if [ "$group" = setup ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/mc-site .carry/megatron_core-*.whl
  exit
fi
work=/tmp/te-$group
mkdir -p "$work/records" "$work/logs"
export PYTHONPATH=/tmp/te-site:/tmp/mc-site:$PWD
# An environment that cannot train is a campaign mistake, not a run: stop before launching.
python3 -m bench.capabilities > "$work/logs/capabilities.txt" || exit 3
cat "$work/logs/capabilities.txt"
python3 -m bench run --campaign results/campaigns/h200-te-attention.toml --only "$group" \
  --records-dir "$work/records" --timeout 240 --hang-timeout 150 > "$work/logs/campaign.txt" 2>&1
echo "campaign $group: exit $?"
grep -E '^ +[0-9.]+b ' "$work/logs/campaign.txt"
tar -czf "$OUT/te-$group.tgz" -C "$work" records logs
