"""Checks that need torch + megatron-core 0.19.2, run by tests/train in BENCH_MEGATRON_PYTHON.

``python tests/train/megatron_checks.py <check>`` runs one check in a fresh process (Megatron keeps
global state), on CPU, and exits non-zero with the reason when it fails. Everything used is
Megatron's real code; the substitutes are a CPU buffer for ``DotProductAttention``'s scratch
tensor, which Megatron always allocates on CUDA (the reference, not the code under test), and in
``model_msamp_te_modules`` stand-ins for Transformer Engine's modules, which need TE and a GPU.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import inspect
import math
import os
import sys
import tempfile

import torch

from bench.config.capabilities import Capabilities, megatron_flags
from bench.train.smoke import smoke_train_argv

TORCH_DIST_ENV = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}


def check_imports() -> None:
    import megatron.core

    import bench.train.attention
    import bench.train.pretrain_gpt  # noqa: F401

    assert megatron.core.__version__ == "0.19.2", megatron.core.__version__


def naive_attention(q, k, v, scale, causal, mask=None):
    """softmax(QKᵀ·scale + mask)·V over [s, b, n, d] inputs; returns [s, b, n·d]."""
    q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))  # [b, n, s, d]
    scores = q @ k.transpose(-1, -2) * scale
    if causal:
        s = scores.size(-1)
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v  # [b, n, s, d]
    return out.permute(2, 0, 1, 3).reshape(out.size(2), out.size(0), -1)


class _CpuBuffer:
    """CPU stand-in for Megatron's CUDA-only global memory buffer (DotProductAttention's scratch)."""

    def get_tensor(self, shape, dtype, name):
        return torch.empty(shape, dtype=dtype)


def _init_cpu_model_parallel() -> None:
    from megatron.core import parallel_state

    os.environ.update(TORCH_DIST_ENV)
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)


def check_attention() -> None:
    """SDPACoreAttention matches a naive softmax attention and Megatron's DotProductAttention."""
    from megatron.core import parallel_state
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.transformer_config import TransformerConfig

    from bench.train.attention import SDPACoreAttention

    _init_cpu_model_parallel()
    parallel_state.get_global_memory_buffer = lambda: _CpuBuffer()
    torch.manual_seed(0)
    s, b, heads, d = 16, 3, 4, 8
    for groups in (heads, 2):  # multi-head, then grouped-query attention
        config = TransformerConfig(
            num_layers=1, hidden_size=heads * d, num_attention_heads=heads, num_query_groups=groups,
            attention_dropout=0.0, masked_softmax_fusion=False, use_cpu_initialization=True,
        )
        q = torch.randn(s, b, heads, d)
        k, v = torch.randn(s, b, groups, d), torch.randn(s, b, groups, d)
        kr, vr = (t.repeat_interleave(heads // groups, dim=2) for t in (k, v))
        kwargs = {"config": config, "layer_number": 1, "attention_type": "self"}

        sdpa = SDPACoreAttention(attn_mask_type=AttnMaskType.causal, **kwargs)
        # The reference forks the CUDA RNG tracker around its dropout unless sequence parallel is
        # set; dropout is 0 here, so a config copy with the flag skips the CUDA-only fork.
        reference_config = copy.copy(config)
        reference_config.sequence_parallel = True
        local = DotProductAttention(
            attn_mask_type=AttnMaskType.causal, **{**kwargs, "config": reference_config}
        )
        causal_mask = torch.ones(s, s, dtype=torch.bool).triu(1).expand(b, 1, s, s)
        got = sdpa(q, k, v, causal_mask, attn_mask_type=AttnMaskType.causal)
        assert got.shape == (s, b, heads * d), got.shape
        torch.testing.assert_close(got, naive_attention(q, kr, vr, d**-0.5, causal=True))
        torch.testing.assert_close(got, local(q, k, v, causal_mask, attn_mask_type=AttnMaskType.causal))
        # The causal path ignores the dataloader's mask (as TE does): None gives the same result.
        torch.testing.assert_close(sdpa(q, k, v, None), got)

        padding = torch.zeros(b, 1, s, s, dtype=torch.bool)
        padding[..., s - 5:] = True  # the last five keys are padding
        sdpa_pad = SDPACoreAttention(attn_mask_type=AttnMaskType.padding, **kwargs)
        got = sdpa_pad(q, k, v, padding, attn_mask_type=AttnMaskType.padding)
        torch.testing.assert_close(got, naive_attention(q, kr, vr, d**-0.5, causal=False, mask=padding))

        scaled = SDPACoreAttention(attn_mask_type=AttnMaskType.causal, softmax_scale=0.05, **kwargs)
        torch.testing.assert_close(scaled(q, k, v, None), naive_attention(q, kr, vr, 0.05, causal=True))

        # Gradients flow to all three inputs through SDPA.
        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
        sdpa(qg, kg, vg, None).square().sum().backward()
        assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in (qg, kg, vg))


def _parse(argv: list[str]):
    from bench.train import pretrain_gpt

    os.environ.update(TORCH_DIST_ENV)
    sys.argv = ["pretrain_gpt", *argv]
    return pretrain_gpt.parse_megatron_args()


def _cpu_argv(extra: list[str] = (), bf16: bool = True) -> list[str]:
    """The smoke's argv on CPU; float32 (bf16=False) where a CPU forward runs without Float16Module."""
    argv = [a for a in smoke_train_argv(1, megatron_flags(Capabilities())) if bf16 or a != "--bf16"]
    return [*argv, "--use-cpu-initialization", *extra]


def check_parser() -> None:
    """Megatron's parser takes the smoke argv plus the kit's flags; the container is built."""
    from bench.train import pretrain_gpt

    args = _parse(_cpu_argv(["--kit-attention", "sdpa"]))
    assert args.kit_attention == "sdpa"
    config, attention = pretrain_gpt.build_config_container(args)
    transformer = config.model.transformer
    assert attention == "sdpa"
    assert transformer.transformer_impl == "local"
    assert transformer.bias_activation_fusion, "bias-GELU fusion is Megatron's default and stays on"
    assert not transformer.gradient_accumulation_fusion and not transformer.persist_layer_norm
    assert config.ddp.overlap_grad_reduce and config.ddp.use_distributed_optimizer
    assert callable(config.model.transformer_layer_spec)


def _build_model(attention: str, bf16: bool):
    from megatron.core.process_groups_config import ProcessGroupCollection

    from bench.train import pretrain_gpt

    args = _parse(_cpu_argv(["--kit-attention", attention], bf16=bf16))
    config, chosen = pretrain_gpt.build_config_container(args)
    assert chosen == attention
    _init_cpu_model_parallel()
    builder = config.model.get_builder_cls()(config.model)
    return args, builder.build_model(ProcessGroupCollection.use_mpu_process_groups())


def _train_steps(args, model, steps: int) -> list[float]:
    """A few float32 CPU steps on Megatron's mock data: the losses."""
    from megatron.training import get_tokenizer
    from torch.utils.data import default_collate

    from bench.train import pretrain_gpt

    train, _, _ = pretrain_gpt.build_gpt_datasets(
        args, get_tokenizer(), [steps * 2, 0, 0], lambda: True
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for step in range(steps):
        batch = default_collate([train[2 * step + i] for i in range(2)])
        out = model(batch["tokens"], batch["position_ids"], batch["attention_mask"],
                    labels=batch["labels"], loss_mask=batch["loss_mask"])
        loss, tokens, report = pretrain_gpt.loss_func(batch["loss_mask"], out)
        assert report["lm loss"].shape == (2,) and int(tokens) == int(batch["loss_mask"].sum())
        (loss / tokens).backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss / tokens))
    return losses


