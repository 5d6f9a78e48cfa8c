"""The memory question of a run: what the estimate asks, gathered once where the plan is resolved.

A :class:`MemoryQuestion` holds the facts the memory estimate (``bench.planning.memory``) reads of
a run, each settled once: the preset and layout, the engine (which decides how gradients are kept,
what the optimizer step holds and what is sharded), the precision, the bytes per parameter of
gradients, optimizer state and the step's transients, the activation recompute and the device.
The planner asks it whether a layout fits (the default and measured micro-batches), for the
estimate it refuses or notes, and for the hint of another way to fit. The model of the step's time
is asked the same way (``bench.planning.predict.expect.Asked``): one frozen question built from the
resolved plan, beside this one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from bench.config.platforms import Accelerator
from bench.config.precisions import Precision
from bench.config.presets import Preset
from bench.planning.engines.base import Engine
from bench.planning.engines.setting_flags import keeps_dropout_masks
from bench.planning.layout import Layout
from bench.planning.memory import (
    GB,
    Counted,
    check_fits,
    estimate_bytes,
    fits,
    fragmentation_note,
    refuse_fraction,
    state_bytes,
)
from bench.planning.tuning import Tuning


@dataclass(frozen=True)
class Device:
    """The GPU memory a run plans with, the GPU as a refusal names it, and whether it is a cap."""

    memory_gb: float
    model: str
    capped: bool = False


def device_for(accelerator: Accelerator | None, cap: float | None) -> Device | None:
    """The accelerator's memory, or ``--gpu-memory-cap`` below it; None where neither is known."""
    if cap is None:
        return Device(accelerator.memory_gb, accelerator.model) if accelerator else None
    if accelerator is not None and cap > accelerator.memory_gb:
        raise ValueError(f"--gpu-memory-cap {cap:g} is more than the {accelerator.model}'s "
                         f"{accelerator.memory_gb:g} GB: a cap can only lower it")
    model = accelerator.model if accelerator else "GPU"
    return Device(cap, f"{model} capped at {cap:g} GB (--gpu-memory-cap)", capped=True)


