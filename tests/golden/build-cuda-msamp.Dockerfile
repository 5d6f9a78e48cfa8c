# --build-arg BASE_DIGEST=unknown
# --build-arg BASE_IMAGE=nvcr.io/nvidia/pytorch:25.03-py3
# --build-arg IMAGE_TAG=megatron-bench-kit/cuda:0123456789abcdef
# --build-arg KIT_COMMIT=0000000000000000000000000000000000000000
# --build-arg MSAMP_COMMIT=9746ea85289f8e6233646e73ace35f730d1245d5
# --build-arg MSAMP_CUDA_ARCH=9.0
# --build-arg PATCHES_SHA256=754be5d531688dd72006ed57326a596b23f4ec20c7d49ad90b3ffd7f270e8fc4
# --build-arg PINS=megatron-core==0.19.2 deepspeed==0.18.2 megatron-core==0.19.2 deepspeedai/Megatron-DeepSpeed@207b2d5aad1eea98464c37e0b991be6f8937226f Azure/MS-AMP@9746ea85289f8e6233646e73ace35f730d1245d5
# --build-arg WITH_MSAMP=1
# NVIDIA image: NGC PyTorch + pinned megatron-core, DeepSpeed and Megatron-DeepSpeed + patch series + the kit.
# Build it with `nox -s build-cuda` (python -m bench images build cuda): the build context, the
# build args and the tag are made from images/pins.toml; building this file by hand needs that context.
FROM nvcr.io/nvidia/pytorch:25.03-py3

# The GPU architectures of MS-AMP's CUDA extensions (TORCH_CUDA_ARCH_LIST): 9.0 is H100/H200
# (sm_90), what the GPU machines ran; "8.0;9.0" adds A100. `--option msamp_arch=...` sets it.
LABEL org.opencontainers.image.title="megatron-bench-cuda" \
      org.opencontainers.image.source="megatron-bench-kit" \
      org.opencontainers.image.revision="0000000000000000000000000000000000000000" \
      org.opencontainers.image.base.name="nvcr.io/nvidia/pytorch:25.03-py3" \
      dev.megatron-bench.pins="megatron-core==0.19.2 deepspeed==0.18.2 megatron-core==0.19.2 deepspeedai/Megatron-DeepSpeed@207b2d5aad1eea98464c37e0b991be6f8937226f Azure/MS-AMP@9746ea85289f8e6233646e73ace35f730d1245d5" \
      dev.megatron-bench.patches.sha256="754be5d531688dd72006ed57326a596b23f4ec20c7d49ad90b3ffd7f270e8fc4" \
      dev.megatron-bench.msamp="1" \
      dev.megatron-bench.msamp.commit="9746ea85289f8e6233646e73ace35f730d1245d5" \
      dev.megatron-bench.msamp.cuda_arch="9.0"

# The base's Python is the one to extend (it carries NVIDIA's torch); Ubuntu 24.04 marks it
# externally managed.
ENV PIP_BREAK_SYSTEM_PACKAGES=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt

COPY ca/ /usr/local/share/ca-certificates/megatron-bench/
COPY install-ca.sh /opt/megatron-bench/install-ca.sh
RUN sh /opt/megatron-bench/install-ca.sh

# Light dependencies first, then the pinned packages without dependencies so pip never replaces
# the base's torch or numpy.
COPY requirements.txt packages.txt /opt/megatron-bench/
RUN python3 -m pip install --no-cache-dir -r /opt/megatron-bench/requirements.txt
RUN python3 -m pip install --no-cache-dir --no-deps --no-build-isolation -r /opt/megatron-bench/packages.txt

COPY series.py pins.toml /opt/megatron-bench/
COPY patches/ /opt/megatron-bench/patches/

# MS-AMP for the msamp-o1/msamp-o2/fp4 precisions, off by default: the pinned commit's source tree
# (fetched by the build on the host, like Megatron-DeepSpeed's; without msamp=1 a README that says
# so), its patch series (patches/ms-amp: fit to the base's torch, Transformer Engine and DeepSpeed),
# then the msamp package and its arithmetic, fp4_quantize and optim CUDA extensions for
# MSAMP_CUDA_ARCH, imported at the end. Not built: dist_op (MSCCL), see build-msamp.sh.
COPY upstream/ms-amp/ /opt/MS-AMP/
COPY build-msamp.sh /opt/megatron-bench/
RUN if [ "1" = "1" ]; then \
        sh /opt/megatron-bench/build-msamp.sh /opt/MS-AMP /opt/megatron-bench/patches/ms-amp/series "9.0"; \
    fi
RUN python3 /opt/megatron-bench/series.py apply /opt/megatron-bench/patches/megatron-core/series --dist megatron-core

# Megatron-DeepSpeed at the pinned commit (fetched by the build on the host), patched in place, with
# its dataset helpers and fused kernels built now. No PYTHONPATH: its `megatron` package would hide
# megatron-core's; `python /opt/Megatron-DeepSpeed/pretrain_gpt.py` finds it beside the script.
COPY upstream/megatron-deepspeed/ /opt/Megatron-DeepSpeed/
RUN python3 /opt/megatron-bench/series.py apply /opt/megatron-bench/patches/megatron-deepspeed/series /opt/Megatron-DeepSpeed
COPY prebuild-megatron-deepspeed.sh /opt/megatron-bench/
RUN sh /opt/megatron-bench/prebuild-megatron-deepspeed.sh /opt/Megatron-DeepSpeed

# The kit last: it changes most often.
COPY kit/ /opt/megatron-bench/kit/
RUN python3 -m pip install --no-cache-dir --no-deps /opt/megatron-bench/kit

# What a run inside the image records (bench.running.provenance): this image's tag and its base. The base
# digest is the pinned one, or the one the engine resolved at build time, or "unknown". Last, so a
# new tag does not invalidate the cached layers above.
LABEL org.opencontainers.image.base.digest="unknown"
ENV BENCH_IMAGE="megatron-bench-kit/cuda:0123456789abcdef" \
    BENCH_BASE_IMAGE="nvcr.io/nvidia/pytorch:25.03-py3" \
    BENCH_BASE_DIGEST="unknown"

WORKDIR /workspace
CMD ["python3", "-m", "bench.images.check", "--target", "cuda"]