def check_model_sdpa() -> None:
    """The sdpa spec builds GPT with SDPACoreAttention; a few CPU steps lower the loss."""
    from bench.train.attention import SDPACoreAttention

    args, model = _build_model("sdpa", bf16=False)
    for layer in model.decoder.layers:
        assert isinstance(layer.self_attention.core_attention, SDPACoreAttention)
    assert model.config.bias_activation_fusion
    losses = _train_steps(args, model, 6)
    assert all(math.isfinite(x) for x in losses), losses
    assert abs(losses[0] - math.log(8192)) < 1.0, f"first loss {losses[0]} far from ln(V)"
    assert losses[-1] < losses[0], losses


def check_model_local() -> None:
    """The local choice keeps Megatron's DotProductAttention."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    _, model = _build_model("local", bf16=True)
    for layer in model.decoder.layers:
        assert type(layer.self_attention.core_attention) is DotProductAttention


class StandInTENorm(torch.nn.LayerNorm):
    """Stand-in for megatron-core's TENorm, built from its arguments: torch's LayerNorm. It checks
    the wiring (which slot builds it, with what), not Transformer Engine's kernels."""

    def __init__(self, config, hidden_size, eps=1e-5, has_residual=False) -> None:
        super().__init__(hidden_size, eps=eps)


