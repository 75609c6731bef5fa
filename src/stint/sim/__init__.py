"""Simulator: event engine, mechanism cost model, metrics, trace readers and generators."""
