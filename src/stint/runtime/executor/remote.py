"""An executor in another process (another network namespace, another machine): the agent side
serves a cluster's own executor over HTTP, and ``RemoteExecutor`` is the ``Executor`` the
control plane drives it through.

``stint agent executor --listen HOST:PORT --state-dir DIR --nodes N --gpus-per-node G
--secret-file F`` runs a ``LocalExecutor`` behind ``POST /v1/<method>`` (a JSON object of
arguments in, ``{"result": ...}`` out) for every method of the ``Executor`` protocol; ``poll``
also returns the nodes down. A call without the fleet's secret (``fleet_secret``) is refused with
a 401 before its body is read: the agent launches processes as any job's account.
On SIGTERM the agent kills the workers it runs, then exits (a cluster that stops takes its jobs
with it; their last checkpoints stay in its storage, served by its copy service).

``RemoteExecutor(url, nodes)`` knows the cluster's nodes from the fleet file, so the control
plane starts while a cluster is unreachable. A call that cannot reach the agent marks the cluster
*lost*: every node is down (``down_nodes``), every attempt it knew running is reported ended
(``STOPPED``, "executor unreachable") by the next ``poll``, and nothing is launched there. The
agent is asked again every ``RETRY_S``; once it answers, the attempts it still runs were all
reported ended and are killed (their jobs have moved on), and its nodes are up again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from stint.runtime import fleet_secret
from stint.runtime.executor.base import (
    DEFAULT_GRACE_S,
    Executor,
    ExecutorError,
    JobExit,
    LaunchError,
    NodeInfo,
    Outcome,
    WorkerLaunch,
)
from stint.runtime.listen import HTTPServer

log = logging.getLogger(__name__)
CALL_TIMEOUT_S = 5.0
RETRY_S = 2.0


class Unreachable(ExecutorError):
    """The agent did not answer (connection refused, timed out, or a broken reply)."""


def _exit_out(e: JobExit) -> dict[str, Any]:
    d = asdict(e)
    d["exit_codes"] = {str(k): v for k, v in e.exit_codes.items()}
    return d


def _exit_in(d: Mapping[str, Any]) -> JobExit:
    return JobExit(str(d["job_id"]), int(d["attempt"]), Outcome(d["outcome"]),
                   {int(k): int(v) for k, v in d["exit_codes"].items()}, str(d["reason"]),
                   float(d["ended_at"]))


class RemoteExecutor:
    """The ``Executor`` of a cluster whose agent listens at ``url`` (``http://HOST:PORT``)."""

    def __init__(self, url: str, nodes: Sequence[NodeInfo], secret: str, name: str = "") -> None:
        self.url, self.name = url.rstrip("/"), name or url
        self._auth = fleet_secret.headers(secret)
        self._nodes = list(nodes)
        self._known: dict[str, int] = {}  # job -> attempt launched or seen running, not ended
        self._down: frozenset[str] = frozenset()
        self._lost = False
        self._retry_at = 0.0
        self._checked = False

    # -- transport -------------------------------------------------------------------------
    def _call(self, method: str, **args: Any) -> Any:
        req = urllib.request.Request(f"{self.url}/v1/{method}", json.dumps(args).encode(),
                                     {"Content-Type": "application/json", **self._auth},
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=CALL_TIMEOUT_S) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            if exc.code == 409:
                raise LaunchError(text) from None
            if exc.code == 401:  # a wrong --secret-file: as good as unreachable, and said so
                self._lose(f"{method}: it refused the fleet's secret (is its --secret-file a "
                           "copy of the control plane's fleet.secret?)")
                raise Unreachable(f"cluster {self.name}'s executor refused the fleet's "
                                  "secret") from None
            raise ExecutorError(f"cluster {self.name}: {method}: {text}") from None
        except (OSError, ValueError) as exc:
            self._lose(f"{method}: {exc}")
            raise Unreachable(f"cluster {self.name}'s executor is unreachable ({exc})") from None
        return body["result"]

    def _lose(self, why: str) -> None:
        if not self._lost:
            log.warning("cluster %s: executor at %s unreachable (%s): its nodes are down and "
                        "its jobs are reported stopped", self.name, self.url, why)
        self._lost = True
        self._retry_at = time.monotonic() + RETRY_S

    def _reachable(self) -> bool:
        """True unless lost; a lost agent is asked again every ``RETRY_S``."""
        if self._lost and time.monotonic() >= self._retry_at:
            try:
                self._retry_at = time.monotonic() + RETRY_S
                self._check(self._call("nodes"))
                running = self._call("running")
            except ExecutorError:
                return False
            for job in running:  # reported ended while lost: their jobs have moved on
                if job not in self._known:
                    self._call("kill", job_id=job)
            self._lost = False
            log.warning("cluster %s: executor at %s answers again", self.name, self.url)
        return not self._lost

    def _check(self, nodes: list[dict[str, Any]]) -> None:
        got = [NodeInfo(str(n["name"]), int(n["slots"])) for n in nodes]
        if got != self._nodes:
            self._lose("nodes differ from the fleet file")
            raise ExecutorError(f"cluster {self.name}: the agent's nodes {got} are not the "
                                f"fleet file's {self._nodes}")
        self._checked = True

    # -- the Executor protocol -------------------------------------------------------------
    def nodes(self) -> list[NodeInfo]:
        return list(self._nodes)

    def launch(self, workers: Sequence[WorkerLaunch]) -> None:
        if not self._reachable():
            raise ExecutorError(f"cluster {self.name}'s executor is unreachable")
        if not self._checked:
            self._check(self._call("nodes"))
        self._call("launch", workers=[asdict(w) for w in workers])
        if workers:
            self._known[workers[0].job_id] = workers[0].attempt

    # An unreachable agent's jobs are reported stopped by ``poll``: asking them to stop, or
    # looking up how they ended, then does nothing.
    def request_stop(self, job_id: str, grace_s: float = DEFAULT_GRACE_S) -> None:
        if self._reachable():
            with contextlib.suppress(Unreachable):
                self._call("request_stop", job_id=job_id, grace_s=grace_s)

    def kill(self, job_id: str) -> None:
        if self._reachable():
            with contextlib.suppress(Unreachable):
                self._call("kill", job_id=job_id)

    def poll(self) -> list[JobExit]:
        if self._reachable():
            try:
                got = self._call("poll")
                exits = [_exit_in(e) for e in got["exits"]]
                self._down = frozenset(got["down"])
                for e in exits:
                    if self._known.get(e.job_id) == e.attempt:
                        del self._known[e.job_id]
                return exits
            except ExecutorError:
                pass
        now = time.time()
        lost = [JobExit(job, attempt, Outcome.STOPPED, {}, f"cluster {self.name}'s executor "
                        "unreachable", now) for job, attempt in sorted(self._known.items())]
        self._known.clear()
        return lost

    def running(self) -> dict[str, int]:
        if not self._reachable():
            return {}
        try:
            got = {str(k): int(v) for k, v in self._call("running").items()}
        except ExecutorError:
            return {}
        self._known.update(got)
        return got

    def exit_of(self, job_id: str, attempt: int) -> JobExit | None:
        if not self._reachable():
            return None
        try:
            got = self._call("exit_of", job_id=job_id, attempt=attempt)
        except Unreachable:
            return None
        return None if got is None else _exit_in(got)

    def status(self, job_id: str) -> Mapping[str, Any] | None:
        if not self._reachable():
            return None
        try:
            got = self._call("status", job_id=job_id)
        except ExecutorError:
            return None
        return got if isinstance(got, dict) else None

    def down_nodes(self) -> frozenset[str]:
        if not self._reachable():
            return frozenset(n.name for n in self._nodes)
        return self._down

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------- the agent side
def _dispatch(executor: Executor, method: str, args: dict[str, Any]) -> Any:
    if method == "nodes":
        return [asdict(n) for n in executor.nodes()]
    if method == "launch":
        executor.launch([WorkerLaunch(**w) for w in args["workers"]])
        return None
    if method == "request_stop":
        executor.request_stop(str(args["job_id"]), float(args["grace_s"]))
        return None
    if method == "kill":
        executor.kill(str(args["job_id"]))
        return None
    if method == "poll":
        return {"exits": [_exit_out(e) for e in executor.poll()],
                "down": sorted(executor.down_nodes())}
    if method == "running":
        return executor.running()
    if method == "exit_of":
        got = executor.exit_of(str(args["job_id"]), int(args["attempt"]))
        return None if got is None else _exit_out(got)
    if method == "status":
        status = executor.status(str(args["job_id"]))
        return None if status is None else dict(status)
    raise KeyError(method)


def serve_executor(executor: Executor, host: str, port: int, secret: str) -> ThreadingHTTPServer:
    """An agent for ``executor`` bound to ``host:port`` answering callers with ``secret``; calls
    are serialized (one lock)."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            method = self.path.removeprefix("/v1/")
            if not fleet_secret.allowed(self.headers.get(fleet_secret.HEADER), secret):
                self.close_connection = True
                status, body = 401, b"missing or wrong fleet secret"
            else:
                status, body = self._answer(method)
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _answer(self, method: str) -> tuple[int, bytes]:
            status, body = 200, b""
            try:
                args = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                with lock:
                    body = json.dumps({"result": _dispatch(executor, method, args)}).encode()
            except LaunchError as exc:
                status, body = 409, str(exc).encode()
            except KeyError as exc:
                status, body = 404, f"no method or argument {exc}".encode()
            except (ExecutorError, ValueError, TypeError) as exc:
                status, body = 400, str(exc).encode()
            return status, body

    return HTTPServer((host, port), Handler)


def run_agent(executor: Executor, host: str, port: int, secret: str) -> None:
    """Serve ``executor`` until SIGTERM/SIGINT; then kill its workers and exit."""
    server = serve_executor(executor, host, port, secret)

    def stop(_sig: int, _frame: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.warning("executor agent listening on http://%s:%d", host, server.server_address[1])
    try:
        server.serve_forever()
    finally:
        for job in sorted(executor.running()):
            executor.kill(job)
        log.warning("executor agent stopped; its workers were killed")
        executor.close()
