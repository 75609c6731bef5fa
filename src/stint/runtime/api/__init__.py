"""The HTTP API (FastAPI). Handlers check input and call the store; the controller does the rest.

Every route but ``/v1/health`` needs ``Authorization: Bearer <token>``; users see and act on their
own jobs only (someone else's job is a 404), the admin on all. Requests on a job are recorded and
carried out by the controller at its next step.

One router per resource: ``cluster`` (health, history, cluster, nodes), ``jobs``, ``logs`` (a
job's log and progress), ``pins`` (an admin's resize, migrate, unpin), ``arrays``, ``users``
(tokens, users, whoami). What they share is in ``context`` (the settings, the caller, the
``ApiContext``), ``checks`` (a submission's checks) and ``errors``.
"""

from __future__ import annotations

from fastapi import FastAPI

from stint.runtime.api import arrays, cluster, jobs, logs, pins, users
from stint.runtime.api.context import ApiContext, ApiSettings, NodeCache, Who, must_be_admin
from stint.runtime.api.errors import add_error_handlers
from stint.runtime.api.logs import LOG_CHUNK, _read_log
from stint.runtime.intake import Intake
from stint.runtime.store import Store

__all__ = ["LOG_CHUNK", "MAX_BODY_BYTES", "ApiContext", "ApiSettings", "Who", "_read_log", "create_app",
           "must_be_admin"]

MAX_BODY_BYTES = 4 * 1024 * 1024  # larger bodies: 413 before authentication; a smaller one
# that is still too big for the OS (a command over MAX_COMMAND_BYTES) is a 422 naming its field


def create_app(store: Store, settings: ApiSettings) -> FastAPI:
    # The body limit is middleware: a larger body is a 413 before any route or token is read.
    app = FastAPI(title="stint control plane", version="1", max_body_size=MAX_BODY_BYTES)
    app.state.api = ApiContext(store, settings, NodeCache(store), Intake(store))
    add_error_handlers(app)
    for part in (cluster, jobs, logs, pins, arrays, users):
        app.include_router(part.router)

    from stint.runtime.web import mount

    mount(app)  # the dashboard (/ui): pages that read this API
    return app
