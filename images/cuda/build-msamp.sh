#!/bin/sh
# MS-AMP as the GPU machines ran it (docs/reports/2026-11-25-h200-msamp/h200-msamp.sh `setup`): the
# pinned source tree, the kit's patch series applied, then four installs against the base's torch,
# each `pip install --no-deps --no-build-isolation .`: the msamp package (pure Python) and its CUDA
# extensions msamp_arithmetic, msamp_quantize (fp4_quantize) and msamp_adamw (optim), compiled for
# the GPU architectures ARCH (TORCH_CUDA_ARCH_LIST: "9.0" is H100/H200, "8.0;9.0" adds A100).
# Not built: dist_op (it needs the msccl submodule; patch 0003 loads it at the first FP8 collective).
# Last, the extensions are imported, so a broken build fails here and not at a job's first step.
# Usage: sh build-msamp.sh TREE SERIES ARCH   (beside the kit's series.py, as in the image)
set -eu
tree=$1
series=$2
arch=$3
python3 "$(dirname "$0")/series.py" apply "$series" "$tree"
install() {  # install PART: one of the four, with the architectures of the extensions
  echo "msamp: installing $1 (TORCH_CUDA_ARCH_LIST=$arch)"
  (cd "$tree/$1" && TORCH_CUDA_ARCH_LIST="$arch" \
    python3 -m pip install --no-cache-dir --no-deps --no-build-isolation .)
}
install .
# The extensions' setup.py files import torch.utils.cpp_extension: they need the base's torch with
# its CUDA toolkit (NGC PyTorch has both).
if ! python3 -c 'import torch, torch.utils.cpp_extension as c; assert torch.version.cuda and c.CUDA_HOME' 2>/dev/null; then
  echo "msamp: cannot build MS-AMP's CUDA extensions: this base has no torch with a CUDA toolkit (nvcc); use the NGC PyTorch base" >&2
  exit 1
fi
for part in msamp/operators/arithmetic msamp/operators/fp4_quantize msamp/optim; do
  install "$part"
done
python3 -c 'import importlib.util, sys
missing = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]
assert not missing, f"not installed: {missing}"
import torch, msamp_arithmetic, msamp_quantize, msamp_adamw
print("msamp: installed and imported", *sys.argv[1:])' msamp msamp_arithmetic msamp_quantize msamp_adamw
