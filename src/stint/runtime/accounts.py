"""Who a job may run as in multi-user mode (the control plane runs as root).

One rule, applied by the API at submission and by the controller again at every launch (a
user's role or account may change while their job waits or between its attempts): a job runs
as its owner's OS account; an owner without one runs nothing, and an account of uid 0 (root)
runs the jobs of a user who is an admin only. Nothing maps "no account" to the control plane's
own (root) account.
"""

from __future__ import annotations

import pwd

from stint.runtime.store import Store


def is_root(account: str) -> bool:
    """Whether ``account`` is uid 0 on this host (an account unknown here is not; its launch
    fails as an account that does not exist)."""
    try:
        return pwd.getpwnam(account).pw_uid == 0
    except KeyError:
        return False


def refusal(user: str, account: str | None, is_admin: bool) -> str | None:
    """Why a job of ``user`` (an admin or not) may not run as ``account`` in multi-user mode;
    None if it may."""
    fix = f"an admin maps the user to an OS account: stint user create {user} --os-user ACCOUNT"
    if account is None:
        return f"user {user!r} has no OS account to run jobs as; {fix}"
    if is_root(account) and not is_admin:
        return (f"user {user!r} is not an admin and its OS account {account!r} is root (uid 0): "
                f"only an admin's jobs run as root; {fix}")
    return None


def launch_refusal(store: Store, job_id: int) -> str | None:
    """Why job ``job_id`` may not launch now in multi-user mode (its stored account, its
    owner's role now); None if it may."""
    found = store.runs_as(job_id)
    if found is None:
        return f"job {job_id} is not in the store"
    user, is_admin, account = found
    return refusal(user, account, is_admin)
