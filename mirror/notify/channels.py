"""Each platform's post: its message shape and its signature scheme.

- DingTalk (a custom robot with "加签"): `timestamp` in ms and `sign` = URL-encoded base64 of
  HMAC-SHA256(key=secret, msg="timestamp\\nsecret"), added to the webhook URL; a markdown message.
- Feishu/Lark (a custom bot with signature verification): `timestamp` in seconds and `sign` = base64 of
  HMAC-SHA256(key="timestamp\\nsecret", msg=""), in the JSON body; a text message.
- WeCom (a group robot): the key is in the URL; a markdown message.
- Slack (an incoming webhook): the URL is the secret; a text message in Slack's markup.
- A generic JSON webhook: the event as JSON, `X-Mirror-Timestamp` and `X-Mirror-Signature-256:
  sha256=<hex HMAC-SHA256(key=secret, msg="<timestamp>." + body)>`, so a receiver can refuse replays.

Every value an event carries (image names, registries' error messages, paths) is text from outside: each chat
gets it as plain text in its own format (`Style`), around mirror's own words and markup, so it cannot mention a
channel, hide a link behind a label or break out of mirror's bold headline or code span. The generic webhook's
JSON keeps each value exactly. The one link mirror writes, the service's job on its status page (`page`), is shown
as each chat makes a link: the address in the text (Slack, Feishu) or a markdown link (DingTalk, WeCom, whose
look-alikes would break the address's `?job=<id>`): second, after the headline, in a failure or drift, so that
a cut keeps it; as the values' line in a release mirrored.

Each chat's text is kept under its platform's limit (`TEXT_LIMITS`): past it, the line that does not fit is
clipped to the room left, the lines after it dropped, and one line says how many; the headline always stays.
The generic webhook's JSON carries everything.

DingTalk, Feishu and WeCom answer 200 with an error code in the body when they refuse: `refusal` reads it."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from mirror.notify.events import Drifted, Event, Failed, Mirrored
from mirror.untrusted import load_json


@dataclass(frozen=True, slots=True)
class Post:
    url: str
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True, slots=True)
class Style:
    """How a channel shows an event's values and command lines inside mirror's own words. Every value an event
    carries (image names, failure reasons from registries, paths) is text mirror did not write: it may hold the
    platform's markup, so `value` makes it plain text in that platform's format."""

    value: Callable[[str], str]
    command: Callable[[str], str]  # a `helm upgrade` line people copy
    link: Callable[[str], str]  # mirror's own link to its status page, as the chat makes a link


def _as_is(text: str) -> str:
    return text


def link_address(url: str) -> str:
    """`url` with every character that could end it or open markup inside a chat's text percent-encoded (spaces,
    quotes, parentheses, `<>`, `*`, `` ` ``, `|`, `\\`): the address stays the same page."""
    return urllib.parse.quote(url, safe="%:/?#[]@!$&'+,;=-._~")


def _one_line(text: str) -> str:
    """A value's line breaks as spaces: a value never starts a line of its own (a heading, a quote)."""
    return " ".join(text.splitlines())


# Slack's documented rule: `&`, `<` and `>` are its control characters (`<!channel>`, `<url|label>`) and are
# written as HTML entities wherever they are meant as text.
_SLACK_ENTITIES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})

# Tags and links (`<font>`, `<at user_id="all">`, WeCom's `<@userid>`, `[label](url)`) open markup on every
# chat but Slack, none of which documents an escape: such characters in a value are written as look-alikes that
# no renderer reads as markup.
_TAG_AND_LINK = {
    "[": "\N{FULLWIDTH LEFT SQUARE BRACKET}",
    "]": "\N{FULLWIDTH RIGHT SQUARE BRACKET}",
    "<": "\N{FULLWIDTH LESS-THAN SIGN}",
    ">": "\N{FULLWIDTH GREATER-THAN SIGN}",
}
# DingTalk's and WeCom's markdown also read emphasis `*`, a heading `#` and inline code
_MARKDOWN_LOOKALIKES = str.maketrans(
    _TAG_AND_LINK
    | {"*": "\N{ASTERISK OPERATOR}", "#": "\N{FULLWIDTH NUMBER SIGN}", "`": "\N{MODIFIER LETTER GRAVE ACCENT}"}
)
# Feishu's text message reads tags and links only
_FEISHU_LOOKALIKES = str.maketrans(_TAG_AND_LINK)
# a link's label ends at `]`; mirror's own address holds no other markup once `link_address` encoded it
_LABEL_LOOKALIKES = str.maketrans({key: _TAG_AND_LINK[key] for key in "[]"})


