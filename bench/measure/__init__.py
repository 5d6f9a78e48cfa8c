"""Measurement: the FLOPs count, the steady-state protocol, the training-log parser and run statuses."""
