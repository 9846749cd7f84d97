"""The status page of `mirror serve` at `/`: the recent jobs, what each did to each image at each target, its
values files and their render proof, the next scheduled discovery and Docker Hub's pull budget. Server-rendered
HTML (Jinja2, autoescaped), read-only, no JavaScript; its inline CSS fits a phone.

Who may see it: whoever holds the job API's token (`service.api_token`), as for `/jobs`. A browser cannot send
an `Authorization` header from a link, so `POST /login` takes the token once, from a form, and answers with a
session cookie; the page, and the job API's routes (so the page's values links download in the browser),
accept that cookie as well as the bearer header.

- The cookie is not the token. It is `1.<expiry>.<nonce>.<HMAC-SHA256>` over the first three parts, keyed by
  an HMAC of the token (`session_key`): nothing kept on the server, nothing of the token learnt from a cookie,
  every replica that knows the token accepts it, and it ends on its own after `SESSION_SECONDS` (the Max-Age
  says the same to the browser). Changing the token ends every session at once. `POST /logout` deletes the
  cookie from the browser; a copy taken from it stays valid until its expiry, as a stateless cookie must.
- HttpOnly: no script reads it (the page has none, and a bug that let one in should not find the session).
  Secure when the request came over https (uvicorn believes `X-Forwarded-Proto` from a proxy on loopback), so
  a TLS-terminating proxy in front gets a cookie that never travels in clear; behind an ingress elsewhere,
  `service.secure_cookie: always` marks it Secure whatever the request's scheme looks like.
- SameSite=Strict: the cookie is sent only with requests that start on this site. Nothing the cookie
  authorises changes anything (the page and the job API's routes that take it are GETs that read), so a
  cross-site request has nothing to forge, and Strict makes sure it is not even authenticated; the login is a
  POST form on this site, which Strict does not hinder (following a link to the page from elsewhere shows
  the login once, which is the price). A forged login gains nothing without the token, and a forged logout
  only asks for the token again.
- The token is compared in constant time (`hmac.compare_digest`); a wrong one is answered 401 with the form
  and no hint. `service.api_token` must be long (the settings refuse a short one), so guessing it through the
  form is hopeless without a rate limit; a login's body is bounded as every other body is (`read_body`).
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import logging
import re
import secrets
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

import jinja2
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from mirror.service.hooks import HookError
from mirror.service.store import MAX_ERROR_CHARS, RUNNING
from mirror.untrusted import clip

log = logging.getLogger("mirror.service")

COOKIE = "mirror_session"
SESSION_SECONDS = 12 * 3600  # a login lasts half a day
LOGIN_MAX_BODY = 4096  # a form with one token field; the settings' tokens are far shorter
JOBS_SHOWN = 50  # jobs on one page, newest first; "older" pages on with ?before=<id>
SHOWN = 200  # characters of an image name, a reference or a note the page shows
_SESSION = re.compile(r"1\.([0-9]{1,12})\.([0-9a-f]{16})\.([0-9a-f]{64})")
_JOB_ID = re.compile(r"[0-9A-Za-z_-]{1,32}")
_FILENAME_UNSAFE = re.compile(r"[^0-9A-Za-z._-]")
# The page runs no script, loads nothing and is framed by no one; its only style is inline.
HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}

templates = Jinja2Templates(
    env=jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=True,  # every value from outside (image names, errors) is escaped
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
)


# -- the session cookie ----------------------------------------------------------------------------------


def session_key(token: bytes) -> bytes:
    """The key that signs sessions: derived from the token, so the cookie says nothing about it."""
    return hmac.new(token, b"mirror serve: status page session", hashlib.sha256).digest()


def _mac(token: bytes, message: str) -> str:
    return hmac.new(session_key(token), message.encode(), hashlib.sha256).hexdigest()


def new_session(token: bytes, now: float) -> str:
    """A session cookie's value that is valid until `now + SESSION_SECONDS`."""
    message = f"1.{int(now) + SESSION_SECONDS}.{secrets.token_hex(8)}"
    return f"{message}.{_mac(token, message)}"


