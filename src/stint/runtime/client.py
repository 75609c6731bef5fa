"""A small HTTP client of the control plane's API, used by the CLI (and the tests)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Self, cast

import httpx

DEFAULT_SERVER = "http://127.0.0.1:8765"


def default_data_dir() -> Path:
    return Path(os.environ.get("STINT_DATA_DIR") or Path.home() / ".stint")


class ApiError(RuntimeError):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status, self.detail = status, detail


def resolve(server: str | None, token: str | None, data_dir: Path | None) -> tuple[str, str]:
    """Server: ``--server``, else ``STINT_SERVER``, else 127.0.0.1:8765. Token: ``--token``, else
    ``STINT_TOKEN``, else ``<data-dir>/admin.token`` (written by the first ``stint serve``)."""
    server = server or os.environ.get("STINT_SERVER") or DEFAULT_SERVER
    token = token or os.environ.get("STINT_TOKEN")
    if not token:
        path = (data_dir or default_data_dir()) / "admin.token"
        try:
            token = path.read_text().strip()
        except OSError:
            raise ApiError(401, f"no token: set STINT_TOKEN or start `stint serve` with "
                           f"--data-dir {path.parent} to create {path}") from None
    return server.rstrip("/"), token


class Client:
    def __init__(self, server: str, token: str, timeout: float = 30.0) -> None:
        self.http = httpx.Client(base_url=server, timeout=timeout,
                                 headers={"Authorization": f"Bearer {token}"})

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            r = self.http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise ApiError(0, f"cannot reach {self.http.base_url}: {exc}") from None
        if r.status_code >= 400:
            raise ApiError(r.status_code, _detail(r))
        return r.json()  # the API's JSON: a dict or a list of dicts, by route

    def submit(self, **spec: Any) -> dict[str, Any]:
        body = {k: v for k, v in spec.items() if v is not None}
        return cast(dict[str, Any], self.call("POST", "/v1/jobs", json=body))

    def submit_array(self, array: str, parallel: int | None = None, **spec: Any) -> dict[str, Any]:
        """A job array: a task of ``spec`` per index of ``array`` (``"A-B"``)."""
        body = {k: v for k, v in spec.items() if v is not None}
        body.update(array=array, array_parallel=parallel)
        return cast(dict[str, Any], self.call("POST", "/v1/arrays", json=body))

    def array_jobs(self, array_id: int) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], self.call("GET", f"/v1/arrays/{array_id}"))

    def cancel_array(self, array_id: int) -> dict[str, Any]:
        return cast(dict[str, Any], self.call("POST", f"/v1/arrays/{array_id}/cancel"))

    def jobs(self, states: list[str] | None = None, user: str | None = None
             ) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"state": states or [], "limit": 10_000}
        if user is not None:
            params["user"] = user
        return cast(list[dict[str, Any]], self.call("GET", "/v1/jobs", params=params))

    def show(self, job: int) -> dict[str, Any]:
        return cast(dict[str, Any], self.call("GET", f"/v1/jobs/{job}"))

    def logs(self, job: int, offset: int = 0) -> dict[str, Any]:
        return cast(dict[str, Any], self.call("GET", f"/v1/jobs/{job}/logs", params={"offset": offset}))

    def act(self, job: int, verb: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return cast(dict[str, Any], self.call("POST", f"/v1/jobs/{job}/{verb}", json=body))

    def nodes(self) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], self.call("GET", "/v1/nodes"))

    def create_token(self, user: str, admin: bool | None = None,
                     os_user: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"user": user}
        if admin is not None:
            body["admin"] = admin
        if os_user is not None:
            body["os_user"] = os_user
        return cast(dict[str, Any], self.call("POST", "/v1/tokens", json=body))

    def revoke_token(self, user: str) -> dict[str, Any]:
        return cast(dict[str, Any], self.call("DELETE", f"/v1/tokens/{user}"))

    def users(self) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], self.call("GET", "/v1/users"))

    def whoami(self) -> dict[str, Any]:
        return cast(dict[str, Any], self.call("GET", "/v1/whoami"))


def _detail(r: httpx.Response) -> str:
    try:
        detail = r.json().get("detail", r.text)
    except ValueError:
        return r.text
    if isinstance(detail, list):  # FastAPI validation errors: name each field
        return "; ".join(f"{'.'.join(str(p) for p in d.get('loc', [])[1:])}: {d.get('msg')}"
                         for d in detail)
    return str(detail)
