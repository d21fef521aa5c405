"""Scheduling policies: pure functions of a cluster snapshot and the jobs."""