def session_valid(token: bytes | None, value: str | None, now: float) -> bool:
    """A cookie this service signed with this token, not yet expired (nor further off than a session lasts)."""
    if token is None or value is None:
        return False
    parsed = _SESSION.fullmatch(value)
    if parsed is None:
        return False
    expires = int(parsed[1])
    if not now < expires <= now + SESSION_SECONDS + 60:
        return False
    message = value.rpartition(".")[0]
    return hmac.compare_digest(_mac(token, message), parsed[3])


def api_token(request: Request) -> bytes | None:
    """The API token, read again for each request, as the webhook secret is: a mounted Secret's file changes in
    place, and a token rotated or revoked there stops working at once, with the sessions signed with it."""
    token: bytes | None = request.app.state.settings.service.api_token_value()
    return token


def has_session(request: Request) -> bool:
    """Does the request carry a valid session cookie? (The job API's routes ask too.)"""
    return session_valid(api_token(request), request.cookies.get(COOKIE), time.time())


# -- the routes ------------------------------------------------------------------------------------------


async def login_form(request: Request) -> Response:
    return _login_page(request, 200)


async def login(request: Request) -> Response:
    from mirror.service.app import read_body  # app.py imports this module for its routes

    try:
        body = await read_body(request, LOGIN_MAX_BODY)
    except HookError as exc:
        return PlainTextResponse(str(exc), status_code=exc.status, headers=HEADERS)
    try:
        fields = parse_qs(body.decode("utf-8", "replace"), max_num_fields=5)
    except ValueError:  # more fields than a login form has
        return PlainTextResponse("not a login form", status_code=400, headers=HEADERS)
    given = fields.get("token", [""])[0].strip().encode()
    token = api_token(request)
    if token is None or not hmac.compare_digest(token, given):
        log.warning("status page: a login was refused")
        return _login_page(request, 401, refused=True)
    one = _job_asked(request)
    answer = RedirectResponse("/" if one is None else f"/?job={one}", status_code=303, headers=HEADERS)
    answer.set_cookie(
        COOKIE,
        new_session(token, time.time()),
        max_age=SESSION_SECONDS,
        path="/",
        secure=secure_cookie(request),
        httponly=True,
        samesite="strict",
    )
    return answer


async def logout(request: Request) -> Response:
    answer = RedirectResponse("/login", status_code=303, headers=HEADERS)
    answer.delete_cookie(COOKIE, path="/", secure=secure_cookie(request), httponly=True, samesite="strict")
    return answer


def secure_cookie(request: Request) -> bool:
    """Whether the session cookie is marked Secure (`service.secure_cookie`): always, never, or (auto) when
    the request came over https as uvicorn sees it, which believes X-Forwarded-Proto only from loopback."""
    setting = request.app.state.settings.service.secure_cookie
    return setting == "always" or (setting == "auto" and request.url.scheme == "https")


async def status_page(request: Request) -> Response:
    """The newest jobs (`?before=<id>` pages on), or one job alone (`?job=<id>`, a notification's link: found
    however many jobs came after it)."""
    one = _job_asked(request)
    if not has_session(request):
        return RedirectResponse(_login_address(one), status_code=303, headers=HEADERS)
    state = request.app.state
    if one is not None:
        found = await state.store.get(one)
        jobs, older, newest = [found] if found else [], None, True
    else:
        before = request.query_params.get("before")
        if before is not None and not _JOB_ID.fullmatch(before):
            before = None
        try:
            jobs, older = await state.store.page(JOBS_SHOWN, before)
        except LookupError:  # a cursor that names no job (any more): the newest page
            jobs, older = await state.store.page(JOBS_SHOWN)
        newest = before is not None
    now = time.time()
    context = {
        "now": when(now),
        "jobs": [job_view(job, now) for job in jobs],
        "one": one,
        "older": older,
        "newest": newest,
        "schedule": schedule_view(state),
        "budget": budget_view(jobs),
    }
    status = 404 if one is not None and not jobs else 200
    return templates.TemplateResponse(request, "status.html", context, status_code=status, headers=HEADERS)


