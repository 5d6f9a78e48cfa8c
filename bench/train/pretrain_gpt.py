"""GPT pretraining entry on megatron-core's own training loop: ``python -m bench.train.pretrain_gpt``.

The kit's counterpart of Megatron-LM's ``pretrain_gpt.py`` for the pinned megatron-core 0.19.2
wheel, which ships ``megatron.training`` but not that script. The argv is Megatron's own, parsed by
``megatron.training.arguments.parse_and_validate_args``, plus the kit's flags (added through
``extra_args_provider``, so Megatron's parser sees them too):

- ``--kit-attention {auto,sdpa,local,te}``: core attention (see :mod:`bench.train.spec`). The default
  ``auto`` is Transformer Engine's under ``--transformer-impl transformer_engine`` and torch SDPA
  under ``--transformer-impl local``.
- ``--kit-torch-adam {fused,foreach}``: the AdamW kernel when Megatron falls back to torch's
  optimizers (no TE, no apex; see :mod:`bench.train.optimizer`). Default ``fused``.
- ``--kit-msamp-modules {torch,te}``: the layer norm and core attention around MS-AMP's FP8 linears
  (``--kit-msamp``): torch's (the default) or Transformer Engine's ``TENorm`` and
  ``TEDotProductAttention`` (see :mod:`bench.train.spec`).
- ``--kit-grad-reduce {native,fp8-allgather,fp8-shared-scale}`` and ``--kit-grad-reduce-format
  {e4m3,e5m2}``: data-parallel gradient reduction in megatron-core's DDP; ``native`` (the default)
  is megatron-core's own, the others the kit's FP8 collectives (see :mod:`bench.train.grad_reduce`).
- ``--kit-gpu-memory-cap GB``: torch's allocator capped as on a GPU of GB (see
  :mod:`bench.train.memory_cap`).
- ``--kit-paper-adam``: under ``--use-precision-aware-optimizer`` with the FP8-LM paper's dtypes,
  megatron-core builds the kit's ``PaperAdamW`` where it would build Transformer Engine's FusedAdam
  (see :mod:`bench.train.paper_adam`).

Training runs in ``megatron.training.pretrain``: its ``get_model``/builder wraps the model in
``Float16Module`` for ``--bf16``/``--fp16``, its ``train()`` sets the DDP no-sync / grad-sync /
finalize functions that ``--overlap-grad-reduce`` needs, and its ``training_log`` prints the
standard ``iteration N/ M | ... | lm loss: ... | number of nan iterations: ...`` lines (with
``throughput per GPU (TFLOP/s/GPU)`` under ``--log-throughput``), so one parser reads these logs and
Megatron-LM's. Data: ``MockGPTDataset`` unless ``--data-path`` names Megatron ``.bin/.idx`` files.
The tokenizer defaults to ``NullTokenizer`` (which needs ``--vocab-size``). After the first
optimizer step rank 0 prints the bytes it holds by part (:mod:`bench.train.memory_parts`). Before
training, rank 0 prints how long its host takes to issue a torch op (:mod:`bench.train.host_probe`).
"""

import time

_PROGRAM_START_TIME = time.time()  # before the heavy imports, as Megatron's startup timers expect

import os
import sys
from argparse import ArgumentParser, Namespace, _ArgumentGroup
from functools import partial

import torch

from bench.config.capabilities import detect as detect_capabilities
from bench.measure.profile import PROFILE_DIR, PROFILE_DIR_ENV
from bench.train import grad_reduce, host_probe, memory_cap
from bench.train.memory_parts import report_after_first_step
from bench.train.msamp import MSAMP_CHOICES, msamp_problem, use_msamp_adam
from bench.train.optimizer import TORCH_ADAM_CHOICES, select_torch_adam
from bench.train.paper_adam import use_paper_adam
from bench.train.spec import (
    ATTENTION_CHOICES,
    MSAMP_MODULES_CHOICES,
    check_args,
    layer_spec_provider,
    resolve_attention,
)

