"""The training entry run on GPU nodes and in images (needs torch + megatron-core 0.19.2).

- :mod:`bench.train.pretrain_gpt`: ``python -m bench.train.pretrain_gpt <Megatron flags>``, GPT
  pretraining on ``megatron.training.pretrain`` (Megatron's own loop and log lines).
- :mod:`bench.train.spec`: which layer spec / core attention is built, and which flags the
  environment requires (no Transformer Engine, no apex on the lent GPUs).
- :mod:`bench.train.attention`: core attention through ``torch.nn.functional.scaled_dot_product_attention``.

Nothing here is imported by the host-side package (``bench.cli`` etc.), which stays torch-free.
The entry sets no environment of its own: NCCL and CUDA settings (NVLink multicast off on shared
hosts, ``CUDA_DEVICE_MAX_CONNECTIONS``) are platform data, exported by the launcher from
``platforms/<name>.toml``.
"""
