#!/usr/bin/env bash
# All of a session's one-GPU work on one lent H200, as one background chain, so that no step is cut
# by the device's 10-minute limit per call: the calls after the one that starts it carry
# Transformer Engine's chunks (shared/device-te) and then only collect /tmp/chain.
# Start it from the repo root with .carry-mds/ and .carry/ carried
# (docs/reports/2026-11-23-h200-mds-fusions/gather-mds-carry.sh; .carry/ holds the megatron-core wheel, MS-AMP's snapshot and a colorlog wheel):
#   rm -rf /tmp/kit && cp -r . /tmp/kit && cd /tmp/kit &&
#   setsid nohup bash docs/reports/2026-11-23-h200-chain/h200-chain.sh > /tmp/chain.log 2>&1 < /dev/null &
# The GPU runs one step at a time, in this order (the priorities): Megatron-DeepSpeed 1.3b
# bf16 / fp16 and its megatron counterpart; TE attention pairs (waits for /tmp/te-site/.done, which
# `bash .te/install.sh` writes); the MS-AMP probe; the rest of the TE attention campaign. Builds
# that need no GPU (MS-AMP's extensions, niced) run while Megatron-DeepSpeed sets itself up.
# Each step appends one line to /tmp/chain/status; its files are under /tmp/chain/<step>/.
# STEPS picks some of them (default: all): mds te-pairs msamp te-more.
set -u
STEPS=" ${STEPS:-mds te-pairs msamp te-more} "
want() { [[ $STEPS == *" $1 "* ]]; }
CHAIN=/tmp/chain
mkdir -p "$CHAIN"
log() { echo "$(date -u +%T) $*" | tee -a "$CHAIN/status"; }
wait_for() {  # wait_for FILE SECONDS
  local end=$(( $(date +%s) + $2 ))
  while [ ! -f "$1" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 2; done
  [ -f "$1" ]
}
log "chain started"
OUT=$CHAIN bash docs/reports/2026-11-23-h200-te/te-campaign.sh setup && log "megatron-core in /tmp/mc-site"
want msamp && MAX_JOBS=4 nice -n 19 bash docs/reports/2026-11-23-h200-chain/msamp-probe.sh build > /tmp/msamp-build.log 2>&1 &

if want mds; then
  OUT=$CHAIN/mds bash docs/reports/2026-11-23-h200-mds-fusions/h200-megatron-deepspeed.sh > "$CHAIN/mds.log" 2>&1
  log "megatron-deepspeed: exit $?"
fi

if ! want te-pairs; then
  :
elif wait_for /tmp/te-site/.done 1200; then
  OUT=$CHAIN/te bash docs/reports/2026-11-23-h200-te/te-campaign.sh results/campaigns/h200-te-attention.toml pairs \
    > "$CHAIN/te-pairs.log" 2>&1
  log "te attention pairs: exit $?"
else
  log "Transformer Engine never installed: TE steps skipped"
fi
wait
if want msamp; then
  wait_for /tmp/te-site/.done 1200 || log "no Transformer Engine: the probe's TE step fails"
  bash docs/reports/2026-11-23-h200-chain/msamp-probe.sh probe > "$CHAIN/msamp-probe.log" 2>&1
  log "msamp probe: exit $?"
fi
if want te-more && [ -f /tmp/te-site/.done ]; then
  OUT=$CHAIN/te bash docs/reports/2026-11-23-h200-te/te-campaign.sh results/campaigns/h200-te-attention.toml more \
    > "$CHAIN/te-more.log" 2>&1
  log "te attention more: exit $?"
fi
log "chain done"
