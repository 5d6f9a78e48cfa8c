"""Reproducible GPT-3 pretraining throughput benchmarks with Megatron.

Vocabulary used throughout the package:

- *preset*: a model shape (layers, hidden, heads, sequence, vocabulary, default batches), e.g. ``13b``.
- *layout*: how a preset is split over GPUs, named like ``tp2pp8`` (tensor, pipeline, data ... parallel).
- *platform*: a machine or cluster described as data in ``platforms/<name>.toml``.
- *plan*: the frozen result of planning a preset + layout on a platform; renderers turn it into text.
- *run*: one execution of a plan; it leaves a *record* (one JSON file) in ``results/records/``.
"""

__version__ = "0.1.0"