BATCH_KEYS = ("tokens", "labels", "loss_mask", "attention_mask", "position_ids")


def add_kit_args(parser: ArgumentParser) -> ArgumentParser:
    """Megatron ``extra_args_provider``: the kit's own flags, all prefixed ``--kit-``."""
    group = parser.add_argument_group(title="bench kit")
    _add_kernel_args(group)
    _add_msamp_args(group)
    _add_grad_reduce_args(group)
    _add_memory_args(group)
    return parser


def _add_kernel_args(group: _ArgumentGroup) -> None:
    """Which attention and which torch AdamW kernel."""
    group.add_argument(
        "--kit-attention",
        choices=ATTENTION_CHOICES,
        default="auto",
        help="Core attention: te (Transformer Engine), sdpa (torch scaled_dot_product_attention), "
        "local (Megatron's unfused DotProductAttention). Default auto: te under "
        "--transformer-impl transformer_engine, sdpa under --transformer-impl local.",
    )
    group.add_argument(
        "--kit-torch-adam",
        choices=TORCH_ADAM_CHOICES,
        default="fused",
        help="AdamW kernel when Megatron falls back to torch optimizers (no TE/apex): fused (one "
        "pass, like TE/apex FusedAdam) or foreach (torch's default). Default fused.",
    )
    # megatron-core 0.19 has the config field (TE's recipe fp8_dpa) but no command-line flag for it.
    group.add_argument(
        "--kit-fp8-attention",
        action="store_true",
        help="Transformer Engine's core attention in FP8 too (cuDNN's FP8 fused attention, forward "
        "and backward; TransformerConfig.fp8_dot_product_attention). Needs --fp8-format and "
        "--kit-attention te.",
    )


def _add_msamp_args(group: _ArgumentGroup) -> None:
    """MS-AMP's level and the modules around its FP8 linears."""
    group.add_argument(
        "--kit-msamp",
        choices=MSAMP_CHOICES,
        default="off",
        help="MS-AMP optimization level (the kit's msamp-o1/msamp-o2/fp4 precisions; needs MS-AMP and "
        "--transformer-impl local): O1 MS-AMP's FP8 linears in every transformer layer, O2 also "
        "MS-AMP's LBAdamW (fp8/fp16 Adam moments). The FP4 simulation is O2 with "
        "MSAMP_USE_WEIGHT_SIMULATE_FP4=1 and MSAMP_USE_ACTIVATION_SIMULATE_FP4=1. Default off.",
    )
    group.add_argument(
        "--kit-msamp-modules",
        choices=MSAMP_MODULES_CHOICES,
        default="torch",
        help="Layer norm and core attention around MS-AMP's FP8 linears (with --kit-msamp): torch "
        "(the local spec's layer norm and SDPA attention) or te (Transformer Engine's TENorm and "
        "TEDotProductAttention, in bf16; needs Transformer Engine). Bias + GeLU stays "
        "megatron-core's. Default torch.",
    )


def _add_grad_reduce_args(group: _ArgumentGroup) -> None:
    """How data-parallel gradients are reduced, and in which FP8 format."""
    group.add_argument(
        "--kit-grad-reduce",
        choices=grad_reduce.GRAD_REDUCE_CHOICES,
        default="native",
        help="Data-parallel gradient reduction: native (megatron-core's all-reduce or reduce-scatter "
        "in the gradient buffer's dtype), fp8-allgather (FP8 payloads with per-rank scales, summed "
        "in fp32) or fp8-shared-scale (one scale from the group's amax, all-to-all reduce-scatter). "
        "The FP8 ones are synchronous (no --overlap-grad-reduce). Default native.",
    )
    group.add_argument(
        "--kit-grad-reduce-format",
        choices=grad_reduce.FP8_FORMAT_CHOICES,
        default=grad_reduce.DEFAULT_FP8_FORMAT,
        help=f"FP8 format of --kit-grad-reduce fp8-*. Default {grad_reduce.DEFAULT_FP8_FORMAT}.",
    )


