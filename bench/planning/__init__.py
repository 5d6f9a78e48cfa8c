"""Planning: options, their checks, layouts, memory, A/B tuning, sweeps, the engines' flags and the one planner."""
