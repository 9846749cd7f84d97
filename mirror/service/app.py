"""The ASGI app: routes as plain functions, a lifespan that owns the job store, the runner and the
scheduler. Served by uvicorn (`mirror serve`) behind the doors of `server.py`.

Bad input is a 4xx with a short reason: a request's headers, path, query and body are checked before they
reach the store, and what is quoted back is clipped. `serve` checks the state directory and the database
before uvicorn starts, so an unusable one is one line and exit 2; so is a config that opens no door (no webhook
secret, API token or schedule); a config's problems are a log record each."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import logging
import re
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy.engine import make_url
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from mirror import database
from mirror.registry.proxy import ProxySettingError, environment_proxies
from mirror.service import logs, page
from mirror.service.heartbeat import beat
from mirror.service.hooks import (
    HookError,
    HookIgnored,
    check_bearer,
    check_signature,
    check_token,
    ci_request,
    delivery_id,
    dockerhub_version,
)
from mirror.service.metrics import Metrics, StoreSuccess
from mirror.service.runner import JobRunner
from mirror.service.scheduler import missed_tick, start_scheduler
from mirror.service.server import Doors, ListenError, PortSplit, listen, run
from mirror.service.store import KINDS, MAX_ERROR_CHARS, STATES, UNFINISHED, JobStore, QueueFull, UnknownJob
from mirror.settings import ConfigError, MirrorSettings, ServiceSettings, load_settings
from mirror.untrusted import clip, is_number

log = logging.getLogger("mirror.service")
T = TypeVar("T")
# A webhook for a release whose job succeeded less than this long ago is answered with that job, not queued
# again: GitHub signs no timestamp, so a captured delivery can be replayed under a new delivery id.
REPLAY_WINDOW_SECONDS = 600.0
PAGE_DEFAULT, PAGE_MAX = 50, 200  # jobs per page of GET /jobs
STORE_RETRY_WAITS = (2.0, 5.0, 10.0, 20.0, 40.0, 60.0, 60.0, 60.0)  # seconds: a scheduled tick waits ~4 min in all
QUEUE_FULL_RETRY_AFTER = 60  # seconds: a webhook refused for a full queue is told when to try again
PRIVATE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}  # on every job API answer
_JOB_ID = re.compile(r"[0-9A-Za-z_-]{1,32}")
_LIST_PARAMETERS = ("limit", "before", "state", "kind")


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def job_view(job: dict[str, Any]) -> dict[str, Any]:
    releases = [{**r, "values": [_without_content(v) for v in r.get("values", [])]} for r in job["result"] or []]
    return {
        "id": job["id"],
        "kind": job["kind"],
        "state": job["state"],
        "versions": job["versions"],
        "created_at": job["created_at"],
        "started_at": job["started_at"],
        "finished_at": job["finished_at"],
        "owner": job["owner"],  # the replica that holds (or last held) the job's lease
        "lease_expires_at": job["lease_expires_at"],
        "attempts": job["attempts"],
        "releases": releases,
        "values": [
            {
                "target": v["target"],
                "version": release["version"],
                "chart": v.get("chart_name", "hami"),
                "path": v["path"],
                "url": page.values_url(job["id"], release["version"], v["target"], v.get("chart_name", "hami")),
            }
            for release in releases
            for v in release.get("values", [])
        ],
        "files": [  # written beside the values: the RBAC file, a chart's .tgz where the target refused the chart
            {
                "target": v["target"],
                "version": release["version"],
                "name": each["name"],
                "sha256": each["sha256"],
                "url": page.file_url(job["id"], release["version"], v["target"], each["name"]),
            }
            for release in releases
            for v in release.get("values", [])
            for each in v.get("files", [])
        ],
        "error": clip(job["error"], MAX_ERROR_CHARS) if job["error"] else job["error"],  # rows from before the cut
    }


def _without_content(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if key != "content"}


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length", "")
    if is_number(declared) and int(declared) > limit:
        raise HookError(413, f"body over {limit} bytes")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HookError(413, f"body over {limit} bytes")
    return body


async def accept(request: Request, kind: str, version: str, delivery: str | None) -> JSONResponse:
    """202 with the job that will run (new, the release's queued or waiting one, or the one running for this delivery);
    200 with a finished job that already answers this delivery or succeeded for this release within
    REPLAY_WINDOW_SECONDS: nothing queued. 503 when service.max_queued_jobs are queued or waiting: nothing queued."""
    state = request.app.state
    try:
        job, created = await state.store.enqueue(
            kind,
            [version],
            delivery,
            done_within=REPLAY_WINDOW_SECONDS,
            max_queued=state.settings.service.max_queued_jobs,
        )
    except QueueFull as exc:
        log.warning("%s webhook for %s refused: %s", kind, version, exc)
        message = f"{exc}: nothing queued for {version}; send it again once they have run (GET /jobs?state=queued)"
        return JSONResponse({"error": message}, status_code=503, headers={"Retry-After": str(QUEUE_FULL_RETRY_AFTER)})
    if created:
        state.runner.wake.set()
        log.info("queued job %s for %s (%s)", job["id"], version, kind)
    elif job["state"] not in UNFINISHED:
        log.info("%s webhook for %s answered by job %s (%s), nothing queued", kind, version, job["id"], job["state"])
    status = 202 if created or job["state"] in UNFINISHED else 200
    return JSONResponse({**job_view(job), "duplicate": not created}, status_code=status)


async def ci_hook(request: Request) -> Response:
    settings: MirrorSettings = request.app.state.settings
    try:
        body = await read_body(request, settings.webhook.max_body)
        check_signature(settings.webhook.secret_value(), body, request.headers.get("x-hub-signature-256"))
        delivery = delivery_id(request.headers.get("x-github-delivery"))
        asked = ci_request(settings, body, request.headers.get("x-github-event"))
    except HookError as exc:
        return error(exc.status, str(exc))
    except HookIgnored as exc:
        log.info("webhook ignored: %s", exc)
        return JSONResponse({"ignored": str(exc)}, status_code=200)
    return await accept(request, "ci", asked.version, asked.release_delivery or delivery)


async def dockerhub_hook(request: Request) -> Response:
    settings: MirrorSettings = request.app.state.settings
    try:
        check_token(settings.webhook.dockerhub_token_value(), request.path_params["token"])  # read again: a rotation
        version = dockerhub_version(settings, await read_body(request, settings.webhook.max_body))
    except HookError as exc:
        return error(exc.status, str(exc))
    except HookIgnored as exc:
        log.info("webhook ignored: %s", exc)
        return JSONResponse({"ignored": str(exc)}, status_code=200)
    return await accept(request, "dockerhub", version, None)


def authorised(route: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """The job API answers only requests that carry the configured bearer token, or the status page's session
    cookie (`page.py`: signed with a key derived from the token, SameSite=Strict; these routes only read)."""

    @functools.wraps(route)
    async def checked(request: Request) -> Response:
        try:
            check_bearer(page.api_token(request), request.headers.get("authorization"))
        except HookError as exc:
            if not page.has_session(request):
                return JSONResponse({"error": str(exc)}, status_code=401, headers={"WWW-Authenticate": "Bearer"})
        answer = await route(request)
        answer.headers.update(PRIVATE)  # nothing kept by a browser or a proxy after the session ends
        return answer

    return checked


async def find_job(request: Request) -> dict[str, Any] | None:
    job_id = request.path_params["job_id"]
    return await request.app.state.store.get(job_id) if _JOB_ID.fullmatch(job_id) else None


@authorised
async def get_job(request: Request) -> Response:
    job = await find_job(request)
    return JSONResponse(job_view(job)) if job else error(404, "no such job")


@authorised
async def list_jobs(request: Request) -> Response:
    """Newest first, `limit` (1-200, default 50) a page; `state=` and `kind=` filter; `next` is the `before=`
    of the next page (null on the last)."""
    try:
        limit, before, state, kind = list_parameters(request)
        jobs, following = await request.app.state.store.page(limit, before, state, kind)
    except HookError as exc:
        return error(exc.status, str(exc))
    except UnknownJob:
        return error(400, "before: no such job")
    return JSONResponse({"jobs": [job_view(j) for j in jobs], "next": following})


def list_parameters(request: Request) -> tuple[int, str | None, str | None, str | None]:
    """GET /jobs's query: limit, before, state, kind; anything else, or a value out of range, is a 400."""
    query = request.query_params
    for name in query:
        if name not in _LIST_PARAMETERS:
            raise HookError(400, f"unknown query parameter {clip(name, 40)!r}: expected {', '.join(_LIST_PARAMETERS)}")
        if len(query.getlist(name)) > 1:
            raise HookError(400, f"{name}: given more than once")
    limit = query.get("limit", str(PAGE_DEFAULT))
    if not re.fullmatch(r"[0-9]{1,4}", limit) or not 1 <= int(limit) <= PAGE_MAX:
        raise HookError(400, f"limit {clip(limit, 40)!r}: expected a number from 1 to {PAGE_MAX}")
    before = query.get("before")
    if before is not None and not _JOB_ID.fullmatch(before):
        raise HookError(400, f"before {clip(before, 40)!r}: expected a job id")
    return int(limit), before, _one_of(query.get("state"), "state", STATES), _one_of(query.get("kind"), "kind", KINDS)


def _one_of(value: str | None, name: str, allowed: tuple[str, ...]) -> str | None:
    if value is not None and value not in allowed:
        raise HookError(400, f"{name} {clip(value, 40)!r}: expected one of {', '.join(allowed)}")
    return value


def _written(
    job: dict[str, Any], target: str, version: str | None, pick: Callable[[dict[str, Any]], T | None]
) -> dict[str, T]:
    """What `pick` takes from each values entry the job wrote for `target`, by release (the first of each; only
    `version`'s where one is named)."""
    found: dict[str, T] = {}
    for release in job["result"] or []:
        for values in release.get("values", []):
            taken = pick(values) if values["target"] == target else None
            if taken is not None and version in (None, str(release.get("version"))):
                found.setdefault(str(release.get("version")), taken)
    return found


@authorised
async def job_values(request: Request) -> Response:
    """A values file this job wrote for the target, from the job's own record: the chart's named in the path, else
    the first of the install (the release's own chart); the release's named by `?version=`, which may be left out
    only where one release of the job wrote such a file."""
    job = await find_job(request)
    if job is None:
        return error(404, "no such job")
    chart, version = request.path_params.get("chart"), request.query_params.get("version")

    def content(values: dict[str, Any]) -> str | None:
        if chart not in (None, values.get("chart_name", "hami")):
            return None
        return values.get("content") or None

    found = _written(job, request.path_params["target"], version, content)
    if len(found) > 1:
        return error(400, f"this job wrote such a file for {', '.join(found)}: name one with ?version=")
    for text in found.values():
        return PlainTextResponse(text, media_type="application/yaml")
    return error(404, "no values file for that target, chart and version in this job")


@authorised
async def job_file(request: Request) -> Response:
    """A file this job wrote beside its values for the target (the RBAC file, a chart's .tgz), kept in the store
    by its sha256; the release named by `?version=` where several of the job's wrote one of that name."""
    job = await find_job(request)
    if job is None:
        return error(404, "no such job")
    name = request.path_params["name"]

    def sha256(values: dict[str, Any]) -> str | None:
        return next((each["sha256"] for each in values.get("files", []) if each["name"] == name), None)

    found = _written(job, request.path_params["target"], request.query_params.get("version"), sha256)
    if len(set(found.values())) > 1:
        return error(400, f"this job wrote {name} for {', '.join(found)}: name one with ?version=")
    if not found:
        return error(404, "no such file for that target and version in this job")
    content = await request.app.state.store.file(next(iter(found.values())))
    if content is None:
        return error(404, f"{name} is no longer kept (service.keep_jobs_days): run the release again")
    media = "application/gzip" if name.endswith(".tgz") else "application/yaml"
    return Response(content, media_type=media, headers={"Content-Disposition": f'attachment; filename="{name}"'})


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    state = request.app.state
    checks = {
        "config": True,
        "store": await state.store.writable(),
        "runner": state.runner.running,
        "scheduler": state.scheduler is None or state.scheduler.running,
    }
    detail = {"webhooks": webhook_status(state.settings), "schedule": state.settings.schedule or "off"}
    return JSONResponse({**checks, "detail": detail}, status_code=200 if all(checks.values()) else 503)


def webhook_status(settings: MirrorSettings) -> str:
    hook = settings.webhook
    doors = (("ci", hook.secret or hook.secret_file), ("dockerhub", hook.dockerhub_token or hook.dockerhub_token_file))
    kinds = [name for name, on in doors if on]
    if not kinds:
        return "disabled: neither webhook.secret(_file) nor webhook.dockerhub_token(_file) is configured"
    return "enabled: " + ", ".join(kinds)


async def metrics(request: Request) -> Response:
    await request.app.state.store_success.refresh()
    return Response(request.app.state.metrics.render(), media_type="text/plain; version=0.0.4")


async def catch_up(app: Starlette) -> None:
    """At start, the schedule's latest tick of the last day where no job answers it (every replica was down at
    its time: a restart, a rollout): queued now under its own delivery id, so the replicas starting together
    make one job, rather than waiting for the next tick, hours away."""
    delivery = missed_tick(app.state.settings.schedule, datetime.datetime.now(datetime.UTC))
    if delivery is None:
        missed = False
    else:
        try:  # the store away at start: waited for as a tick waits, then the next tick
            missed = await _patiently(lambda: app.state.store.tick_missed(delivery))
        except Exception as exc:
            log.warning("could not look for a missed scheduled discovery: %s", clip(database.driver_reason(exc)))
            return
    if not missed:
        log.info("no scheduled discovery was missed while no replica ran")
        return
    log.info("scheduled discovery %s was missed while no replica ran: queuing it now", delivery)
    await queue_discovery(app, delivery)


async def queue_discovery(app: Starlette, delivery: str | None) -> None:
    """The schedule's discovery job (never bounded by service.max_queued_jobs: at most one is queued); `delivery`
    names the tick, which every replica queues. A job store out of reach is waited for a few minutes: the tick
    would otherwise be lost until the next one, hours later."""

    def waiting(reason: str, wait: float) -> None:
        log.warning(
            "scheduled discovery not queued yet: the job store cannot be reached (%s); again in %g s", reason, wait
        )

    try:
        job, created = await _patiently(lambda: app.state.store.enqueue("schedule", None, delivery), waiting)
    except Exception as exc:
        if not database.unavailable(exc):
            raise
        reason = database.driver_reason(exc)
        log.error("scheduled discovery %s not queued: the job store stayed out of reach (%s)", delivery, reason)
        return
    if created:
        app.state.runner.wake.set()
        log.info("scheduled discovery queued as job %s", job["id"])


async def _patiently(ask: Callable[[], Awaitable[T]], waiting: Callable[[str, float], None] | None = None) -> T:
    """`ask` of the job store, a store out of reach waited for (STORE_RETRY_WAITS, `waiting` told each wait with
    the driver's reason) and asked again; the last failure, or one that is not the store being away, raised."""
    for wait in STORE_RETRY_WAITS:
        try:
            return await ask()
        except Exception as exc:
            if not database.unavailable(exc):
                raise
            if waiting is not None:
                waiting(database.driver_reason(exc), wait)
            await asyncio.sleep(wait)
    return await ask()


def create_app(settings: MirrorSettings) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        app.state.settings = settings
        app.state.store = JobStore(store_url(settings))
        if not app.state.store.postgres:
            log.info("job store: SQLite, for one replica only (set database_url to PostgreSQL for several)")
        log.info("webhooks %s", webhook_status(settings))
        if settings.service.api_token_value() is None:
            log.warning("the job API is closed: no service.api_token configured")
        app.state.metrics = Metrics()
        app.state.store_success = StoreSuccess(app.state.metrics, app.state.store.last_success)
        app.state.runner = JobRunner(settings, app.state.store, app.state.metrics)
        app.state.runner.start()
        app.state.scheduler = None
        background = _start_schedule(app) if settings.schedule else []
        alive, runner = settings.service.heartbeat_file, app.state.runner
        if alive is not None:
            background.append(asyncio.ensure_future(beat(alive, running=lambda: runner.running)))
        try:
            yield
        finally:
            for task in background:
                task.cancel()
            if app.state.scheduler is not None:
                app.state.scheduler.shutdown(wait=False)
            await app.state.runner.stop(settings.shutdown_grace)
            app.state.store.close()
            log.info("service stopped cleanly")

    routes = [
        Route("/", page.status_page, methods=["GET"]),
        Route("/login", page.login_form, methods=["GET"]),
        Route("/login", page.login, methods=["POST"]),
        Route("/logout", page.logout, methods=["POST"]),
        Route("/hooks/ci", ci_hook, methods=["POST"]),
        Route("/hooks/dockerhub/{token}", dockerhub_hook, methods=["POST"]),
        Route("/jobs", list_jobs),
        Route("/jobs/{job_id}", get_job),
        Route("/jobs/{job_id}/values/{target}", job_values),
        Route("/jobs/{job_id}/values/{target}/{chart}", job_values),
        Route("/jobs/{job_id}/files/{target}/{name}", job_file),
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics),
    ]
    return Starlette(routes=routes, middleware=_doors(settings.service), lifespan=lifespan)


