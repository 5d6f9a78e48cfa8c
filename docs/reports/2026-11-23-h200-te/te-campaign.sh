#!/usr/bin/env bash
# Runs one group of a Transformer Engine campaign file on the lent H200s, with TE 2.20.2
# (shared/device-te, in /tmp/te-site) and megatron-core 0.19.2 (carried in .carry/). The kit
# detects TE and plans its flags; nothing here adds a Megatron flag for the environment.
# Usage (repo root, OUT set):
#   te-campaign.sh setup                  megatron-core into /tmp/mc-site (any call before the runs)
#   te-campaign.sh CAMPAIGN.toml GROUP    the group's runs (after `bash .te/install.sh` on the
#                                         same machine); NO_TE=1: without TE on the path (the
#                                         no-TE SDPA counterpart of the same campaign)
# Each group comes back as one file, $OUT/<campaign>-<group>.tgz (records/ and logs/).
set -uo pipefail
OUT=${OUT:?set OUT to an output folder}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ "${1:?setup, or a campaign file and a group}" = setup ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/mc-site .carry/megatron_core-*.whl
  exit
fi
campaign=$1 group=${2:?a group of the campaign}
name=$(basename "$campaign" .toml)-$group
work=/tmp/$name
mkdir -p "$work/records" "$work/logs" "$OUT"
if [ "${NO_TE:-0}" = 1 ]; then
  export PYTHONPATH=/tmp/mc-site:$PWD
else
  export PYTHONPATH=/tmp/te-site:/tmp/mc-site:$PWD
fi
# An environment that cannot train is a campaign mistake, not a run: stop before launching.
python3 -m bench.capabilities > "$work/logs/capabilities.txt" || exit 3
cat "$work/logs/capabilities.txt"
python3 -m bench run --campaign "$campaign" --only "$group" --records-dir "$work/records" \
  --timeout 300 --hang-timeout 150 > "$work/logs/campaign.txt" 2>&1
echo "$name: exit $?"
grep -E '^ +[0-9.]+b ' "$work/logs/campaign.txt"
tar -czf "$OUT/$name.tgz" -C "$work" records logs
