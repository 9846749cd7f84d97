"""The on-call platforms' webhook receivers, on loopback, each checking its platform's signature scheme as the
platform documents it (written here from those documents, not from mirror's code) and answering as it does."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import json
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.support import http_server

MAX_SKEW = 3600  # DingTalk and Feishu refuse a timestamp more than an hour from their clock


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    signed: bool  # did the signature hold?

    def json(self) -> Any:
        return json.loads(self.body)

    def text(self) -> str:
        """The message as people read it, whatever the platform's shape."""
        doc = self.json()
        for path in (("markdown", "text"), ("markdown", "content"), ("content", "text"), ("text",)):
            value: Any = doc
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            if isinstance(value, str):
                return value
        return ""


@dataclass
class Receiver:
    kind: str
    secret: str
    token: str
    delay: float = 0.0
    url: str = ""
    received: list[Received] = field(default_factory=list)
    arrived: int = 0  # posts whose body arrived, counted before any delay

    def check(self, path: str, headers: dict[str, str], body: bytes) -> bool:
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(path).query))
        now = time.time()
        if self.kind == "dingtalk":
            stamp = query.get("timestamp", "0")
            expected = base64.b64encode(
                hmac.new(self.secret.encode(), f"{stamp}\n{self.secret}".encode(), hashlib.sha256).digest()
            ).decode()
            fresh = abs(now - int(stamp) / 1000) < MAX_SKEW
            return query.get("access_token") == self.token and query.get("sign") == expected and fresh
        if self.kind == "feishu":
            doc = json.loads(body)
            stamp = str(doc.get("timestamp", "0"))
            key = f"{stamp}\n{self.secret}".encode()
            expected = base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()
            return self.token in path and doc.get("sign") == expected and abs(now - int(stamp)) < MAX_SKEW
        if self.kind == "webhook":
            stamp = headers.get("x-mirror-timestamp", "0")
            mac = hmac.new(self.secret.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
            return headers.get("x-mirror-signature-256") == f"sha256={mac}" and abs(now - int(stamp)) < 300
        if self.kind == "wecom":
            return query.get("key") == self.token
        return self.token in path  # slack: the URL is the secret

    def answer(self, signed: bool) -> tuple[int, bytes]:
        if self.kind == "dingtalk":
            doc = {"errcode": 0, "errmsg": "ok"} if signed else {"errcode": 310000, "errmsg": "sign not match"}
            return 200, json.dumps(doc).encode()
        if self.kind == "feishu":
            doc = {"code": 0, "msg": "success"} if signed else {"code": 19021, "msg": "sign match fail"}
            return 200, json.dumps(doc).encode()
        if self.kind == "wecom":
            doc = {"errcode": 0, "errmsg": "ok"} if signed else {"errcode": 93000, "errmsg": "invalid webhook url"}
            return 200, json.dumps(doc).encode()
        if self.kind == "slack":
            return (200, b"ok") if signed else (404, b"no_service")
        return (204, b"") if signed else (401, b"bad signature")


def _path_for(kind: str, token: str) -> str:
    return {
        "dingtalk": f"/robot/send?access_token={token}",
        "feishu": f"/open-apis/bot/v2/hook/{token}",
        "wecom": f"/cgi-bin/webhook/send?key={token}",
        "slack": f"/services/T000/B000/{token}",
        "webhook": "/mirror-events",
    }[kind]


@contextmanager
def receiver(kind: str, secret: str, token: str, delay: float = 0.0) -> Iterator[Receiver]:
    state = Receiver(kind, secret, token, delay)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            state.arrived += 1
            if state.delay:
                time.sleep(state.delay)
            headers = {k.lower(): v for k, v in self.headers.items()}
            signed = state.check(self.path, headers, body)
            state.received.append(Received(self.path, headers, body, signed))
            status, answer = state.answer(signed)
            self.send_response(status)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    with http_server(Handler) as server:
        state.url = f"http://127.0.0.1:{server.server_address[1]}{_path_for(kind, token)}"
        yield state