def _stand_in_te_attention() -> type:
    """Stand-in for megatron-core's TEDotProductAttention, built from its arguments: the kit's SDPA
    attention. It checks the wiring, not Transformer Engine's attention."""
    from bench.train.attention import SDPACoreAttention

    class StandInTEDotProductAttention(SDPACoreAttention):
        def __init__(self, config, layer_number, attn_mask_type, attention_type, attention_dropout=None,
                     softmax_scale=None, k_channels=None, v_channels=None, num_splits=None,
                     cp_comm_type="p2p", pg_collection=None) -> None:
            super().__init__(config, layer_number, attn_mask_type, attention_type, attention_dropout,
                             softmax_scale, cp_comm_type, pg_collection)

    return StandInTEDotProductAttention


def _arguments(function) -> list[tuple[str, object]]:
    """(name, default) of a constructor's arguments after self/cls: what a builder may pass."""
    return [(p.name, p.default) for p in list(inspect.signature(function).parameters.values())[1:]]


def _source_arguments(module, class_name: str, method: str) -> list[tuple[str, object]]:
    """:func:`_arguments` of a class of ``module``, read from its source: without Transformer Engine
    megatron-core's TE classes are built on a MagicMock and have no signature of their own."""
    tree = ast.parse(inspect.getsource(module))
    owner = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == class_name)
    function = next(n for n in owner.body if isinstance(n, ast.FunctionDef) and n.name == method)
    names = [a.arg for a in function.args.args[1:]]
    defaults = [ast.literal_eval(d) for d in function.args.defaults]
    return list(zip(names, [inspect.Parameter.empty] * (len(names) - len(defaults)) + defaults, strict=True))


def check_model_msamp_te_modules() -> None:
    """--kit-msamp O1 --kit-msamp-modules te: TENorm in both norm slots, TEDotProductAttention as
    core attention and MS-AMP's FP8 linears in the four linear slots, in the spec and in the built
    GPT; a few float32 CPU steps through MS-AMP's linears lower the loss.

    Transformer Engine is not here: stand-ins with the real classes' constructor arguments are
    registered where megatron-core's extension module holds TE's (and the entry's capability check
    is told TE is there), so this checks the wiring only. MS-AMP's linear puts its scaling metas
    on the current CUDA device, answered "cpu" here."""
    import megatron.core.extensions.transformer_engine as te_extension
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear

    from bench.train import pretrain_gpt

    attention_class = _stand_in_te_attention()
    assert _arguments(StandInTENorm.__init__) == _source_arguments(te_extension, "TENorm", "__new__")
    assert _arguments(attention_class.__init__) == _source_arguments(
        te_extension, "TEDotProductAttention", "__init__")
    te_extension.TENorm, te_extension.TEDotProductAttention = StandInTENorm, attention_class
    detected = pretrain_gpt.detect_capabilities()
    pretrain_gpt.detect_capabilities = lambda: dataclasses.replace(detected, transformer_engine=True)
    torch.cuda.current_device = lambda: "cpu"
    args = _parse(_cpu_argv(["--kit-msamp", "O1", "--kit-msamp-modules", "te"], bf16=False))
    config, attention = pretrain_gpt.build_config_container(args)
    assert attention == "te"
    linears = (("self_attention", "linear_qkv", ColumnParallelLinear),
               ("self_attention", "linear_proj", RowParallelLinear),
               ("mlp", "linear_fc1", ColumnParallelLinear), ("mlp", "linear_fc2", RowParallelLinear))
    spec = config.model.transformer_layer_spec(config.model).submodules
    assert spec.input_layernorm is StandInTENorm and spec.pre_mlp_layernorm is StandInTENorm
    assert spec.self_attention.submodules.core_attention is attention_class
    slots = {"self_attention": spec.self_attention.submodules, "mlp": spec.mlp.keywords["submodules"]}
    for block, name, base in linears:
        built = getattr(slots[block], name)
        assert issubclass(built, base) and built.__name__ == f"MsampFP8{base.__name__}", built
    _init_cpu_model_parallel()
    model = config.model.get_builder_cls()(config.model).build_model(
        ProcessGroupCollection.use_mpu_process_groups())
    for layer in model.decoder.layers:
        assert type(layer.input_layernorm) is StandInTENorm and type(layer.pre_mlp_layernorm) is StandInTENorm
        assert type(layer.self_attention.core_attention) is attention_class
        for block, name, base in linears:
            assert type(getattr(getattr(layer, block), name)).__name__ == f"MsampFP8{base.__name__}"
    assert model.config.bias_activation_fusion and model.config.fp8 is None
    losses = _train_steps(args, model, 6)
    assert all(math.isfinite(x) for x in losses), losses
    assert losses[-1] < losses[0], losses
    # TE's own spec leaves both norm slots empty (its norms are fused into the linears): refused,
    # not normalized twice.
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_layer import TransformerLayer, TransformerLayerSubmodules

    from bench.train.spec import with_te_modules

    try:
        with_te_modules(ModuleSpec(module=TransformerLayer, submodules=TransformerLayerSubmodules()))
    except ValueError as error:
        assert "--kit-msamp-modules te needs --transformer-impl local" in str(error), error
    else:
        raise AssertionError("TENorm was put into a spec whose norms are fused into its linears")


