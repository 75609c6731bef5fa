"""Users and their tokens (admin only): ``/v1/tokens``, ``/v1/users``; and ``/v1/whoami``."""

from __future__ import annotations

import pwd
from typing import Annotated

from fastapi import APIRouter, HTTPException
from fastapi import Path as PathParam

from stint.runtime.accounts import refusal
from stint.runtime.api.context import ApiSettings, Ctx, Who, must_be_admin
from stint.runtime.api.errors import unprocessable
from stint.runtime.schemas import USER_NAME, TokenIn, TokenOut, UserOut, WhoAmI
from stint.runtime.store import ADMIN_NAME, LastAdminError, UserInfo, write_token_file

router = APIRouter()


@router.post("/v1/tokens", status_code=201)
def create_token(body: TokenIn, who: Who, api: Ctx) -> TokenOut:
    store, settings = api.store, api.settings
    must_be_admin(who, "create tokens")
    if body.os_user is not None:
        _check_account(body.os_user, settings)
    try:
        token = store.create_token(body.user, settings.clock(), admin=body.admin,
                                   os_user=body.os_user)
    except LastAdminError as exc:
        raise unprocessable("admin", str(exc)) from None
    if body.user == ADMIN_NAME and settings.admin_token_file is not None:
        write_token_file(settings.admin_token_file, token)  # the CLI's default stays valid
    row = next(u for u in store.users() if u.name == body.user)
    return TokenOut(user=row.name, admin=row.is_admin, token=token, os_user=row.os_user)


@router.delete("/v1/tokens/{user}")
def revoke_token(user: Annotated[str, PathParam(pattern=USER_NAME)], who: Who, api: Ctx) -> UserOut:
    must_be_admin(who, "revoke tokens")
    if user == who.name:
        raise HTTPException(409, "an admin cannot revoke their own token (ask another "
                            "admin, or replace it with stint token create)")
    if not api.store.revoke_token(user):
        raise HTTPException(404, f"no user {user}")
    return next(_user_out(u) for u in api.store.users() if u.name == user)


@router.get("/v1/users")
def list_users(who: Who, api: Ctx) -> list[UserOut]:
    must_be_admin(who, "list users")
    return [_user_out(u) for u in api.store.users()]


@router.get("/v1/whoami")
def whoami(who: Who, api: Ctx) -> WhoAmI:
    settings = api.settings
    runs_as = who.os_user if settings.multi_user else settings.own_account
    if settings.multi_user and refusal(who.name, who.os_user, who.is_admin) is not None:
        runs_as = None  # (submissions are refused)
    return WhoAmI(user=who.name, admin=who.is_admin, os_user=runs_as)


def _user_out(u: UserInfo) -> UserOut:
    return UserOut(user=u.name, admin=u.is_admin, os_user=u.os_user, created_at=u.created_at,
                   token_created_at=u.token_created_at)


def _check_account(os_user: str, settings: ApiSettings) -> None:
    """A 422 naming ``os_user`` unless jobs can run as that account here."""
    if not settings.multi_user and os_user != settings.own_account:
        raise unprocessable("os_user", f"single-user mode: jobs run as "
                            f"{settings.own_account!r} only (start stint serve as root to run "
                            "jobs as their owners)")
    try:
        pwd.getpwnam(os_user)
    except KeyError:
        raise unprocessable("os_user", f"no OS account {os_user!r} on this host") from None
