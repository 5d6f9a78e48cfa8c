"""Renderers: turn a LaunchPlan into job-script text or an argument list, and nothing else."""