def slack_value(text: str) -> str:
    return _one_line(text).translate(_SLACK_ENTITIES)


def markdown_value(text: str) -> str:
    return _one_line(text).translate(_MARKDOWN_LOOKALIKES)


def feishu_value(text: str) -> str:
    return _one_line(text).translate(_FEISHU_LOOKALIKES)


def slack_link(url: str) -> str:
    """Slack links an address in the text; its `&` as the entity, as everywhere in Slack's text."""
    return slack_value(link_address(url))


def markdown_link(url: str) -> str:
    """DingTalk's and WeCom's documented link, `[label](url)`, labelled with the address itself: its `#` is not at
    a line's start, and an IPv6 host's brackets are written as look-alikes in the label only."""
    address = link_address(url)
    return f"[{address.translate(_LABEL_LOOKALIKES)}]({address})"


def feishu_link(url: str) -> str:
    """Feishu's text message links an address in it; only `<` and `>` would be markup, and are encoded."""
    return link_address(url)


# The most text a chat takes in one message, in UTF-8 bytes as the text travels in the JSON body (escapes and the
# look-alikes' extra bytes count). WeCom's markdown `content`: 4096 bytes; DingTalk's markdown `text`: 20000; Feishu:
# 20 KB for the whole request body, whose envelope around the text is under 200 bytes; Slack's `text`: 40000
# characters, kept well under so that a message stays readable. A post over its limit is refused with a 200 and an
# error code, which is not retried: the message would be lost.
TEXT_LIMITS = {"wecom": 4096, "dingtalk": 20000, "feishu": 20000, "slack": 12000}
MIN_CLIPPED = 80  # bytes: less of a line than this says too little to keep

PLAIN = Style(_as_is, _as_is, _as_is)
SLACK = Style(slack_value, slack_value, slack_link)
MARKDOWN = Style(markdown_value, lambda line: f"`{markdown_value(line)}`", markdown_link)
FEISHU = Style(feishu_value, feishu_value, feishu_link)


def headline(event: Event, style: Style = PLAIN) -> str:
    shown = style.value
    match event:
        case Mirrored():
            return f"mirror: {shown(event.release)} mirrored to {shown(event.target)}"
        case Failed():
            first, more = event.failures[0], _and_more(event.failures)
            return f"mirror: {shown(event.release)} FAILED: {shown(first.what)} -> {shown(first.where)}{more}"
        case Drifted():
            seen, more = event.drifts[0], _and_more(event.drifts)
            return f"mirror: {shown(event.release)} drift: {shown(seen.image)} at {shown(seen.target)}{more}"


def _and_more(items: tuple[object, ...]) -> str:
    """What a headline naming the first of `items` adds for the rest."""
    return f" and {len(items) - 1} more" if len(items) > 1 else ""


def lines(event: Event, style: Style = PLAIN) -> list[str]:
    """The message body, one fact a line. In the service, the job's page: first for a failure or drift (a cut
    keeps it), and in place of the values files for a release mirrored (the page lists each with its download)."""
    shown = style.value
    match event:
        case Mirrored():
            values = [style.link(event.page)] if event.page else [shown(values) for values in event.values]
            return [
                f"images: {', '.join(shown(image) for image in event.images)}"
                if event.images
                else "images: copied by an earlier run, verified by this one",
                f"moved: {event.bytes_moved / 1_000_000:.1f} MB",
                *(f"values: {each}" for each in values),
                *(style.command(line) for line in event.helm_lines),
            ]
        case Failed():
            failures = [f"{shown(f.what)} -> {shown(f.where)}: {shown(f.reason)}" for f in event.failures]
            return [*_details(event.page, style), *failures]
        case Drifted():
            drifts = [f"{shown(d.image)} -> {shown(d.target)}: {shown(d.reason)}" for d in event.drifts]
            return [*_details(event.page, style), *drifts]


