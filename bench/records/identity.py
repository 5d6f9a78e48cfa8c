"""A configuration's identity: the key under which runs of one configuration are pooled.

Two ok records are *one configuration* when everything that changes the training math or the
speed is equal; the kit commit that rendered the command is not part of it, so repeats from
different commits pool unless what the commit rendered changed. The key is built from:

- the record's facts: engine, precision, preset shape and layout degrees and batches (the layout's
  name is words for its degrees);
- the normalised argv (:func:`normalised_argv`): the engine's flags as ``(flag, values)`` pairs
  sorted by flag, without the launcher and entry script (the engine and GPU count are keyed on
  their own) and without :data:`RUN_ONLY_FLAGS`, which set a run's length, where it reads and
  writes, its seed and its profiler;
- the environment that reached training (``record.env``) without the images' version stamps
  (:data:`bench.config.environment.VERSION_STAMPS`, the versions are keyed from provenance);
- the software: megatron-core, torch, CUDA and NCCL versions from provenance, and Transformer
  Engine's where provenance names one (with it megatron-core steps Adam with TE's FusedAdam even
  on the local layers; keyed only where set, so records without it keep their keys), DeepSpeed's
  and apex's from the engine notes, the patch series (one reworded with its code unchanged keyed
  as before, :data:`REWORDED_SERIES`), what built the layers (``implementation``);
- the hardware: platform, accelerator, the GPU name the driver reported, nodes, GPU count and the
  ``--gpu-memory-cap`` (variant ``gpu_memory_cap_gb``);
- the record's variant (settings that reach the engine outside its argv, such as a DeepSpeed
  config's buckets, and the older code a run of a record written before ``bench.record/3`` ran,
  ``paper_adam``: :data:`bench.records.migrate.CODE_CHANGES`) without version stamps, and the
  corpus's name for a run on real data (its path is a machine's).

Not keyed: the kit commit, the run id and dates, labels (campaign, sweep), the host and GPU UUIDs
(repeats on other machines of one card are the spread a reader should see), the driver.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.config.environment import VERSION_STAMPS
from bench.config.run_options import BY_NAME, DEFAULT_DROPOUT, EXTRA_ARGS_KEY, variant_key
from bench.planning.engines.setting_flags import lift
from bench.records.record import CAP_KEY, Record

KEY_CHARS = 10  # hex digits of the key's sha256 shown: 40 bits, no collision among thousands of keys

# Flags that set how long a run is, where it reads and writes, its seed or its profiler: none
# changes the work of a measured step. Profiled steps come after the measured window; a seed
# changes the initial weights and data order, not the shapes; the corpus is keyed by its name.
RUN_ONLY_FLAGS = frozenset({
    "--train-iters", "--eval-interval", "--save", "--load", "--save-interval", "--data-path",
    "--vocab-file", "--merge-file", "--tokenizer-model", "--deepspeed_config", "--tensorboard-dir",
    "--wandb-save-dir", "--log-dir", "--seed", "--data-cache-path",
    "--profile", "--profile-ranks", "--profile-step-start", "--profile-step-end",
    "--use-pytorch-profiler",
})  # fmt: skip
# torchrun's own options, which older local records' argv began with; ``-m`` names the entry.
LAUNCHER_OPTIONS = frozenset({"--nnodes", "--nproc-per-node", "--standalone", "--rdzv-backend",
                              "--rdzv-endpoint", "--master-addr", "--master-port", "-m"})
ENTRY_SUFFIX = ".py"  # an entry script's path, e.g. /opt/Megatron-DeepSpeed/pretrain_gpt.py

# Patch series whose messages were reworded with their code unchanged, as (upstream, the series'
# digest after the rewording): the digest records made before it carry. One code, so one key.
REWORDED_SERIES = {
    # Megatron-DeepSpeed 0002-0004 and 0008-0010: where a failure was seen, said in product words.
    ("megatron-deepspeed", "03083893cfbd9373"): "7c5051a71637d60d",
}


def _starts_option(token: str) -> bool:
    return token.startswith("--") or token == "-m"


def normalised_argv(argv: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The engine's flags of an argv as ``(flag, values)`` pairs sorted by flag (``--x=1`` read as
    ``--x 1``): tokens before the first option (``python``, ``torchrun``), launcher options, entry
    scripts (``*.py``) and :data:`RUN_ONLY_FLAGS` are left out."""
    options: list[tuple[str, list[str]]] = []
    for token in argv:
        if _starts_option(token):
            flag, equals, value = token.partition("=")
            options.append((flag, [value] if equals else []))
        elif options and not token.endswith(ENTRY_SUFFIX):
            options[-1][1].append(token)
    dropped = RUN_ONLY_FLAGS | LAUNCHER_OPTIONS
    return tuple(sorted((flag, tuple(values)) for flag, values in options if flag not in dropped))


