"""Each platform's post: its message shape and its signature scheme.

- DingTalk (a custom robot with "加签"): `timestamp` in ms and `sign` = URL-encoded base64 of
  HMAC-SHA256(key=secret, msg="timestamp\\nsecret"), added to the webhook URL; a markdown message.
- Feishu/Lark (a custom bot with signature verification): `timestamp` in seconds and `sign` = base64 of
  HMAC-SHA256(key="timestamp\\nsecret", msg=""), in the JSON body; a text message.
- WeCom (a group robot): the key is in the URL; a markdown message.
- Slack (an incoming webhook): the URL is the secret; a text message in Slack's markup.
- A generic JSON webhook: the event as JSON, `X-Mirror-Timestamp` and `X-Mirror-Signature-256:
  sha256=<hex HMAC-SHA256(key=secret, msg="<timestamp>." + body)>`, so a receiver can refuse replays.

DingTalk, Feishu and WeCom answer 200 with an error code in the body when they refuse: `refusal` reads it."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

from mirror.notify.events import Drifted, Event, Failed, Mirrored
from mirror.untrusted import load_json


@dataclass(frozen=True, slots=True)
class Post:
    url: str
    body: bytes
    headers: dict[str, str]


def headline(event: Event) -> str:
    match event:
        case Mirrored():
            return f"mirror: {event.release} mirrored to {event.target}"
        case Failed():
            first = event.failures[0]
            more = f" and {len(event.failures) - 1} more" if len(event.failures) > 1 else ""
            return f"mirror: {event.release} FAILED: {first.what} -> {first.where}{more}"
        case Drifted():
            return f"mirror: {event.release} drift: {event.image} at {event.target}"


def lines(event: Event) -> list[str]:
    """The message body, one fact a line."""
    match event:
        case Mirrored():
            return [
                f"images: {', '.join(event.images)}",
                f"moved: {event.bytes_moved / 1_000_000:.1f} MB",
                *(f"values: {v}" for v in event.values),
                *event.helm_lines,
            ]
        case Failed():
            return [f"{f.what} -> {f.where}: {f.reason}" for f in event.failures]
        case Drifted():
            return [f"{event.image} -> {event.target}: {event.reason}"]


def post_for(kind: str, url: str, secret: str | None, event: Event, now: float) -> Post:
    title, body_lines = headline(event), lines(event)
    text = "\n".join([title, *body_lines])
    shown = [f"`{line}`" if line.startswith("helm ") else line for line in body_lines]
    markdown = "\n\n".join([f"**{title}**", *shown])
    json_headers = {"Content-Type": "application/json"}
    if kind == "dingtalk":
        timestamp = str(int(now * 1000))
        signed = f"{url}{'&' if '?' in url else '?'}timestamp={timestamp}&sign={dingtalk_sign(secret or '', timestamp)}"
        message = {"msgtype": "markdown", "markdown": {"title": title, "text": markdown}}
        return Post(signed, _json(message), json_headers)
    if kind == "feishu":
        timestamp = str(int(now))
        body = {"timestamp": timestamp, "sign": feishu_sign(secret or "", timestamp), "msg_type": "text"}
        return Post(url, _json({**body, "content": {"text": text}}), json_headers)
    if kind == "wecom":
        return Post(url, _json({"msgtype": "markdown", "markdown": {"content": markdown}}), json_headers)
    if kind == "slack":
        return Post(url, _json({"text": text}), json_headers)
    return _webhook(url, secret or "", event, now)


def dingtalk_sign(secret: str, timestamp: str) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256).digest()
    return urllib.parse.quote_plus(base64.b64encode(digest))


def feishu_sign(secret: str, timestamp: str) -> str:
    digest = hmac.new(f"{timestamp}\n{secret}".encode(), b"", hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def webhook_signature(secret: str, timestamp: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def _webhook(url: str, secret: str, event: Event, now: float) -> Post:
    timestamp = str(int(now))
    text = "\n".join([headline(event), *lines(event)])
    body = _json({"event": event.kind, **dataclasses.asdict(event), "text": text})
    headers = {
        "Content-Type": "application/json",
        "X-Mirror-Event": event.kind,
        "X-Mirror-Timestamp": timestamp,
        "X-Mirror-Signature-256": webhook_signature(secret, timestamp, body),
    }
    return Post(url, body, headers)


def refusal(kind: str, status: int, body: bytes) -> str | None:
    """Why the platform refused the post, or None when it took it."""
    if not 200 <= status < 300:
        return f"HTTP {status}"
    if kind not in ("dingtalk", "feishu", "wecom"):
        return None
    try:
        answer: Any = load_json(body)
    except ValueError:
        return "an answer that is not JSON"
    if not isinstance(answer, dict):
        return "an answer that is not a JSON object"
    code = answer.get("errcode", answer.get("code", answer.get("StatusCode", 0)))
    if code in (0, None):
        return None
    message = answer.get("errmsg") or answer.get("msg") or answer.get("StatusMessage") or ""
    return f"error {code}: {str(message)[:200]}"


def _json(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