def _details(page: str | None, style: Style) -> Iterator[str]:
    if page:
        yield f"details: {style.link(page)}"


def post_for(kind: str, url: str, secret: str | None, event: Event, now: float) -> Post:
    json_headers = {"Content-Type": "application/json"}
    if kind == "dingtalk":
        timestamp = str(int(now * 1000))
        signed = f"{url}{'&' if '?' in url else '?'}timestamp={timestamp}&sign={dingtalk_sign(secret or '', timestamp)}"
        message = {"title": headline(event, MARKDOWN), "text": _markdown(event, TEXT_LIMITS[kind])}
        return Post(signed, _json({"msgtype": "markdown", "markdown": message}), json_headers)
    if kind == "feishu":
        timestamp = str(int(now))
        body = {"timestamp": timestamp, "sign": feishu_sign(secret or "", timestamp), "msg_type": "text"}
        return Post(url, _json({**body, "content": {"text": _text(event, FEISHU, TEXT_LIMITS[kind])}}), json_headers)
    if kind == "wecom":
        content = _markdown(event, TEXT_LIMITS[kind])
        return Post(url, _json({"msgtype": "markdown", "markdown": {"content": content}}), json_headers)
    if kind == "slack":
        return Post(url, _json({"text": _text(event, SLACK, TEXT_LIMITS[kind])}), json_headers)
    return _webhook(url, secret or "", event, now)


def _text(event: Event, style: Style, limit: int | None = None) -> str:
    return fitted([headline(event, style), *lines(event, style)], "\n", limit)


def _markdown(event: Event, limit: int) -> str:
    return fitted([f"**{headline(event, MARKDOWN)}**", *lines(event, MARKDOWN)], "\n\n", limit)


def fitted(parts: list[str], separator: str, limit: int | None) -> str:
    """`parts` joined by `separator`, within `limit` bytes (`_weight`) where one is given: past it, the first part
    that does not fit is clipped to the room left (a long reason would otherwise leave none), the rest dropped,
    and one part says how many. The first part, the headline, always stays."""
    whole = separator.join(parts)
    if limit is None or _weight(whole) <= limit:
        return whole
    headline_part, *rest = parts
    kept, used, step = [headline_part], _weight(headline_part), _weight(separator)
    for index, part in enumerate(rest):
        after = len(rest) - index - 1
        reserve = step + _weight(_more(after)) if after else 0
        if used + step + _weight(part) + reserve <= limit:
            kept.append(part)
            used += step + _weight(part)
            continue
        room = limit - used - step - reserve
        if room < MIN_CLIPPED:
            return separator.join([*kept, _more(after + 1)])
        return separator.join([*kept, _clipped(part, room), *([_more(after)] if after else [])])
    return separator.join(kept)


def _clipped(text: str, room: int) -> str:
    """The longest start of `text` that, with an ellipsis, weighs at most `room` bytes."""
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if _weight(text[:middle] + "…") <= room:
            low = middle
        else:
            high = middle - 1
    return text[:low] + "…"


def _more(count: int) -> str:
    return f"... and {count} more"


def _weight(text: str) -> int:
    """`text`'s size in UTF-8 bytes as it travels in a JSON string: what a platform's limit counts, or more."""
    return len(json.dumps(text, ensure_ascii=False).encode()) - 2


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
    # `release` names every release the event concerns, comma-separated (drift: each of `drifts` lists its own)
    body = _json(
        {"event": event.kind, "release": event.release, **dataclasses.asdict(event), "text": _text(event, PLAIN)}
    )
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
