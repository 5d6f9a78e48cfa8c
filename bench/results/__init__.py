"""Comparable results: tables and plots generated from run records, published figures and ranges.

Vocabulary: a *measured row* is one configuration (platform, engine, precision, preset, layout,
batches, notes) aggregated over its ok records: it shows the median run by TFLOP/s/GPU and links
that run's record. A *published row* comes from ``results/published.toml`` with its source link.
A *reference range* (``results/reference_ranges.toml``) is an expected TFLOP/s/GPU with a relative
tolerance; measured rows outside their range are flagged and fail ``--check``.

Modules: ``data`` (the TOML files), ``aggregate`` (records -> rows), ``words`` (how a run is
named), ``table`` (Markdown helpers), ``markdown`` (the page in order: summary, model tables, and
one line per section), the sections ``scaling`` (DP N runs beside their DP 1 runs), ``profiles``
(profiled runs against their measured step), ``hardware`` (accelerator names, smoke reports'
ceilings and node checks), ``precisions``, ``fits``, ``memory``, ``losses`` (with ``loss_plot``),
``plots`` (PNG), ``compare`` (B against A with its noise), ``schemas`` (the JSON Schema export),
``cli`` (``python -m bench results``, ``compare``, ``schemas``), ``perf`` (10,000-record timing).
"""