def _add_memory_args(group: _ArgumentGroup) -> None:
    """The GPU memory the run may use, and the paper's smaller optimizer states."""
    group.add_argument(
        "--kit-gpu-memory-cap",
        type=float,
        default=None,
        metavar="GB",
        help="Train as if the GPU had GB (GiB, as nvidia-smi counts) of memory: torch's allocator "
        "is capped to it, less what the process holds outside the allocator (bench.train.memory_cap). "
        "Default: the whole GPU.",
    )
    group.add_argument(
        "--kit-paper-adam",
        action="store_true",
        help="Step the FP8-LM paper's optimizer states (--use-precision-aware-optimizer "
        "--main-params-dtype fp16 --exp-avg-dtype fp8 --exp-avg-sq-dtype fp16) with the kit's "
        "PaperAdamW (torch multi-tensor ops, chunked) instead of Transformer Engine's FusedAdam.",
    )


def get_batch(data_iterator, vp_stage: int | None = None) -> tuple:
    """One micro-batch on this rank: (tokens, labels, loss_mask, attention_mask, position_ids).

    TP rank 0 reads the loader and broadcasts to its tensor-parallel group; middle pipeline stages
    read nothing and get ``None``s (their input comes from the previous stage).
    """
    from megatron.core import mpu
    from megatron.core.utils import get_batch_on_this_cp_rank, get_batch_on_this_tp_rank
    from megatron.training import get_args
    from megatron.training.utils import is_first_or_last_pipeline_stage

    if not is_first_or_last_pipeline_stage(vp_stage):
        return (None,) * len(BATCH_KEYS)
    args = get_args()
    tp_rank = mpu.get_tensor_model_parallel_rank()
    batch = {}
    if tp_rank == 0:
        batch = next(data_iterator)
        batch = {
            key: batch[key].cuda(non_blocking=True) if batch.get(key) is not None else None
            for key in (*BATCH_KEYS, "cu_seqlens", "cu_seqlens_padded", "max_seqlen", "local_cp_size")
        }
    batch = get_batch_on_this_tp_rank(
        batch,
        has_cu_seqlens=False,
        is_hybrid_cp=False,
        create_attention_mask_in_dataloader=args.create_attention_mask_in_dataloader,
        broadcast_src_rank=mpu.get_tensor_model_parallel_src_rank(),
        broadcast_group=mpu.get_tensor_model_parallel_group(),
        cp_size=args.context_parallel_size,
        tp_rank=tp_rank,
        micro_batch_size=args.micro_batch_size,
        seq_length=args.seq_length,
        mtp_on_this_rank=False,
        pipeline_model_parallel_size=args.pipeline_model_parallel_size,
        is_pipeline_first_stage=mpu.is_pipeline_first_stage(),
        is_pipeline_last_stage=mpu.is_pipeline_last_stage(),
    )
    batch = get_batch_on_this_cp_rank(
        batch, is_hybrid_cp=False, cp_group=mpu.get_context_parallel_group()
    )
    return tuple(batch.get(key) for key in BATCH_KEYS)


def loss_func(loss_mask: torch.Tensor, output_tensor: torch.Tensor):
    """Summed token loss, token count, and the ``lm loss`` report Megatron's training_log prints."""
    from megatron.core.rerun_state_machine import get_rerun_state_machine
    from megatron.training import get_args

    losses = output_tensor.view(-1).float()
    mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * mask)
    num_tokens = mask.sum().clone().detach().to(torch.int)
    report = {"lm loss": torch.cat([loss.clone().detach().view(1), num_tokens.view(1)])}
    if get_args().check_for_nan_in_loss_and_grad:
        # A NaN/Inf here ends the run with Megatron's rerun-state-machine message, not a silent loss.
        machine = get_rerun_state_machine()
        for reject, what in ((torch.isnan, "NaN"), (torch.isinf, "Inf")):
            machine.validate_result(
                result=loss,
                rejection_func=reject,
                message=f"found {what} in local forward loss calculation",
                tolerance=0.0,
                fatal=True,
            )
    return loss, num_tokens, report


