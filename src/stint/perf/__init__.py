"""Performance models: how fast a job trains on an allocation."""
