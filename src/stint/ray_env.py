"""The environment every process that uses Ray sets before importing it (sweeps run as Ray tasks,
the Ray executor, the loopback cluster): no usage statistics sent, and no cluster formed over
anything but the local machine's own loopback where Ray would otherwise refuse it."""

LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
