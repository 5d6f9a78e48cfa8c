"""What runs on the GPU node: the training entry, each rank's wrapper, the smoke and system checks.

- :mod:`bench.train.pretrain_gpt`: ``python -m bench.train.pretrain_gpt <Megatron flags>``, GPT
  pretraining on ``megatron.training.pretrain`` (Megatron's own loop and log lines).
- :mod:`bench.train.spec`: which layer spec / core attention is built, and which flags the
  environment requires (no Transformer Engine or apex on a bare GPU machine).
- :mod:`bench.train.attention`: core attention through ``torch.nn.functional.scaled_dot_product_attention``.
- :mod:`bench.train.rankenv`: ``python -m bench.train.rankenv <command>``, each rank's launcher
  wrapper; :mod:`bench.train.sysinfo`: one rank's line of the system check.
- :mod:`bench.train.smoke`: ``python -m bench.train.smoke``, the GPU node's smoke test.
- :mod:`bench.train.fp8_allreduce`: FP8 gradient reduction on stock NCCL (all-gather, or a
  shared-scale reduce-scatter) and its microbenchmark; not wired into training yet.

The training entry needs torch + megatron-core 0.19.2, the FP8 reduction torch; the rest needs only
the standard library.

Nothing that imports torch is imported by the host-side package, which stays torch-free.
The entry sets no environment of its own: NCCL and CUDA settings (NVLink multicast off on shared
hosts, ``CUDA_DEVICE_MAX_CONNECTIONS``) are platform data, exported by the launcher from
``platforms/<name>.toml``.
"""
