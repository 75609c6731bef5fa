"""Live control plane: store, API, controller (reconcile loop), executors."""
