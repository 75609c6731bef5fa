"""stint.torch: the training SDK (resumable state, consistent checkpoints, elastic ranks)."""
