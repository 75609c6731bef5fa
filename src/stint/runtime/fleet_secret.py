"""The secret a live fleet's control plane shares with its agents.

An executor agent (``stint agent executor``) launches processes as any job's account, and a copy
service (``stint agent storage``, or one ``stint serve`` starts) serves and replaces any job's
checkpoint: neither may answer a caller that is not the control plane or a peer service. Every
call to them carries the fleet's secret (``Authorization: Bearer SECRET``); one without it is
refused (401) before anything else is read. ``stint serve --fleet`` creates the secret as
``<data-dir>/fleet.secret`` (mode 0600) on its first start and reads it afterwards; each agent is
given a copy (``--secret-file``) that only the agent's account may read. Jobs never see it: the
data directory is the control plane's alone (mode 0700), and no job runs as an agent's account.

stdlib only: the agents import it.
"""

from __future__ import annotations

import hmac
import secrets
from pathlib import Path

FILE_NAME = "fleet.secret"
HEADER = "Authorization"
MIN_CHARS = 16


class SecretError(ValueError):
    """A secret file that is missing, unreadable, readable by others, or not a secret."""


def ensure(path: Path) -> str:
    """The secret in ``path``, created (mode 0600) if there is none yet."""
    from stint.runtime.store import write_token_file

    if not path.exists():
        write_token_file(path, secrets.token_urlsafe(32))
    return load(path)


def load(path: Path) -> str:
    """The secret in ``path``; SecretError saying what is wrong with the file."""
    try:
        mode = path.stat().st_mode
        text = path.read_text().strip()
    except OSError as exc:
        raise SecretError(f"{path}: cannot read the fleet secret ({exc.strerror})") from None
    if mode & 0o077:
        raise SecretError(f"{path}: the fleet secret is readable by other accounts (mode "
                          f"{mode & 0o777:o}); chmod 600 it")
    if len(text) < MIN_CHARS:
        raise SecretError(f"{path}: not a fleet secret (under {MIN_CHARS} characters)")
    return text


def headers(secret: str) -> dict[str, str]:
    """The header every call to an agent carries."""
    return {HEADER: f"Bearer {secret}"}


def allowed(value: str | None, secret: str) -> bool:
    """Whether a call's ``Authorization`` header carries ``secret`` (constant-time)."""
    return value is not None and hmac.compare_digest(value.encode(), f"Bearer {secret}".encode())