@dataclass(frozen=True)
class MemoryQuestion:
    """What the memory estimate asks of one run. ``grad_bytes``, ``state_bytes`` and
    ``step_bytes``: bytes per parameter of gradients, optimizer state and the optimizer step's
    transients. ``optimizer_states`` and torch's ``allocator`` setting (which sets the fraction of
    the device beyond which a plan is refused, and whether fragmentation is warned of) serve the
    refusal, its hint and the notes. ``device``: None where its memory is unknown (nothing is
    checked then)."""

    preset: Preset
    layout: Layout
    engine: Engine
    precision: Precision
    grad_bytes: int
    state_bytes: int
    step_bytes: int
    recompute: str | None
    device: Device | None
    optimizer_states: str
    allocator: str
    hidden_dropout: bool = True

    @classmethod
    def ask(cls, preset: Preset, layout: Layout, engine: Engine, precision: Precision, tuning: Tuning,
            recompute: str | None, device: Device | None) -> MemoryQuestion:
        """The question of a run with these A/B settings, counted as the engine keeps them."""
        grad = engine.grad_bytes(precision, tuning.grad_reduce_bf16)
        return cls(preset, layout, engine, precision, grad,
                   state_bytes(precision, tuning.optimizer_states),
                   engine.step_bytes(tuning.optimizer_states, grad), recompute, device,
                   tuning.optimizer_states, tuning.allocator,
                   keeps_dropout_masks(tuning.dropout, tuning.extra_args))

    def at(self, layout: Layout) -> MemoryQuestion:
        return replace(self, layout=layout)

    @property
    def refuse_at(self) -> float:
        return refuse_fraction(self.allocator)

    @property
    def fp8(self) -> bool:
        return self.precision.fp8

    def counted(self, layout: Layout) -> Counted:
        """What the estimate counts of the run at a layout, sharded as the engine shards it there."""
        return Counted(self.preset, layout, self.grad_bytes, self.engine.sharded_stage(layout),
                       self.state_bytes, self.recompute, self.fp8, self.step_bytes, self.hidden_dropout)

    def need_gb(self) -> float:
        """The estimated peak per GPU, GB."""
        return estimate_bytes(self.counted(self.layout)) / GB

    def fit_test(self) -> Callable[[Layout], bool] | None:
        """Whether a layout fits the device with the planner's head-room, counted as the estimate
        counts it (so a default picked with it is never refused); None when the memory is unknown."""
        device = self.device
        if device is None:
            return None
        return lambda lay: fits(self.counted(lay), device.memory_gb)

    def within_refusal(self) -> bool:
        """Whether the estimate stays within the refusal's fraction of the device (True where its
        memory is unknown): a measured winner has trained there, so the planner's head-room for its
        own picks does not apply."""
        return self.device is None or self.need_gb() <= self.refuse_at * self.device.memory_gb

    def estimate(self, per_node: int, force: bool, node_gpus: int | None,
                 rate: Callable[[Layout], float] | None = None) -> tuple[float, list[str]]:
        """(estimated GB per GPU, notes: one saying it, and a warning of fragmentation where the
        records saw it); a ValueError when it cannot fit, unless forced. ``node_gpus``: the GPUs
        of a node where jobs run over nodes (for the refusal); ``rate``: a layout's expected
        TFLOP/s/GPU, which orders the refusal's layouts that fit."""
        need = self.need_gb()
        if self.device is None:
            return need, [f"memory estimate: ~{need:.1f} GB per GPU (device memory unknown: not checked)"]
        if not force:
            check_fits(self.counted(self.layout), self.device.memory_gb, self.device.model, per_node,
                       node_gpus=node_gpus, refuse_at=self.refuse_at, rate=rate,
                       also="; ".join(h for h in (self.paper_kit_hint(), self.one_sequence_hint()) if h))
        capped = " (--gpu-memory-cap)" if self.device.capped else ""
        return need, [f"memory estimate: ~{need:.1f} GB per GPU of {self.device.memory_gb:g} GB"
                      f"{capped}" + (" (--force)" if force else ""),
                      *fragmentation_note(self.engine.one_piece_step, self.engine.display,
                                          self.layout.pp, self.allocator, need,
                                          self.device.memory_gb)]

    def one_sequence_hint(self) -> str:
        """For a pure data-parallel layout, one micro-batch of one sequence per GPU with full
        recompute (``--recompute full --gbs <DP>``, as LUMI's seed ran its ZeRO rows), where that
        fits and the run does not already ask it; "" otherwise."""
        lay = self.layout
        if self.device is None or lay.tp * lay.pp * lay.cp != 1:
            return ""
        one = replace(self, layout=replace(lay, micro_batch=1, global_batch=lay.dp), recompute="full")
        if one == self or not one.within_refusal():
            return ""
        options = [("--recompute full", self.recompute != "full"), (f"--gbs {lay.dp}", lay.global_batch != lay.dp),
                   ("--mbs 1", lay.micro_batch != 1)]
        return (f"{' '.join(flag for flag, needed in options if needed)} (one sequence per GPU a step, "
                f"activations recomputed) needs ~{one.need_gb():.1f} GB")

    def paper_kit_hint(self) -> str:
        """For ``--optimizer-states paper``: the same states in the kit's PaperAdamW, where they
        fit. TE's FusedAdam unscales every state into fp32 at the step, which ran 6.7b dp2 out of
        memory on 80 GB where paper-kit trained."""
        if self.optimizer_states != "paper" or self.device is None:
            return ""
        kit = replace(self, state_bytes=state_bytes(self.precision, "paper-kit"),
                      step_bytes=self.engine.step_bytes("paper-kit", self.grad_bytes))
        if not kit.within_refusal():
            return ""
        return (f"--optimizer-states paper-kit (the same states, stepped without TE FusedAdam's "
                f"fp32 copies) needs ~{kit.need_gb():.1f} GB")
