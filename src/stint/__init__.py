"""stint: a scheduler for deep-learning training clusters.

Layers (see docs/architecture.md): ``model`` (plain typed data), ``perf`` (how fast a job trains),
``policies`` (decide), ``placement`` (counts to nodes), ``reconcile`` (plan diff to actions),
``sim`` and ``runtime`` (two mechanisms over the same policies), ``torch`` (the training SDK).
"""

__version__ = "0.1.0"