def _doors(service: ServiceSettings) -> list[Middleware]:
    """What every request passes first: which port answers which paths, then the body's deadline and errors."""
    return [
        Middleware(PortSplit, internal_port=service.internal_port),
        Middleware(Doors, body_seconds=service.body_seconds),
    ]


def _start_schedule(app: Starlette) -> list[asyncio.Future[None]]:
    """The schedule's ticks (APScheduler, `app.state.scheduler`) and, at once, the look for a tick missed while
    no replica ran: the task, cancelled at shutdown."""
    app.state.scheduler = start_scheduler(app.state.settings.schedule, functools.partial(queue_discovery, app))
    return [asyncio.ensure_future(catch_up(app))]


def store_url(settings: MirrorSettings) -> str:
    return settings.database_url or f"sqlite:///{settings.state_dir / 'mirror.db'}"


def unusable_state(settings: MirrorSettings) -> str | None:
    """Why the service could not keep its jobs, as one line (never the database password); None when it can:
    the state directory is created and written to, the database reached and its tables created."""
    try:
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=settings.state_dir):
            pass
    except OSError as exc:
        return f"state_dir {settings.state_dir}: cannot create it or write in it: {exc.strerror or exc}"
    url = store_url(settings)
    try:
        parsed = make_url(url)
    except Exception:  # its text would hold the URL, password and all
        return "database_url: not a database URL"
    try:
        JobStore(url).close()
    except Exception as exc:  # the driver's first line names the cause; the URL is shown without its password
        lines = str(getattr(exc, "orig", None) or exc).strip().splitlines() or [type(exc).__name__]
        reason = lines[0].replace(str(parsed.password), "***") if parsed.password else lines[0]
        shown = parsed.render_as_string(hide_password=True)
        return f"database {shown}: cannot open the job store: {clip(reason)}"
    return None


