#!/bin/sh
# Build, at image build time, what Megatron-DeepSpeed otherwise compiles at its first run: a
# Singularity image on LUMI is read-only, so a first run there cannot build it (seed 004 warns of
# the hang). The dataset helpers (C++, pybind11) always; the fused softmax kernels where the base
# has torch with its CUDA or ROCm toolkit, for the base's TORCH_CUDA_ARCH_LIST (the same list at
# run time, so torch's JIT finds them built; in a read-only tree the kit's patch 0003 imports them).
# Usage: prebuild-megatron-deepspeed.sh TREE
set -eu
tree=$1
make -C "$tree/megatron/data" CPPFLAGS="$(python3 -m pybind11 --includes)" \
  LIBEXT="$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
(cd "$tree/megatron/data" && python3 -c 'import helpers; print("dataset helpers built:", helpers.__file__)')
if python3 -c 'import torch.utils.cpp_extension as c, torch; assert (torch.version.cuda and c.CUDA_HOME) or (torch.version.hip and c.ROCM_HOME)' 2>/dev/null; then
  (cd "$tree" && python3 -c 'import types
from megatron import fused_kernels
fused_kernels.load(types.SimpleNamespace(masked_softmax_fusion=True, rank=0))')
  echo "fused kernels built in $tree/megatron/fused_kernels/build (TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-})"
else
  echo "fused kernels not built: this base has no torch with a CUDA or ROCm toolkit"
fi
