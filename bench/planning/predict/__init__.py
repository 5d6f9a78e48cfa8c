"""The step-time model: what a layout should take per step on a platform, from measured ceilings
and constants fitted on the kit's records.

Vocabulary: a *case* is one run as the model sees it (preset shape, layout, precision, layers,
recompute, CUDA graphs, overlap); its *terms* are the seconds each part of the step would take at
the measured ceilings (``platforms/performance/<accelerator>.toml``); the *fit* is one factor per
term, fitted on records and stored in ``fit.json`` with its provenance. The model reads no files:
``facts.load_performance`` and ``fit.load_fit`` do, before it runs.

Modules: ``facts`` (the measured ceilings), ``case`` (a case, from a record), ``terms`` (the
step's terms), ``fit`` (fitting, the stored fit), ``validate`` (leave-one-out, cross-size and
ranking checks), ``plot`` (predicted against measured, PNG).
"""
