"""The API's errors: a 422 naming the field, FastAPI's 422 without the input, and a 503 when the
store or the disk cannot serve a request."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError

log = logging.getLogger("stint.runtime.api")


def unprocessable(field: str, msg: str, where: str = "body") -> RequestValidationError:
    """A 422 in FastAPI's own format, naming the field."""
    return RequestValidationError([{"loc": (where, field), "msg": msg, "type": "value_error"}])


def add_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(OperationalError, _store_unavailable)
    app.add_exception_handler(OSError, _store_unavailable)


async def _store_unavailable(_request: Request, exc: Exception) -> JSONResponse:
    """The store or the disk cannot serve the request (unreachable database, full disk): a 503
    with the reason, which the client may retry, never a bare 500."""
    why = str(getattr(exc, "orig", None) or exc).splitlines()[0][:300]
    log.error("store unavailable: %s: %s", type(exc).__name__, why)
    return JSONResponse({"detail": f"the control plane cannot use its store now: {why}"},
                        status_code=503, headers={"Retry-After": "5"})


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 without the offending input, which may not be JSON (NaN, 1e400, bytes)."""
    assert isinstance(exc, RequestValidationError)
    detail = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")),
               "type": str(e.get("type", ""))} for e in exc.errors()]
    return JSONResponse({"detail": detail}, status_code=422)
