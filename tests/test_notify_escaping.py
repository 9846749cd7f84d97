"""Text from outside (registry error messages, image names from a chart, paths) reaches each chat platform as
plain text in that platform's format: it cannot ping a channel, hide a link behind a label, add a heading or
break out of mirror's own bold headline and code spans, while mirror's own formatting still works. Each post
goes to a real receiver on loopback, as in tests/test_notify.py."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from mirror.notify.events import Event, Failed, Failure, Mirrored
from mirror.notify.send import notify
from mirror.settings import NotifyChannelSettings, NotifySettings
from tests.receivers import Receiver, receiver

KINDS = ("dingtalk", "feishu", "wecom", "slack", "webhook")
SIGNED = ("dingtalk", "feishu", "webhook")

HOSTILE = (
    "denied: <!channel> <https://evil.example/login|re-authenticate here> & "
    '[re-authenticate](https://evil.example/login) ![x](https://evil.example/p.png) <at user_id="all"></at> '
    "<@all> <font color=red>urgent</font> **loud** *quiet* `code`\n# a heading\n> a quote"
)
HOSTILE_NAME = "webui-be[click](https://evil.example)"
# the look-alikes DingTalk, WeCom and Feishu get, mapped back to what they stand for
LOOKALIKES = str.maketrans(
    {
        "\N{FULLWIDTH LEFT SQUARE BRACKET}": "[",
        "\N{FULLWIDTH RIGHT SQUARE BRACKET}": "]",
        "\N{FULLWIDTH LESS-THAN SIGN}": "<",
        "\N{FULLWIDTH GREATER-THAN SIGN}": ">",
        "\N{ASTERISK OPERATOR}": "*",
        "\N{FULLWIDTH NUMBER SIGN}": "#",
        "\N{MODIFIER LETTER GRAVE ACCENT}": "`",
    }
)


@pytest.fixture
def chats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[NotifySettings, dict[str, Receiver]]]:
    """A real receiver per platform, and settings with one channel for each."""
    with ExitStack() as stack:
        made = {kind: stack.enter_context(receiver(kind, f"SEC-{kind}-0123456789", f"tok{kind}")) for kind in KINDS}
        channels = []
        for kind, each in made.items():
            monkeypatch.setenv(f"ESC_{kind.upper()}_URL", each.url)
            signing = {"secret_file": _secret(tmp_path, kind, each.secret)} if kind in SIGNED else {}
            channels.append(
                NotifyChannelSettings.model_validate(
                    {"name": kind, "kind": kind, "url_env": f"ESC_{kind.upper()}_URL", **signing}
                )
            )
        yield NotifySettings(channels=channels, timeout=10, attempts=1, deadline=30), made


def _secret(tmp_path: Path, kind: str, secret: str) -> str:
    path = tmp_path / f"{kind}.secret"
    path.write_text(secret)
    return str(path)


def _post(chats: tuple[NotifySettings, dict[str, Receiver]], event: Event) -> dict[str, str]:
    settings, made = chats
    sent = asyncio.run(notify(settings, [event]))
    assert [each.error for each in sent] == [None] * len(made), sent
    assert all(len(each.received) == 1 and each.received[0].signed for each in made.values())
    return {kind: each.received[0].text() for kind, each in made.items()}


def _one_line(text: str) -> str:
    return " ".join(text.splitlines())


FAILED = Failed("v2.10.0", (Failure(HOSTILE_NAME, "t0", HOSTILE),))
FAILED_LINE = f"{HOSTILE_NAME} -> t0: {_one_line(HOSTILE)}"  # as people should read it


def test_slack_gets_outside_text_with_its_control_characters_as_entities(
    chats: tuple[NotifySettings, dict[str, Receiver]],
) -> None:
    slack = _post(chats, FAILED)["slack"]
    assert re.findall(r"<[^<>]*>", slack) == []  # no control sequence: no @channel, no labelled link
    assert "&lt;!channel&gt;" in slack and " &amp; " in slack
    shown = slack.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")  # as Slack displays it
    assert FAILED_LINE in shown


@pytest.mark.parametrize("kind", ["dingtalk", "wecom"])
def test_markdown_chats_get_outside_text_without_markup_inside_mirrors_bold_headline(
    kind: str, chats: tuple[NotifySettings, dict[str, Receiver]]
) -> None:
    text = _post(chats, FAILED)[kind]
    headline, *rest = text.split("\n\n")
    assert headline.startswith("**mirror: v2.10.0 FAILED: ") and headline.endswith("**")  # mirror's own bold
    for part in (headline[2:-2], *rest):
        assert not set(part) & set("[]<*#`\n"), part  # no link, tag, mention, emphasis, heading, code, line
    assert FAILED_LINE in text.translate(LOOKALIKES)


def test_feishu_gets_outside_text_without_mentions_tags_or_links(
    chats: tuple[NotifySettings, dict[str, Receiver]],
) -> None:
    feishu = _post(chats, FAILED)["feishu"]
    assert "<at" not in feishu and not set(feishu) & set("[]<")  # no mention of everyone, no tag, no link
    assert FAILED_LINE in feishu.translate(LOOKALIKES)


def test_the_generic_webhook_keeps_outside_text_exactly(chats: tuple[NotifySettings, dict[str, Receiver]]) -> None:
    _post(chats, FAILED)
    webhook = chats[1]["webhook"].received[0].json()  # data for a program, not markup
    assert webhook["failures"][0] == {"what": HOSTILE_NAME, "where": "t0", "reason": HOSTILE}


def test_mirrors_own_bold_and_code_span_hold_around_hostile_names(
    chats: tuple[NotifySettings, dict[str, Receiver]],
) -> None:
    helm = "helm upgrade --install web`ui **x** charts/webui -f /out/t0/v2.10.0/values.yaml"
    event = Mirrored("v2.10.0", "t0", ("hami", "<!here>", "*x* [a](b)"), 2_000_000, ("/out/t0/values.yaml",), (helm,))
    texts = _post(chats, event)

    for kind in ("dingtalk", "wecom"):
        paragraphs = texts[kind].split("\n\n")
        assert paragraphs[0] == "**mirror: v2.10.0 mirrored to t0**", kind
        command = paragraphs[-1]  # one code span from its first character to its last
        assert command.startswith("`helm upgrade --install web") and command.endswith("values.yaml`"), kind
        assert command.count("`") == 2 and "*" not in command, kind
        assert command[1:-1].translate(LOOKALIKES) == helm, kind
        assert "values: /out/t0/values.yaml" in paragraphs, kind
        images = next(p for p in paragraphs if p.startswith("images: "))
        assert not set(images) & set("[]<*"), (kind, images)
    assert "images: hami, &lt;!here&gt;, *x* [a](b)" in texts["slack"]
    assert f"\n{helm}" in texts["slack"] and "<" not in texts["feishu"]