def forward_step(data_iterator, model):
    """Megatron ``forward_step_func``: run the GPT model on one micro-batch."""
    from megatron.core.utils import get_attr_wrapped_model
    from megatron.training import get_timers

    timers = get_timers()
    timers("batch-generator", log_level=2).start()
    vp_stage = get_attr_wrapped_model(model, "vp_stage")
    tokens, labels, loss_mask, attention_mask, position_ids = get_batch(data_iterator, vp_stage)
    timers("batch-generator").stop()
    output_tensor = model(tokens, position_ids, attention_mask, labels=labels, loss_mask=loss_mask)
    return output_tensor, partial(loss_func, loss_mask)


def gpt_dataset_config(args: Namespace, tokenizer):
    """``GPTDatasetConfig`` from Megatron's args; no blend (no ``--data-path``) means mock data."""
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig
    from megatron.training.utils import get_blend_and_blend_per_split

    blend, blend_per_split = get_blend_and_blend_per_split(args)
    return GPTDatasetConfig(
        random_seed=args.seed,
        sequence_length=args.seq_length,
        blend=blend,
        blend_per_split=blend_per_split,
        split=args.split,
        num_dataset_builder_threads=args.num_dataset_builder_threads,
        path_to_cache=args.data_cache_path,
        mmap_bin_files=args.mmap_bin_files,
        tokenizer=tokenizer,
        reset_position_ids=args.reset_position_ids,
        reset_attention_mask=args.reset_attention_mask,
        eod_mask_loss=args.eod_mask_loss,
        create_attention_mask=args.create_attention_mask_in_dataloader,
        mid_level_dataset_surplus=args.mid_level_dataset_surplus,
    )


def build_gpt_datasets(args: Namespace, tokenizer, num_samples, is_built_on_rank) -> tuple:
    """(train, valid, test) datasets of ``num_samples`` each (a split with 0 samples is None)."""
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, MockGPTDataset

    config = gpt_dataset_config(args, tokenizer)
    dataset_type = MockGPTDataset if config.mock else GPTDataset
    return tuple(
        BlendedMegatronDatasetBuilder(dataset_type, num_samples, is_built_on_rank, config).build()
    )


def is_dataset_built_on_rank(vp_stage: int | None = None) -> bool:
    """Datasets live on TP rank 0 of the first and last pipeline stages (they feed the model)."""
    from megatron.core import mpu
    from megatron.training.utils import is_first_or_last_pipeline_stage

    return is_first_or_last_pipeline_stage(vp_stage) and mpu.get_tensor_model_parallel_rank() == 0


def train_valid_test_datasets_provider(train_val_test_num_samples, vp_stage: int | None = None):
    """Megatron's dataset provider hook."""
    from megatron.training import get_args, get_tokenizer, print_rank_0

    print_rank_0("> building train, validation, and test datasets for GPT ...")
    datasets = build_gpt_datasets(
        get_args(),
        get_tokenizer(),
        train_val_test_num_samples,
        partial(is_dataset_built_on_rank, vp_stage=vp_stage),
    )
    print_rank_0("> finished creating GPT datasets ...")
    return datasets


# Megatron builds the datasets on every rank that holds them (core datasets are distributed-aware).
train_valid_test_datasets_provider.is_distributed = True


def parse_megatron_args() -> Namespace:
    """Megatron's parse + validate of ``sys.argv`` with the kit's flags; sets Megatron's globals."""
    from megatron.training.arguments import parse_and_validate_args

    return parse_and_validate_args(
        extra_args_provider=add_kit_args, args_defaults={"tokenizer_type": "NullTokenizer"}
    )


