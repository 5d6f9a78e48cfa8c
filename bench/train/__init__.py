"""The training entry run on GPU nodes and in images (needs torch + megatron-core 0.19.2).

- :mod:`bench.train.pretrain_gpt`: ``python -m bench.train.pretrain_gpt <Megatron flags>``, GPT
  pretraining on ``megatron.training.pretrain`` (Megatron's own loop and log lines).
- :mod:`bench.train.spec`: which layer spec / core attention is built, and which flags the
  environment requires (no Transformer Engine, no apex on the lent GPUs).
- :mod:`bench.train.attention`: core attention through ``torch.nn.functional.scaled_dot_product_attention``.

Nothing here is imported by the host-side package (``bench.cli`` etc.), which stays torch-free.
"""

# NVLink SHARP / multicast stay off on the lent machines (shared/DEVICE.md): set wherever the kit
# starts processes that may use NCCL, before NCCL initialises.
NCCL_SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
