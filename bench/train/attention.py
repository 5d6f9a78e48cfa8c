"""Core attention through ``torch.nn.functional.scaled_dot_product_attention``.

Megatron-Core's local ``DotProductAttention`` materialises the s×s score matrix (baddbmm, softmax,
bmm); on one H200 that halved throughput and doubled memory against torch's fused SDPA kernels
(flash / memory-efficient), which never store the scores. ``SDPACoreAttention`` keeps
``DotProductAttention``'s constructor and ``forward`` signature so it drops into a layer spec's
``core_attention`` slot, and hands the work to SDPA.

Tensors follow Megatron's layout: query/key/value are ``[s, b, heads, head_dim]`` and the output is
``[s, b, heads * head_dim]`` (heads counted per tensor-parallel rank).
"""

from __future__ import annotations

import math

from megatron.core import tensor_parallel
from megatron.core.packed_seq_params import PackedSeqParams
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.utils import is_layer_window_attention
from megatron.core.utils import divide
from torch import Tensor
from torch.nn import functional as F


class SDPACoreAttention(MegatronModule):
    """Drop-in for ``megatron.core.transformer.dot_product_attention.DotProductAttention``.

    Causal self-attention uses ``is_causal=True`` and ignores ``attention_mask`` (as Transformer
    Engine's attention does for the causal mask type), so a dataloader mask costs nothing. Other
    mask types pass Megatron's boolean mask (True = masked out) to SDPA inverted. Attention dropout
    is ``config.attention_dropout`` (default 0.1 in Megatron) while training, drawn under the
    tensor-parallel RNG tracker like the local implementation. Not supported (refused at
    construction): context parallelism, sliding windows, softmax types other than ``vanilla``.
    """

    def __init__(
        self,
        config: TransformerConfig,
        layer_number: int,
        attn_mask_type: AttnMaskType,
        attention_type: str,
        attention_dropout: float | None = None,
        softmax_scale: float | None = None,
        cp_comm_type: str | None = None,
        pg_collection: ProcessGroupCollection | None = None,
    ):
        super().__init__(config=config)
        if config.context_parallel_size != 1:
            raise ValueError(
                "SDPA core attention does not support context parallelism "
                f"(context_parallel_size={config.context_parallel_size}); use "
                "--context-parallel-size 1 or Transformer Engine attention (--kit-attention te)."
            )
        if is_layer_window_attention(config.window_size, config.window_attn_skip_freq, layer_number):
            raise ValueError(
                "SDPA core attention does not support sliding-window attention; drop "
                "--window-size or use --kit-attention local."
            )
        if config.softmax_type != "vanilla":
            raise ValueError(
                f"SDPA core attention supports only --softmax-type vanilla, got {config.softmax_type!r}."
            )
        if pg_collection is None:
            pg_collection = ProcessGroupCollection.use_mpu_process_groups(required_pgs=["tp"])
        self.pg_collection = pg_collection
        self.layer_number = max(1, layer_number)
        self.attn_mask_type = attn_mask_type
        self.attention_type = attention_type

        tp_size = pg_collection.tp.size()
        projection_size = config.kv_channels * config.num_attention_heads
        self.hidden_size_per_partition = divide(projection_size, tp_size)
        self.heads_per_partition = divide(config.num_attention_heads, tp_size)
        self.query_groups_per_partition = divide(config.num_query_groups, tp_size)
        head_dim = divide(projection_size, config.num_attention_heads)
        # DotProductAttention divides by layer_number under apply_query_key_layer_scaling and
        # multiplies it back inside its softmax: the net scale is the plain one used here.
        self.softmax_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
        self.dropout_p = config.attention_dropout if attention_dropout is None else attention_dropout

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attention_mask: Tensor | None,
        attn_mask_type: AttnMaskType | None = None,
        attention_bias: Tensor | None = None,
        packed_seq_params: PackedSeqParams | None = None,
    ) -> Tensor:
        """Attention over ``[s, b, heads, head_dim]`` inputs; returns ``[s, b, heads*head_dim]``."""
        if packed_seq_params is not None:
            raise ValueError("SDPA core attention does not support packed sequences (THD).")
        if attention_bias is not None:
            raise ValueError("SDPA core attention does not support an attention bias.")
        mask_type = self.attn_mask_type if attn_mask_type is None else attn_mask_type

        group = self.heads_per_partition // self.query_groups_per_partition
        if group > 1:  # grouped-query attention: repeat K/V heads to match the queries
            key = key.repeat_interleave(group, dim=2)
            value = value.repeat_interleave(group, dim=2)

        # [s, b, n, d] -> [b, n, s, d]; SDPA takes strided inputs (last dim contiguous).
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        is_causal = mask_type == AttnMaskType.causal
        sdpa_mask = None if is_causal or attention_mask is None else ~attention_mask
        dropout_p = self.dropout_p if self.training else 0.0

        def attend() -> Tensor:
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=sdpa_mask, dropout_p=dropout_p, is_causal=is_causal,
                scale=self.softmax_scale,
            )

        if dropout_p > 0.0 and not self.config.sequence_parallel:
            with tensor_parallel.get_cuda_rng_tracker().fork():
                context = attend()
        else:
            context = attend()

        # [b, n, s, d] -> [s, b, n*d]
        context = context.permute(2, 0, 1, 3).contiguous()
        return context.view(context.size(0), context.size(1), self.hidden_size_per_partition)
