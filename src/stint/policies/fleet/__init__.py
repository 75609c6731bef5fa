"""Global schedulers: which cluster of the fleet a job runs on (docs/fleet.md)."""
