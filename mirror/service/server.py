"""The HTTP server's doors: uvicorn with the `service:` limits wired in (idle keep-alive, connections, header
size), a deadline for a request's headers (uvicorn has none), a deadline for its body, and one place where an
exception no route expected becomes a 500 with one log line instead of a traceback."""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import traceback

import h11
import uvicorn
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from mirror import database
from mirror.settings import ServiceSettings
from mirror.untrusted import clip

MAX_HEADER_BYTES = 16 * 1024  # a request line and headers past this are answered 400 by h11

log = logging.getLogger("mirror.service")


INTERNAL_PATHS = frozenset({"/metrics", "/healthz", "/readyz"})


class ListenError(Exception):
    """A port that cannot be listened on, in one line."""


def listen(host: str, port: int, internal_port: int | None) -> list[socket.socket]:
    """The public port's socket, and the internal port's where one is set, bound and listening."""
    listening: list[socket.socket] = []
    for each in (port, internal_port):
        if each is None:
            continue
        try:
            listening.append(socket.create_server((host, each), reuse_port=False))
        except OSError as exc:
            for bound in listening:
                bound.close()
            raise ListenError(f"cannot listen on {host}:{each}: {exc.strerror or exc}") from None
    return listening


def run(app: ASGIApp, service: ServiceSettings, sockets: list[socket.socket]) -> None:
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        http=header_deadline_protocol(service.header_seconds),
        ws="none",  # no route speaks WebSocket
        timeout_keep_alive=math.ceil(service.keepalive_seconds),
        # uvicorn answers 503 once its connections (this one included) reach the limit: max_connections are served
        # on both ports together, so a crowded pod is unready (readiness is HTTP; liveness reads a file)
        limit_concurrency=service.max_connections + 1,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )
    uvicorn.Server(config).run(sockets=sockets)


class PortSplit:
    """With `service.internal_port` set, the probes and /metrics answer there only, and nothing else does: each
    port answers 404 for the other's paths (the port a request came in on is the server's address in its scope)."""

    def __init__(self, app: ASGIApp, internal_port: int | None) -> None:
        self.app = app
        self.internal_port = internal_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.internal_port is None or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        server = scope.get("server") or (None, None)
        on_internal = server[1] == self.internal_port
        if (scope["path"] in INTERNAL_PATHS) != on_internal:
            where = "the internal port" if not on_internal else f"the public port, not {self.internal_port}"
            await JSONResponse({"error": f"not found here: served on {where}"}, status_code=404)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def header_deadline_protocol(seconds: float) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol, closing a connection that sends a request's headers too slowly."""

    class HeaderDeadline(H11Protocol):
        """A connection is closed when, `seconds` after it was made or after its last response, the app is not
        working on a request of it: the peer has not finished sending a request's headers (or is still
        trickling the body of a request that was already answered)."""

        header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.arm_header_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self.arm_header_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            self.disarm_header_deadline()
            super().connection_lost(exc)

        def arm_header_deadline(self) -> None:
            self.disarm_header_deadline()
            if not self.transport.is_closing():
                self.header_timer = self.loop.call_later(seconds, self.header_deadline_passed)

        def disarm_header_deadline(self) -> None:
            if self.header_timer is not None:
                self.header_timer.cancel()
                self.header_timer = None

        def header_deadline_passed(self) -> None:
            self.header_timer = None
            serving = self.cycle is not None and not self.cycle.response_complete
            if serving or self.transport.is_closing():
                return  # the headers came; the body has its own deadline, the response is the app's
            if self.conn.their_state is not h11.IDLE or self.conn.trailing_data[0]:
                log.info("closed a connection whose request headers did not arrive within %g s", seconds)
            self.transport.close()

    return HeaderDeadline


STORE_AWAY = {
    "error": "the job store cannot take the request now (out of reach, or its disk full): nothing was done; "
    "send the request again later"
}
STORE_AWAY_RETRY_AFTER = 30  # seconds


class BodyTimeout(Exception):
    pass


class Doors:
    """ASGI middleware around every route: the request body must arrive within `body_seconds` of its headers
    (else 408, and the connection is closed), a peer that leaves is not an error, a job store that cannot be
    reached is a 503 with Retry-After (a webhook's sender may try again), and any other exception is answered 500
    and logged as one line (where and what), not as a traceback."""

    def __init__(self, app: ASGIApp, body_seconds: float) -> None:
        self.app = app
        self.body_seconds = body_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline = asyncio.get_running_loop().time() + self.body_seconds
        body_done = False
        started = False

        async def timed_receive() -> Message:
            nonlocal body_done
            if body_done:  # later reads only wait for a disconnect
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise BodyTimeout from None
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, timed_receive, tracked_send)
        except BodyTimeout:
            log.info("%s: the request body did not arrive within %g s", request_line(scope), self.body_seconds)
            if not started:
                reason = {"error": f"the request body did not arrive within {self.body_seconds:g} s"}
                await JSONResponse(reason, status_code=408, headers={"Connection": "close"})(scope, receive, send)
        except ClientDisconnect:
            pass  # the peer left before its body was read: nobody to answer
        except Exception as exc:
            if database.unavailable(exc):
                log.warning(
                    "%s: the job store cannot take it (out of reach, or its disk full): %s",
                    request_line(scope),
                    database.driver_reason(exc),
                )
                answer = JSONResponse(STORE_AWAY, status_code=503, headers={"Retry-After": str(STORE_AWAY_RETRY_AFTER)})
            else:
                log.error("%s: internal error: %s", request_line(scope), one_line(exc))
                answer = JSONResponse({"error": "internal error"}, status_code=500)
            if not started:
                await answer(scope, receive, send)


def request_line(scope: Scope) -> str:
    """The method and path a log line names; the Docker Hub hook's path carries its token, which is left out."""
    path = str(scope.get("path", ""))
    if path.startswith(DOCKERHUB_HOOK):
        path = DOCKERHUB_HOOK + "<token>"
    return f"{clip(str(scope.get('method', '')), 20)} {clip(path, 100)}"


DOCKERHUB_HOOK = "/hooks/dockerhub/"  # + the token: a secret in the path, as Docker Hub's webhooks take it


def one_line(exc: BaseException) -> str:
    """The exception and the line that raised it, as one line."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return f"{type(exc).__name__}: {clip(str(exc))}{where}"