def _job_asked(request: Request) -> str | None:
    """The job `?job=` names, if it is a job id at all (anything else is the ordinary page)."""
    asked = request.query_params.get("job")
    return asked if asked is not None and _JOB_ID.fullmatch(asked) else None


def _login_address(job_id: str | None) -> str:
    """The login form, keeping the job a link asked for: the form posts to its own address, and the login
    sends the browser on to that job (a job id only: the login redirects nowhere else)."""
    return "/login" if job_id is None else f"/login?job={job_id}"


def _login_page(request: Request, status: int, refused: bool = False) -> Response:
    context = {"refused": refused, "closed": api_token(request) is None}
    return templates.TemplateResponse(request, "login.html", context, status_code=status, headers=HEADERS)


# -- what the page shows ---------------------------------------------------------------------------------


def when(moment: float | None) -> str:
    if moment is None:
        return "-"
    stamp = datetime.datetime.fromtimestamp(moment, datetime.UTC)
    return stamp.strftime("%Y-%m-%d %H:%M:%SZ")


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def target_state(target: dict[str, Any], dry_run: bool) -> tuple[str, str | None]:
    """copied | verified | drift | failed | planned, and why when it is not a verified copy."""
    error = target.get("error")
    reason = clip(str(error), MAX_ERROR_CHARS) if error else None
    action = target.get("action")
    if target.get("verified"):
        return ("copied" if action == "copied" else "verified"), None
    if action == "planned" or (dry_run and not error):
        return "planned", reason
    if reason is not None and reason.startswith("drift:"):
        return "drift", reason
    return "failed", reason or "not verified"


def job_view(job: dict[str, Any], now: float) -> dict[str, Any]:
    started, finished = job["started_at"], job["finished_at"]
    took = None
    if started is not None:
        took = duration(max((finished if finished is not None else now) - started, 0.0))
    releases = [release_view(job["id"], release) for release in job["result"] or [] if isinstance(release, dict)]
    return {
        "id": job["id"],
        "kind": job["kind"],
        "state": job["state"],
        "versions": ", ".join(clip(str(v), 80) for v in job["versions"]) if job["versions"] else "discovery",
        "created": when(job["created_at"]),
        "started": when(started),
        "finished": when(finished),
        "duration": took,
        "running": job["state"] == RUNNING,
        "attempts": job["attempts"],
        "error": clip(job["error"], MAX_ERROR_CHARS) if job["error"] else None,
        "releases": releases,
    }


def release_view(job_id: str, release: dict[str, Any]) -> dict[str, Any]:
    dry_run = bool(release.get("dry_run"))
    rows: list[dict[str, str | None]] = []
    for image in release.get("images") or []:
        name, source = clip(str(image.get("name", "?")), SHOWN), clip(str(image.get("source", "")), SHOWN)
        image_error = clip(str(image["error"]), MAX_ERROR_CHARS) if image.get("error") else None
        if image_error is not None or not image.get("targets"):
            reason = image_error or "no target was reached"
            rows.append(
                {"image": name, "source": source, "target": "-", "reference": "", "state": "failed", "reason": reason}
            )
        for target in image.get("targets") or []:
            state, why = target_state(target, dry_run)
            rows.append(
                {
                    "image": name,
                    "source": source,
                    "target": clip(str(target.get("target", "?")), SHOWN),
                    "reference": clip(str(target.get("reference", "")), SHOWN),
                    "state": state,
                    "reason": why,
                }
            )
    return {
        "version": clip(str(release.get("version", "?")), 80),
        "ok": bool(release.get("ok")),
        "rows": rows,
        "values": [
            values_view(job_id, str(release.get("version", "")), values) for values in release.get("values") or []
        ],
        "errors": [clip(str(error), MAX_ERROR_CHARS) for error in release.get("errors") or []],
    }


