"""Logs and metrics: configured once, injected everywhere else."""