def unusable_proxy() -> str | None:
    """Why the environment's HTTPS_PROXY, HTTP_PROXY or NO_PROXY cannot be used, as one line; every job would fail."""
    try:
        environment_proxies()
    except ProxySettingError as exc:
        return str(exc)
    return None


def same_port(settings: MirrorSettings, port: int) -> str | None:
    """Why `--port` cannot be served beside the internal port, as one line; None when it can."""
    if settings.service.internal_port == port:
        return f"service.internal_port {port} is --port too: give the probes and /metrics a port of their own"
    return None


def nothing_to_serve(settings: MirrorSettings) -> str | None:
    """Why a service with this config could do nothing, as one line; None when it can: without a webhook secret
    or token, an API token or a schedule, every hook and the job API would answer 401 and no job would ever run,
    while /readyz said ready. On PostgreSQL it may: a replica that only runs the jobs other replicas queue."""
    hook, service = settings.webhook, settings.service
    doors = (hook.secret, hook.secret_file, hook.dockerhub_token, hook.dockerhub_token_file)
    if any(door is not None for door in (*doors, service.api_token, service.api_token_file)) or settings.schedule:
        return None
    if database.is_postgresql(settings.database_url):
        return None
    return (
        "nothing to serve: set webhook.secret_file (or webhook.secret, webhook.dockerhub_token(_file)), "
        "service.api_token(_file), or schedule"
    )


def serve(config: Path | None, host: str, port: int) -> int:
    logs.configure()
    try:
        settings = load_settings(config)
    except ConfigError as exc:  # a line a key: each its own record
        logs.error_lines(log, str(exc))
        return 2
    if not 0 < port < 65536:
        log.error("--port %d: expected 1-65535", port)
        return 2
    problem = same_port(settings, port)
    if problem is not None:
        log.error("%s", problem)
        return 2
    try:  # bound here, then served: a port that is taken or not ours to bind is one line, not uvicorn's traceback
        listening = listen(host, port, settings.service.internal_port)
    except ListenError as exc:
        log.error("%s", exc)
        return 2
    problem = nothing_to_serve(settings) or unusable_proxy() or unusable_state(settings)
    if problem is not None:
        log.error("%s", problem)
        for each in listening:
            each.close()
        return 2
    run(create_app(settings), settings.service, listening)
    return 0