def typed_settings(record: Record) -> dict[str, Any]:
    """The record's variant with CUDA graphs and dropout as the ``cuda_graphs`` and ``dropout``
    settings its argv ran with (records made before the two were settings typed them after '--',
    or had them from a measured default), and those flags out of its ``megatron_args``: such a
    run and today's run of the same settings are one configuration. The record is never changed."""
    ran = lift(record.argv)
    typed = {key: value for key, value in record.variant.items() if key != EXTRA_ARGS_KEY}
    if ran.cuda_graphs is not None:
        typed.setdefault(variant_key("cuda_graphs"), ran.cuda_graphs)
    if ran.dropout is not None and ran.dropout != DEFAULT_DROPOUT:
        typed.setdefault(variant_key("dropout"), BY_NAME["dropout"].variant_text(ran.dropout))
    if EXTRA_ARGS_KEY in record.variant:
        rest = lift(str(record.variant[EXTRA_ARGS_KEY]).split()).rest
        typed.update({EXTRA_ARGS_KEY: " ".join(rest)} if rest else {})
    return typed


def settings(record: Record) -> dict[str, Any]:
    """The record's variant without version stamps (records from before those were kept out of
    variants carry them), its hand-written graph and dropout flags read as settings
    (:func:`typed_settings`)."""
    return {key: value for key, value in typed_settings(record).items()
            if key.removeprefix("env:") not in VERSION_STAMPS}


def _series_code(upstream: str, digest: str) -> str:
    """The digest a series' code was first recorded under (:data:`REWORDED_SERIES`)."""
    return REWORDED_SERIES.get((upstream, digest), digest)


def software(record: Record) -> dict[str, Any]:
    """The software a run ran, as the key hashes it: Transformer Engine's version only where the
    record names one, so that every record without it keeps the key it had before the field."""
    prov, notes = record.provenance, record.engine_notes
    return {"megatron_core": prov.megatron_core, "torch": prov.torch, "cuda": prov.cuda,
            "nccl": prov.nccl, "deepspeed": notes.get("deepspeed"), "apex": notes.get("apex"),
            **({} if prov.transformer_engine is None
               else {"transformer_engine": prov.transformer_engine}),
            "patches": [[p.upstream, _series_code(p.upstream, p.sha256), p.applied]
                        for p in record.patches]}


def key_fields(record: Record) -> dict[str, Any]:
    """Everything the key hashes, as JSON data (see the module's docstring)."""
    prov = record.provenance
    return {
        "engine": record.engine, "implementation": record.implementation,
        "precision": record.precision, "preset": record.preset.model_dump(),
        "layout": record.layout.model_dump(exclude={"name"}),
        "argv": [[flag, list(values)] for flag, values in normalised_argv(record.argv)],
        "env": {k: v for k, v in sorted(record.env.items()) if k not in VERSION_STAMPS},
        "software": software(record),
        "hardware": {"platform": record.platform.name, "accelerator": record.platform.accelerator,
                     "gpu_model": prov.gpu_model, "nodes": record.nodes, "gpus": record.gpus,
                     "cap_gb": record.variant.get(CAP_KEY)},
        "settings": settings(record),
        "data": None if record.data is None else [record.data.kind, record.data.name],
    }  # fmt: skip


@dataclass(frozen=True, order=True)
class ConfigKey:
    """A configuration's identity: ``digest`` (:data:`KEY_CHARS` hex digits of the sha256 of
    :func:`key_fields`) is the key; ``name`` reads it (``13b tp2pp2dp1 bf16 1/64, megatron te, 4x
    h200-sxm cap 80``) but two keys may share one."""

    digest: str
    name: str

    def __str__(self) -> str:
        return f"{self.name} [{self.digest}]"


def readable_name(record: Record) -> str:
    """The key's words: model, layout, precision, micro/global batch, engine and layers, GPUs,
    card and its cap."""
    lay, cap = record.layout, record.variant.get(CAP_KEY)
    engine = " ".join(filter(None, (record.engine, record.implementation)))
    return (f"{record.preset.name} {lay.name} {record.precision} {lay.micro_batch}/{lay.global_batch}, "
            f"{engine}, {record.gpus}x {record.platform.accelerator}"
            + (f" cap {cap}" if cap is not None else ""))


def config_key(record: Record) -> ConfigKey:
    """The record's :class:`ConfigKey`."""
    canonical = json.dumps(key_fields(record), sort_keys=True, separators=(",", ":"))
    return ConfigKey(hashlib.sha256(canonical.encode()).hexdigest()[:KEY_CHARS], readable_name(record))


def differences(a: Record, b: Record) -> list[str]:
    """The parts of :func:`key_fields` in which two records differ, each as ``part.name``
    (``argv.--fp8-format``, ``settings.optimizer_states``, ``precision``): what a ratio of the two
    compares."""
    fa, fb = key_fields(a), key_fields(b)
    found = []
    for part in fa:
        left, right = fa[part], fb[part]
        if part == "argv":
            left, right = dict((f, tuple(v)) for f, v in left), dict((f, tuple(v)) for f, v in right)
        if isinstance(left, dict) and isinstance(right, dict):
            found += [f"{part}.{name}" for name in sorted(left.keys() | right.keys())
                      if left.get(name) != right.get(name)]
        elif left != right:
            found.append(part)
    return found