def build_config_container(args: Namespace):
    """(PretrainConfigContainer, attention choice) for parsed args; ValueError lists every problem."""
    from megatron.training.argument_utils import (
        gpt_config_from_args,
        pretrain_cfg_container_from_args,
    )

    attention = resolve_attention(args.kit_attention, args.transformer_impl, args.kit_msamp_modules)
    problems = check_args(args, attention, detect_capabilities()) + grad_reduce.grad_reduce_problems(args)
    if problems:
        raise ValueError(
            "the training arguments do not fit this environment:\n  - " + "\n  - ".join(problems)
        )
    model_config = gpt_config_from_args(args)
    model_config.fp8_dot_product_attention = args.kit_fp8_attention
    model_config.transformer_layer_spec = layer_spec_provider(
        attention, fp8_linears=args.kit_msamp != "off", te_modules=args.kit_msamp_modules == "te"
    )
    return pretrain_cfg_container_from_args(args, model_config), attention


def use_prebuilt_dataset_helpers() -> None:
    """Skip Megatron's runtime ``make`` of the dataset helpers when the wheel ships them built.

    megatron-core 0.19.2's wheel contains ``helpers_cpp.*.so`` but not the Makefile, yet
    ``megatron.training.initialize`` runs ``make -C megatron/core/datasets`` on rank 0 and exits on
    failure ("Failed to compile the C++ dataset helper functions"; other ranks then wait in NCCL).
    """
    import megatron.core.datasets.utils as dataset_utils

    try:
        from megatron.core.datasets import helpers_cpp  # noqa: F401
    except ImportError:
        return  # not built: let Megatron compile it as usual
    dataset_utils.compile_helpers = lambda: None


def main() -> int:
    """Parse Megatron's argv, check it against this environment, and run ``pretrain``."""
    from megatron.core.enums import ModelType
    from megatron.training import pretrain, print_rank_0, set_startup_timestamps

    set_startup_timestamps(program_start=_PROGRAM_START_TIME, main_entry=time.time())
    use_prebuilt_dataset_helpers()
    args = parse_megatron_args()
    if args.profile and args.use_pytorch_profiler and args.tensorboard_dir is None:
        # Megatron puts the trace beside the tensorboard folder: the runner's profile folder.
        args.tensorboard_dir = os.path.join(os.environ.get(PROFILE_DIR_ENV, PROFILE_DIR), "tensorboard")
    # before any model or process group
    problem = msamp_problem(args.kit_msamp, os.environ, args.transformer_impl)
    if problem:
        print(f"bench.train.pretrain_gpt: {problem}", file=sys.stderr, flush=True)
        return 2
    try:
        config, attention = build_config_container(args)
    except ValueError as error:
        print(f"bench.train.pretrain_gpt: {error}", file=sys.stderr, flush=True)
        return 2
    try:
        cap = memory_cap.apply(args.kit_gpu_memory_cap)
    except ValueError as error:
        print(f"bench.train.pretrain_gpt: {error}", file=sys.stderr, flush=True)
        return 2
    if args.kit_msamp == "O2":
        adam = use_msamp_adam()
    elif args.kit_paper_adam:
        adam = use_paper_adam()
    else:
        adam = select_torch_adam(args.kit_torch_adam)
    grad_reduce.install(args.kit_grad_reduce, args.kit_grad_reduce_format)
    reduction = args.kit_grad_reduce
    if reduction != "native":
        reduction += f" ({args.kit_grad_reduce_format})"
    print_rank_0(
        f"> bench kit: attention {attention}, transformer_impl {args.transformer_impl}, "
        f"adam {adam}, msamp {args.kit_msamp}, msamp modules {args.kit_msamp_modules}, "
        f"grad reduce {reduction}, "
        f"megatron-core {_megatron_core_version()}, torch {torch.__version__}"
        + (f", {cap}" if cap else "")
    )
    probe = host_probe.report()  # the host's pace, for the record's conditions.host_op_us
    if probe:
        print_rank_0(probe)
    report_after_first_step()  # the "kit memory by part:" line (bench.train.memory_parts)
    pretrain(
        config,
        train_valid_test_datasets_provider,
        ModelType.encoder_or_decoder,
        forward_step,
    )
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return 0


def _megatron_core_version() -> str:
    from megatron.core import __version__

    return __version__


if __name__ == "__main__":
    sys.exit(main())
