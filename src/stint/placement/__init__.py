"""Placement: from worker counts to concrete nodes."""
