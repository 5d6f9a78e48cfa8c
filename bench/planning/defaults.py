"""The settings a run takes where the user set none, settled once before the engine renders its flags.

A measured winner's (``bench.planning.winners``) where one applies, else the user's own with the
precision's default micro-batch (``bench.planning.microbatch``) where no ``--mbs`` was given; then
the A/B settings that change nothing at the layout put back to the kit's defaults
(``Tuning.at_layout``). The result is one frozen :class:`Defaults`: the memory question at the
settled micro-batch and recompute, the settings, a winner's other flags and the notes that say what
was picked and what was not. The user's ``Options`` are never rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from bench.config.capabilities import Capabilities, implementation
from bench.planning.engines.megatron import layer_capabilities
from bench.planning.engines.setting_flags import keeps_dropout_masks
from bench.planning.faster_layers import faster_layers_for, faster_layers_note
from bench.planning.layout import Layout
from bench.planning.microbatch import default_micro_batch, msamp_seed_notes
from bench.planning.options import Options
from bench.planning.question import MemoryQuestion
from bench.planning.tuning import DEFAULT_TUNING, Tuning, flag_names
from bench.planning.winners import beyond_for, beyond_note, quoted_note, winner_for
from bench.planning.winners import note as winner_note


@dataclass(frozen=True)
class Defaults:
    """A run's settled settings. ``question``: the memory question at them (its layout carries the
    micro-batch, and its recompute the run's). ``given_mbs``: the micro-batch the user or a winner
    set (None: the precision's default rule picked it). ``tuning``: the A/B settings (a winner's
    CUDA graphs and dropout). ``args``: a winner's other Megatron flags. ``notes``: in the plan's
    order: the settings put back, the micro-batch's, the winner's (applied or quoted), a faster
    configuration the kit does not pick, the layers measured against the plan's, where the run
    differs from the MS-AMP seed's."""

    question: MemoryQuestion
    given_mbs: int | None
    tuning: Tuning
    args: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def layout(self) -> Layout:
        return self.question.layout

    @property
    def recompute(self) -> str | None:
        return self.question.recompute


def defaults_for(question: MemoryQuestion, caps: Capabilities, options: Options) -> Defaults:
    """The run's settings: the winner's (:func:`_winner`) or the user's (:func:`_users`), at the
    layout, with every note on them."""
    winner, winner_notes = _winner(question, caps, options)
    chosen = winner or _users(question, options)
    tuning, put_back = chosen.tuning.at_layout(chosen.layout.dp, question.precision)
    seed = msamp_seed_notes(question.precision, question.preset.name, chosen.layout, chosen.given_mbs,
                            tuning.dropout)
    return replace(chosen, tuning=tuning, notes=(*put_back, *chosen.notes, *winner_notes,
                                                 *_beyond(question, caps, options),
                                                 *_faster_layers(question, caps, options, tuning.dropout),
                                                 *seed))


def _users(question: MemoryQuestion, options: Options) -> Defaults:
    """The user's settings, at the precision's default micro-batch and with its note where the
    user gave no --mbs; a micro-batch the user gave always stands."""
    if options.mbs is not None:
        return Defaults(question, options.mbs, options.tuning)
    chosen, note = default_micro_batch(question.preset, question.layout, question.precision,
                                       question.fit_test())
    return Defaults(question.at(chosen), None, options.tuning, notes=(note,) if note else ())


def _sets_winner_settings(options: Options) -> bool:
    """Whether the user set any setting a winner sets (then no winner is applied)."""
    tuning = options.tuning
    return (options.mbs is not None or options.recompute is not None or tuning.graphs
            or tuning.dropout != DEFAULT_TUNING.dropout)


def _winner(question: MemoryQuestion, caps: Capabilities, options: Options
            ) -> tuple[Defaults | None, list[str]]:
    """The measured winner's settings (bench.planning.winners) where it passes the evidence rule
    and is no recipe, the user set none of them, the estimate is not refused and the default rule
    picks no larger micro-batch than the winner was measured against, and its note; None where it
    is not applied (a winner not applied is quoted)."""
    if _sets_winner_settings(options):
        return None, []
    winner = winner_for(question.preset, question.layout, question.engine.name, question.precision,
                        implementation(layer_capabilities(caps, question.precision, options.tuning.layers)))
    if winner is None or flag_names(winner.flags) & flag_names(options.tuning.extra_args):
        return None, []
    if not winner.applied:
        return None, [quoted_note(winner)]
    # A winner does not shrink a micro-batch the default rule picks (fp8 on an uncapped H200)
    # larger than any it was measured against: the winner's own, or the rule's pick it beat.
    rule, _ = default_micro_batch(question.preset, question.layout, question.precision,
                                  question.fit_test())
    if rule.micro_batch > max(winner.micro_batch, winner.rule_micro_batch):
        return None, []
    tuning = replace(options.tuning, cuda_graphs=winner.cuda_graphs, dropout=winner.dropout)
    asked = replace(question, layout=replace(question.layout, micro_batch=winner.micro_batch),
                    recompute=winner.recompute,
                    hidden_dropout=keeps_dropout_masks(tuning.dropout, tuning.extra_args))
    if not asked.within_refusal():
        return None, []
    return Defaults(asked, winner.micro_batch, tuning, winner.megatron_args), [winner_note(winner)]


def _beyond(question: MemoryQuestion, caps: Capabilities, options: Options) -> list[str]:
    """The note of a faster measured configuration the kit does not pick (bench.planning.winners),
    where the user's run is not already on its optimizer states."""
    found = beyond_for(question.preset, question.layout, question.engine.name, question.precision,
                       implementation(layer_capabilities(caps, question.precision, options.tuning.layers)))
    if found is None or options.tuning.optimizer_states == found.optimizer_states:
        return []
    return [beyond_note(found)]


def _faster_layers(question: MemoryQuestion, caps: Capabilities, options: Options,
                   dropout: float) -> list[str]:
    """The note of the layers measured against those the plan builds at its ``dropout``
    (bench.planning.winners): the evidence for them where they were faster, else the faster."""
    built = implementation(layer_capabilities(caps, question.precision, options.tuning.layers))
    found = faster_layers_for(question.preset, question.layout, question.engine.name,
                              question.precision, built, dropout)
    if found is None or (found.layers == "te" and not caps.transformer_engine):
        return []  # where Transformer Engine is absent its layers are refused: nothing to choose
    return [faster_layers_note(found, built)]
