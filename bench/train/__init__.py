"""What runs on the GPU node: the training entry and its precision code, the smoke and system checks.

The training entry, on megatron-core's own loop:

- :mod:`bench.train.pretrain_gpt`: ``python -m bench.train.pretrain_gpt <Megatron flags>``, GPT
  pretraining on ``megatron.training.pretrain`` (Megatron's own loop and log lines) with the kit's
  ``--kit-*`` flags.
- :mod:`bench.train.spec`: which layer spec / core attention is built, and which flags the
  environment requires (no Transformer Engine or apex on a bare GPU machine);
  :mod:`bench.train.attention`: core attention through torch's ``scaled_dot_product_attention``.
- :mod:`bench.train.optimizer`: which torch AdamW steps the model where TE and apex are absent
  (``--kit-torch-adam``); :mod:`bench.train.memory_cap`: train as if each GPU had less memory
  (``--kit-gpu-memory-cap``), and :mod:`bench.train.capped` the same around Megatron-DeepSpeed's
  script; :mod:`bench.train.memory_parts`: the bytes a parameter by part
  (weights, gradients, master, moments), one log line after the first optimizer step.

Precision beyond Transformer Engine's recipes (about 1.3k lines, the FP8-LM paper's pieces):

- :mod:`bench.train.msamp`: MS-AMP behind ``--kit-msamp {O1,O2}`` (the msamp-o1, msamp-o2 and fp4
  precisions): MS-AMP's FP8 linear in every transformer layer, and for O2 its ``LBAdamW``.
- :mod:`bench.train.paper_adam`: ``PaperAdamW``, the paper's Adam states (fp16 master, fp8 and
  fp16 moments, power-of-two scales) stepped by the kit (``--optimizer-states paper-kit``);
  :mod:`bench.train.paper_adam_kernel`: its step as one Triton kernel launched twice.
- :mod:`bench.train.fp8_allreduce`: FP8 gradient reduction on stock NCCL (an all-gather, or a
  shared-scale reduce-scatter or all-reduce) and its microbenchmark;
  :mod:`bench.train.grad_reduce`: ``--kit-grad-reduce``, megatron-core DDP's gradient reduction
  through those collectives.
- :mod:`bench.train.fp8_linear`: ``python -m bench.train.fp8_linear``, MS-AMP's FP8 linear against
  ``te.Linear`` fp8, forward and backward on one GPU.

Checks and timing:

- :mod:`bench.train.smoke`: ``python -m bench.train.smoke``, the GPU node's smoke test (NCCL, GEMM
  ceilings, a short training).
- :mod:`bench.train.rankenv`: ``python -m bench.train.rankenv <command>``, each rank's launcher
  wrapper; :mod:`bench.train.sysinfo`: one rank's line of the system check.
- :mod:`bench.train.timing`: the one timer of the microbenchmarks (CUDA events, or the host clock).

The training entry needs torch + megatron-core 0.19.2 (and MS-AMP for ``--kit-msamp``, Triton for
PaperAdamW's kernel); the precision modules and memory_parts need torch; fp8_linear needs Transformer
Engine and MS-AMP too; the rest needs only the standard library and imports torch where it measures.

Nothing that imports torch is imported by the host-side package, which stays torch-free.
The entry sets no environment of its own: NCCL and CUDA settings (NVLink multicast off on shared
hosts, ``CUDA_DEVICE_MAX_CONNECTIONS``) are platform data, exported by the launcher from
``platforms/<name>.toml``.
"""