def check_datasets_mock() -> None:
    """Without --data-path the entry trains on Megatron's MockGPTDataset."""
    from megatron.training import get_tokenizer

    from bench.train import pretrain_gpt

    args = _parse(_cpu_argv())
    train, _, _ = pretrain_gpt.build_gpt_datasets(args, get_tokenizer(), [8, 0, 0], lambda: True)
    assert type(train).__name__ == "MockGPTDataset", type(train)
    assert train[0]["tokens"].shape == (512,) and train[0]["labels"].shape == (512,)


def check_datasets_bin() -> None:
    """With --data-path the entry reads Megatron .bin/.idx files (written by Megatron's builder)."""
    import numpy
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
    from megatron.training import get_tokenizer

    from bench.train import pretrain_gpt

    with tempfile.TemporaryDirectory() as folder:
        prefix = os.path.join(folder, "corpus_text_document")
        builder = IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.int32)
        rng = numpy.random.default_rng(0)
        for _ in range(200):
            builder.add_document(rng.integers(1, 8000, size=300, dtype=numpy.int32), [300])
        builder.finalize(prefix + ".idx")
        argv = [a for a in _cpu_argv() if a != "--mock-data"]
        args = _parse([*argv, "--data-path", prefix, "--split", "98,2,0", "--data-cache-path", folder])
        train, _, _ = pretrain_gpt.build_gpt_datasets(args, get_tokenizer(), [40, 0, 0], lambda: True)
        assert type(train).__name__ == "GPTDataset", type(train)
        assert train[3]["tokens"].shape == (512,)


def check_datasets_kit_split() -> None:
    """The kit's own data (``python -m bench data``, prefix in BENCH_CHECK_DATA_PREFIX) with the
    split and sample counts the kit's argv gives Megatron: 949,50,1 and no evaluation."""
    from megatron.training import get_tokenizer

    from bench.train import pretrain_gpt

    prefix = os.environ["BENCH_CHECK_DATA_PREFIX"]
    with tempfile.TemporaryDirectory() as folder:
        argv = [a for a in _cpu_argv() if a != "--mock-data"]
        args = _parse([*argv, "--data-path", prefix, "--split", "949,50,1",
                       "--data-cache-path", folder])
        train, _, _ = pretrain_gpt.build_gpt_datasets(args, get_tokenizer(), [384, 0, 0],
                                                      lambda: True)
        assert type(train).__name__ == "GPTDataset", type(train)
        assert len(train) >= 384 and train[383]["tokens"].shape == (512,)


def check_fp8_attention_field() -> None:
    """--kit-fp8-attention sets a field megatron-core's TransformerConfig really has (0.19.2 keeps
    ``fp8_dot_product_attention`` but dropped its command-line flag): a misspelt name would only
    add an attribute nothing reads, and no run would say so."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    fields = {field.name: field.default for field in dataclasses.fields(TransformerConfig)}
    assert fields.get("fp8_dot_product_attention") is False, fields.get("fp8_dot_product_attention")
    args = _parse(_cpu_argv())
    assert args.kit_fp8_attention is False


def check_refuse_sequence_parallel() -> None:
    """Without TE or apex, --sequence-parallel is refused with a message (not a LayerNorm assert).

    With tensor parallelism Megatron's validator asks the GPU for its architecture; here that one
    query answers Hopper (9), as on an H100 or H200, and CUDA_DEVICE_MAX_CONNECTIONS=1 is set as
    Megatron requires for tensor parallelism on Hopper.
    """
    import megatron.training.arguments as megatron_arguments

    from bench.train import pretrain_gpt

    megatron_arguments.get_device_arch_version = lambda: 9
    os.environ.update(CUDA_DEVICE_MAX_CONNECTIONS="1")
    TORCH_DIST_ENV["WORLD_SIZE"] = "2"
    args = _parse(_cpu_argv(["--tensor-model-parallel-size", "2", "--sequence-parallel"]))
    assert args.sequence_parallel
    try:
        pretrain_gpt.build_config_container(args)
    except ValueError as error:
        assert "--sequence-parallel needs Transformer Engine or apex" in str(error), error
    else:
        raise AssertionError("--sequence-parallel without TE/apex was accepted")


CHECKS = {name[len("check_"):]: fn for name, fn in globals().items() if name.startswith("check_")}

if __name__ == "__main__":
    name = sys.argv[1]
    CHECKS[name]()
    print(f"ok {name}")
