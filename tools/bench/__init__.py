"""Helpers of tools/bench.py: the workloads, one adapter per system measured, and the report."""
