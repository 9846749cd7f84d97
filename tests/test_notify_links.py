"""The link in the service's messages leads a person to the job on the status page, not to the job API's JSON:
each chat's link is followed to the running `mirror serve` and must answer its HTML page (the login form without a
session, the job's card with the release's values with one). The generic webhook's JSON gives programs each values
file's download. The link keeps its `?job=<id>` in every chat's format and survives a chat's cut. Each post goes to
a real receiver on loopback that checks the platform's signature, as in tests/test_notify.py."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
import yaml

from mirror.demo.localregistry import LocalRegistry
from mirror.demo.ports import free_port
from mirror.notify.events import Failed, Failure
from mirror.notify.send import notify
from mirror.service.page import COOKIE, values_url
from mirror.settings import NotifyChannelSettings, NotifySettings
from tests.receivers import Receiver, receiver
from tests.test_crash import wait_for
from tests.test_notify import KINDS, channels, secret_of, token_of
from tests.test_notify_messages import LIMITS
from tests.test_service import API_TOKEN, AUTH, Service, service_config
from tests.test_sync import VERSION, seed_release

ABSENT = "v2.12.0"  # not at the source: its job fails
CHATS = tuple(LIMITS)
MARKDOWN_LINK = re.compile(r"\[[^\[\]]*\]\((http[^()\s]+)\)")  # DingTalk's and WeCom's `[label](url)`
BARE_LINK = re.compile(r"https?://\S+")


@pytest.fixture
def receivers() -> Iterator[dict[str, Receiver]]:
    with ExitStack() as stack:
        yield {kind: stack.enter_context(receiver(kind, secret_of(kind), token_of(kind))) for kind in KINDS}


def links_in(kind: str, text: str) -> list[str]:
    """The addresses a chat makes clickable in a message's text, as its platform reads them."""
    if kind in ("dingtalk", "wecom"):
        return MARKDOWN_LINK.findall(text)
    found = BARE_LINK.findall(text)
    return [link.replace("&amp;", "&") for link in found] if kind == "slack" else found


def the_link(kind: str, text: str, public: str) -> str:
    (link,) = [each for each in links_in(kind, text) if each.startswith(public + "/")]
    return link


def about(text: str) -> str:
    """Which job's release a message is about, from its headline (a chat's JSON does not say)."""
    return ABSENT if f"mirror: {ABSENT} " in text else VERSION


def job_card(html: str, job_id: str) -> str:
    """The status page's section for one job: from its `id="job-<id>"` to the section's end."""
    start = html.index(f'id="job-{job_id}"')
    return html[start : html.index("</section>", start)]


