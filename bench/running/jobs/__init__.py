"""Cluster job lifecycle: submit a run, follow it, collect it into a record, check a cluster.

Vocabulary (on top of the package's preset/layout/platform/plan/run/record):

- *run directory*: ``runs/<run-id>/``, created once per submission and never overwritten. It keeps
  the exact job script (``job.sbatch`` or ``job.pbs``), ``plan.json``, ``job_id``,
  ``submit.json`` (scheduler, submit argv, output file path, time) and ``state.json`` (the last
  scheduler state the kit saw, because ``scontrol`` forgets finished jobs after ``MinJobAge``
  and there is no accounting database to ask later).
- *job state*: the scheduler's word for a job (Slurm's names: ``PENDING``, ``RUNNING``,
  ``COMPLETED``, ``FAILED``, ``TIMEOUT`` ...); PBS states are translated to these names.
- *outcome*: what the kit concludes about a finished run from the job state, the job's own output
  (end marker, ``slurmstepd`` cancel lines) and the benchmark log parser; it becomes the record's
  ``status`` and ``reason``.
- *system check* (``bench.running.jobs.system_check``): a short job in which every rank prints one JSON line
  about itself (``python -m bench.train.sysinfo``); the kit gathers them into a table and flags
  disagreements. Not to be confused with the *image check* run inside a built image
  (``bench.images.check``) or the results' *range check* (``bench results --check``).
"""
