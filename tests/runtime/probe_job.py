"""A job that tries to reach what it must not (for tests/runtime/test_accounts.py).

Usage: probe_job.py SECRET PATH...  Prints one JSON line: for each PATH whether reading it was
denied, what it could read of its supervisor (its parent) and its environment, and who and where
it runs. Standard library only, so any account's Python can run it.
"""

from __future__ import annotations

import json
import os
import sys


def attempt(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return "read:" + f.read(64).decode(errors="replace")
    except PermissionError:
        return "denied"
    except OSError as exc:
        return f"error:{exc.strerror}"


def main() -> int:
    secret, paths = sys.argv[1], sys.argv[2:]
    parent = os.getppid()
    try:
        os.kill(parent, 0)
        signal_parent = "allowed"
    except PermissionError:
        signal_parent = "denied"
    env_text = "\n".join(f"{k}={v}" for k, v in os.environ.items())
    report = {
        "paths": {p: attempt(p) for p in paths},
        "parent_environ": attempt(f"/proc/{parent}/environ"),
        "signal_parent": signal_parent,
        "secret_in_env": secret in env_text,
        "env_names": sorted(os.environ),
        "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(),
        "cwd": os.getcwd(), "flag": os.environ.get("PROBE_FLAG"),
    }
    print("PROBE " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