def test_each_chats_link_to_a_mirrored_release_opens_the_status_page_at_the_job_with_its_values(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    receivers: dict[str, Receiver],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The link was `<public_url>/jobs/<id>`: the job API, which answers a person's click with a JSON 401, or with
    the job's JSON when the browser holds the page's session."""
    seed_release(source)
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    notified = {"channels": channels(monkeypatch, tmp_path, receivers), "public_url": public + "/"}
    running = Service(service_config(tmp_path, source, target, notify=notified), port)
    running.start()
    try:
        mirrored = running.wait_done(running.signed({"version": VERSION}).json()["id"])
        failed = running.wait_done(running.signed({"version": ABSENT}).json()["id"])
        wait_for(lambda: all(len(each.received) == 2 for each in receivers.values()), 60)

        def reach(link: str) -> str:  # the service as the test reaches it (start() may have moved its port)
            assert link.startswith(public + "/"), link
            return running.url + link.removeprefix(public)

        assert mirrored["state"] == "succeeded" and failed["state"] == "failed", mirrored["error"]
        by_release = {kind: {about(m.text()): m for m in each.received} for kind, each in receivers.items()}
        clicked = the_link("slack", by_release["slack"][VERSION].text(), public)

        # no session (a chat's link carries no bearer token, and a click from a chat's web page not the page's
        # SameSite=Strict cookie): the page's login form, HTML, where the job API answered a JSON 401
        cold = httpx.get(reach(clicked), follow_redirects=True, timeout=10)
        assert cold.status_code == 200 and cold.headers["content-type"].startswith("text/html"), cold.text[:300]
        assert cold.url.path == "/login" and 'name="token"' in cold.text
        assert cold.url.query == f"job={mirrored['id']}".encode()  # the form posts there; the login goes on to it

        # with the page's session: the job's card, its release and its values file per target and chart
        login = httpx.post(f"{running.url}/login", data={"token": API_TOKEN}, timeout=10)
        session = {COOKIE: login.cookies[COOKIE]}
        shown = httpx.get(reach(clicked), cookies=session, timeout=10)
        assert shown.status_code == 200 and shown.headers["content-type"].startswith("text/html"), shown.text[:300]
        page_link = f"{public}/?job={mirrored['id']}"
        assert clicked == page_link  # the page shows the job's card alone, `id="job-<id>"`
        assert shown.text.count('<section class="card job"') == 1
        card = job_card(shown.text, mirrored["id"])
        download = values_url(mirrored["id"], VERSION, "t0", "hami")
        assert VERSION in card and "Values for <strong>t0</strong> (hami" in card and f'href="{download}"' in card
        written = httpx.get(f"{running.url}{download}", cookies=session, timeout=10)
        assert written.status_code == 200 and written.headers["content-type"].startswith("application/yaml")
        assert yaml.safe_load(written.text)["devicePlugin"]["image"]["repository"] == "mirrored/hami"

        for kind in CHATS:  # every chat shows that link, in its own format
            text = by_release[kind][VERSION].text()
            assert f"{VERSION} mirrored to t0" in text, (kind, text)
            assert the_link(kind, text, public) == page_link, (kind, text)
            assert "/jobs/" not in text and API_TOKEN not in text, (kind, text)

        # the generic webhook: the same page for people, and the values file's download for programs
        hook = by_release["webhook"][VERSION].json()
        assert hook["page"] == page_link and f"values: {page_link}" in hook["text"]
        assert hook["values"] == [public + download]
        fetched = httpx.get(reach(hook["values"][0]), headers=AUTH, timeout=10)
        assert fetched.status_code == 200 and fetched.text == written.text

        # a failed job's message leads to its card too, where each reason is shown
        failed_link = f"{public}/?job={failed['id']}"
        for kind in CHATS:
            text = by_release[kind][ABSENT].text()
            assert f"{ABSENT} FAILED: " in text and the_link(kind, text, public) == failed_link, (kind, text)
        assert by_release["webhook"][ABSENT].json()["page"] == failed_link
        card = job_card(httpx.get(reach(failed_link), cookies=session, timeout=10).text, failed["id"])
        assert ABSENT in card and 'class="badge failed"' in card
    finally:
        assert running.stopped_cleanly()


def test_the_jobs_link_keeps_its_anchor_in_every_chat_and_survives_each_chats_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, receivers: dict[str, Receiver]
) -> None:
    """A failure too long for any chat keeps its headline and, second, the job's link: the cut drops failure lines
    from the end. The markdown chats' look-alikes would have broken the address."""
    page_link = "https://mirror.example.com/?job=Ab3_x-9"
    reason = "denied: <repository> [name] *unknown* # " * 8
    failures = tuple(Failure(f"image-{n:02d}", target, reason) for n in range(60) for target in ("t0", "t1"))
    event = Failed(VERSION, failures, page_link)
    settings = NotifySettings(
        channels=[NotifyChannelSettings.model_validate(c) for c in channels(monkeypatch, tmp_path, receivers)],
        timeout=10,
        attempts=1,
        deadline=30,
    )
    sent = asyncio.run(notify(settings, [event]))
    assert [each.error for each in sent] == [None] * len(KINDS), sent
    for kind in CHATS:
        (message,) = receivers[kind].received
        text = message.text()
        assert message.signed and len(text.encode()) <= LIMITS[kind], kind
        separator = "\n\n" if kind in ("dingtalk", "wecom") else "\n"
        headline, details, *_, more = text.split(separator)
        assert f"{VERSION} FAILED: image-00 -> t0 and 119 more" in headline, kind
        assert details.startswith("details: ") and links_in(kind, details) == [page_link], (kind, details)
        assert more.startswith("... and ") and more.endswith(" more"), kind
    webhook = receivers["webhook"].received[0].json()
    assert webhook["page"] == page_link and len(webhook["failures"]) == len(failures)