def job_url(job_id: str) -> str:
    """Where a person sees one job: the status page showing its card alone (its releases' images and targets with
    each reason, its values files per target and chart with their downloads and render proof), however many jobs
    have run since its message was posted."""
    return f"/?job={quote(job_id, safe='')}"


def values_url(job_id: str, version: str, target: str, chart: str) -> str:
    """Where the job API serves one values file; the version names the release (a discovery job has several)."""
    return _job_url(job_id, "values", target, chart, version)


def file_url(job_id: str, version: str, target: str, name: str) -> str:
    """Where the job API serves a file written beside the values (the RBAC file, a chart's .tgz)."""
    return _job_url(job_id, "files", target, name, version)


def _job_url(job_id: str, kind: str, target: str, name: str, version: str) -> str:
    path = "/".join(quote(part, safe="") for part in (job_id, kind, target, name))
    return f"/jobs/{path}?version={quote(version, safe='')}"


def values_view(job_id: str, version: str, values: dict[str, Any]) -> dict[str, Any]:
    target, chart = str(values.get("target", "")), str(values.get("chart_name", "hami"))
    proof = values.get("proof")
    return {
        "target": clip(target, SHOWN),
        "chart": clip(chart, SHOWN),
        "chart_version": clip(str(values.get("chart_version") or ""), 80),
        # the download the job API serves from the job's own record (rows from before it kept the text: none)
        "url": values_url(job_id, version, target, chart) if values.get("content") else None,
        "filename": _FILENAME_UNSAFE.sub("_", f"{job_id[:12]}-{version}-{target}-{chart}-values.yaml")[:120],
        "warnings": [clip(str(w), SHOWN) for w in values.get("warnings") or []],
        "proof": proof_view(proof) if isinstance(proof, dict) else None,
        # written beside the values (the RBAC file, a chart's .tgz), served from the store
        "files": [
            {
                "name": clip(str(each.get("name", "?")), SHOWN),
                "url": file_url(job_id, version, target, str(each["name"])),
            }
            for each in values.get("files") or []
            if isinstance(each, dict) and each.get("name")
        ],
    }


def proof_view(proof: dict[str, Any]) -> dict[str, Any]:
    return {
        "renderer": clip(str(proof.get("renderer", "?")), 80),
        "ok": bool(proof.get("ok")),
        "images": [
            {
                "image": clip(str(image.get("image", "?")), SHOWN),
                "from": clip(str(image.get("from", "")), SHOWN),
                "verdict": clip(str(image.get("verdict", "?")), 40),
                "note": clip(str(image.get("note", "")), SHOWN),
            }
            for image in proof.get("images") or []
            if isinstance(image, dict)
        ],
    }


def schedule_view(state: Any) -> dict[str, Any]:
    """The configured cron expression and the discovery job's next run, from APScheduler."""
    expression = state.settings.schedule
    if not expression or state.scheduler is None:
        return {"expression": None, "next": None}
    job = state.scheduler.get_job("discovery")
    upcoming = getattr(job, "next_run_time", None) if job is not None else None
    return {"expression": expression, "next": when(upcoming.timestamp()) if upcoming is not None else None}


def budget_view(jobs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Docker Hub's pull budget as the newest job that read it recorded it (the metrics' gauge is set from the
    same reports, and cannot tell "none left" from "never read")."""
    for job in jobs:  # newest first
        for release in reversed(job["result"] or []):
            limit = release.get("source_rate_limit") if isinstance(release, dict) else None
            if isinstance(limit, dict) and isinstance(limit.get("remaining"), int):
                return {
                    "remaining": limit["remaining"],
                    "limit": limit.get("limit") if isinstance(limit.get("limit"), int) else None,
                    "window": limit.get("window_seconds") if isinstance(limit.get("window_seconds"), int) else None,
                    "job": job["id"],
                    "at": when(job["finished_at"]),
                }
    return None
