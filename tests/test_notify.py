"""Notifications against real receivers on loopback, one per platform, each checking its own signature scheme:
a release newly mirrored posts one message per channel with the `helm upgrade` line; a no-op posts nothing; a
failing run posts its reason; a receiver that is down, slow or refusing neither fails nor holds up the run."""

from __future__ import annotations

import asyncio
import http.server
import logging
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.ports import free_port
from mirror.demo.sample import push_single
from mirror.notify.events import Failed, Failure
from mirror.notify.send import notify
from mirror.oci import Manifest
from mirror.registry import RegistryClient
from mirror.service.page import values_url
from mirror.settings import NotifyChannelSettings, NotifySettings
from tests.receivers import Receiver, receiver
from tests.support import http_server, manifest_bytes, with_client, write_config
from tests.test_crash import wait_for
from tests.test_replicas import LEASE
from tests.test_service import Service, service_config
from tests.test_sync import VERSION, seed_release

KINDS = ("dingtalk", "feishu", "wecom", "slack", "webhook")
SIGNED = ("dingtalk", "feishu", "webhook")


def secret_of(kind: str) -> str:
    return f"SEC-{kind}-0123456789abcdef"


def token_of(kind: str) -> str:
    return f"tok{kind}9f8e7d6c5b4a"


@pytest.fixture
def receivers() -> Iterator[dict[str, Receiver]]:
    with ExitStack() as stack:
        yield {kind: stack.enter_context(receiver(kind, secret_of(kind), token_of(kind))) for kind in KINDS}


def channels(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    receivers: dict[str, Receiver],
    secrets: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One channel per receiver: URLs from the environment, secrets from files (both ways are tested)."""
    made = []
    for kind, each in receivers.items():
        monkeypatch.setenv(f"NOTIFY_{kind.upper()}_URL", each.url)
        channel: dict[str, Any] = {"name": kind, "kind": kind, "url_env": f"NOTIFY_{kind.upper()}_URL"}
        if kind in SIGNED:
            path = tmp_path / f"{kind}.secret"
            path.write_text((secrets or {}).get(kind, secret_of(kind)) + "\n")
            channel["secret_file"] = str(path)
        made.append(channel)
    return made


def release_to_land(tmp_path: Path, source: LocalRegistry, target: LocalRegistry, made: list[dict[str, Any]]) -> Path:
    """The release at the source, and a config that mirrors it to `target` and tells these channels."""
    seed_release(source)
    return write_config(tmp_path / "mirror.yaml", source, [target], notify={"channels": made})


def test_a_release_landing_posts_one_signed_message_per_channel_and_a_no_op_posts_none(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    receivers: dict[str, Receiver],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = release_to_land(tmp_path, source, target, channels(monkeypatch, tmp_path, receivers))

    assert main(["sync", VERSION, "--config", str(config), "--notify"]) == 0

    values = tmp_path / "out" / "t0" / "hami-ack-values.yaml"
    for kind, each in receivers.items():
        assert len(each.received) == 1, kind
        (message,) = each.received
        assert message.signed, kind
        text = message.text()
        assert f"{VERSION} mirrored to t0" in text, kind
        assert "hami" in text and "kube-webhook-certgen" in text, kind
        assert " MB" in text and str(values) in text, kind
        assert f"helm upgrade --install hami hami-charts/hami -n kube-system --version 2.10.0 -f {values}" in text
    webhook = receivers["webhook"].received[0].json()
    assert webhook["event"] == "mirrored" and webhook["release"] == VERSION and webhook["target"] == "t0"
    assert webhook["bytes_moved"] > 0
    output = capsys.readouterr()
    for kind in KINDS:
        assert token_of(kind) not in output.out + output.err
        assert secret_of(kind) not in output.out + output.err

    assert main(["sync", VERSION, "--config", str(config), "--notify"]) == 0  # nothing changed: nothing said
    assert all(len(each.received) == 1 for each in receivers.values())


def test_verbose_request_lines_keep_the_webhooks_secrets_out(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    receivers: dict[str, Receiver],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`-v` logs each request httpx sends; a webhook's URL is its secret (a token in the query or the path)."""
    config = release_to_land(tmp_path, source, target, channels(monkeypatch, tmp_path, receivers))
    handler = logging.StreamHandler(sys.stderr)  # as basicConfig would, were pytest's own not installed already
    logging.getLogger().addHandler(handler)
    try:
        assert main(["sync", VERSION, "--config", str(config), "--notify", "-v"]) == 0
    finally:
        logging.getLogger().removeHandler(handler)
    err = capsys.readouterr().err
    assert f"HTTP Request: HEAD http://{source.host}/v2/projecthami/hami/manifests/{VERSION}" in err, err[:2000]
    assert all(len(each.received) == 1 for each in receivers.values())
    for kind, each in receivers.items():
        origin = each.url.split("/", 3)[2]
        assert token_of(kind) not in err and f"HTTP Request: POST http://{origin}/... " in err, kind


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "http://r.test:5000/v2/projecthami/hami/manifests/v2.10.0",
            "http://r.test:5000/v2/projecthami/hami/manifests/v2.10.0",
        ),
        ("https://r.test/v2/a/b/blobs/uploads/5f0e-11?_state=secret", "https://r.test/v2/a/b/blobs/uploads/5f0e-11"),
        ("https://cdn.test/docker/registry/v2/blobs/sha256/ab/abc/data?sig=secret", "https://cdn.test/..."),
        ("https://hooks.slack.com/services/T0/B0/s3cret", "https://hooks.slack.com/..."),
        ("https://hooks.example.com/v2/T0KENabc123", "https://hooks.example.com/..."),  # a /v2/ that is no API path
        ("https://oapi.dingtalk.com/robot/send?access_token=s3cret", "https://oapi.dingtalk.com/..."),
    ],
)
def test_a_request_line_shows_a_registry_path_and_nothing_secret(url: str, shown: str) -> None:
    from mirror.verbose import shown_url

    assert shown_url(httpx.URL(url)) == shown


def test_a_hand_run_is_silent_unless_asked(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    receivers: dict[str, Receiver],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seed_release(source)
    config = write_config(
        tmp_path / "mirror.yaml", source, [target], notify={"channels": channels(monkeypatch, tmp_path, receivers)}
    )
    assert main(["sync", VERSION, "--config", str(config)]) == 0
    assert all(each.received == [] for each in receivers.values())


def test_a_failing_run_posts_what_failed_where_and_why(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    receivers: dict[str, Receiver],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seed_release(source)
    images = [{"name": "hami", "source": "projecthami/hami", "tag": "v9.9.9"}]  # not at the source
    notify = {"channels": channels(monkeypatch, tmp_path, receivers)}
    config = write_config(tmp_path / "mirror.yaml", source, [target], images=images, notify=notify)

    assert main(["sync", VERSION, "--config", str(config), "--notify"]) == 1

    for kind, each in receivers.items():
        assert len(each.received) == 1 and each.received[0].signed, kind
        text = each.received[0].text()
        assert f"{VERSION} FAILED: hami" in text and "tag not found at the source" in text, kind


@dataclass
class HeldReceiver:
    url: str
    release: threading.Event = field(default_factory=threading.Event)
    arrived_at: list[float] = field(default_factory=list)  # time.monotonic() as each post's body arrived


@contextmanager
def held_receiver(token: str) -> Iterator[HeldReceiver]:
    """A Slack receiver that takes each post and answers only as the test ends: a platform that hangs for as long
    as the run lasts, however long that is on a busy machine."""
    state = HeldReceiver("")

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            state.arrived_at.append(time.monotonic())
            state.release.wait()
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    with http_server(Handler) as server:
        state.url = f"http://127.0.0.1:{server.server_address[1]}/services/T000/B000/{token}"
        try:
            yield state
        finally:
            state.release.set()


def test_a_receiver_down_slow_or_refusing_neither_fails_nor_holds_the_run(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The slow receiver never answers while the run lasts: the run ends anyway, its post cut at the timeout. The
    timeout is long enough for the refusing receiver's answer to arrive on a busy machine, since the test reads
    that answer; the deadline bounds every post of the run together."""
    seed_release(source)
    with (
        held_receiver(token_of("slack")) as slow,
        receiver("dingtalk", secret_of("dingtalk"), token_of("dingtalk")) as refusing,
        receiver("wecom", "", token_of("wecom")) as down,
    ):
        monkeypatch.setenv("NOTIFY_SLACK_URL", slow.url)
        made = [{"name": "slack", "kind": "slack", "url_env": "NOTIFY_SLACK_URL"}]
        made += channels(monkeypatch, tmp_path, {"dingtalk": refusing}, {"dingtalk": "SEC-not-the-robots-secret"})
        monkeypatch.setenv("NOTIFY_DOWN_URL", down.url.replace(down.url.split("/")[2], "127.0.0.1:9"))
        made.append({"name": "down", "kind": "wecom", "url_env": "NOTIFY_DOWN_URL"})
        notify = {"channels": made, "timeout": 10, "attempts": 2, "deadline": 20}
        config = write_config(tmp_path / "mirror.yaml", source, [target], notify=notify)
        assert main(["sync", VERSION, "--config", str(config), "--notify"]) == 0
        returned = time.monotonic()  # the slow receiver holds its post until the test ends, after this
    (arrived,) = slow.arrived_at  # a post that may have arrived is not sent again
    assert returned - arrived < 20  # cut at its 10 s timeout, within the deadline
    warnings = [r.getMessage() for r in caplog.records if "not delivered" in r.getMessage()]
    assert any("dingtalk" in w and "error 310000" in w for w in warnings), warnings
    assert any(w.startswith("notification to down ") for w in warnings), warnings
    assert any(w.startswith("notification to slack ") for w in warnings), warnings
    assert len(refusing.received) == 1 and not refusing.received[0].signed  # refused: not sent again
    assert not any(token_of("dingtalk") in w or "127.0.0.1:9" in w for w in warnings)


def test_ctrl_c_while_the_runs_news_is_posted_ends_the_run_in_one_line(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy is done and reported; the post to the channel hangs and the user presses Ctrl-C: exit 130 and
    one line, not a traceback."""
    seed_release(source)
    with held_receiver(token_of("slack")) as slow:
        monkeypatch.setenv("NOTIFY_SLACK_URL", slow.url)
        notify = {"channels": [{"name": "slack", "kind": "slack", "url_env": "NOTIFY_SLACK_URL"}], "deadline": 60}
        config = write_config(tmp_path / "mirror.yaml", source, [target], notify=notify)
        command = [sys.executable, "-m", "mirror", "sync", VERSION, "--config", str(config), "--notify"]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: bool(slow.arrived_at))
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    assert f"release {VERSION}" in out  # the report came before the post
    assert "mirror: interrupted" in err and "Traceback" not in err and "KeyboardInterrupt" not in err


def test_a_channel_whose_secret_is_missing_is_refused_at_load(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    channel = {"name": "ding", "kind": "dingtalk", "url_env": "NOT_SET_ANYWHERE"}
    config = write_config(tmp_path / "mirror.yaml", source, [target], notify={"channels": [channel]})
    assert main(["sync", VERSION, "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "notify.channels.0" in err and "NOT_SET_ANYWHERE is not set" in err
    assert [e for e in source.access_log() if e.path != "/v2/"] == []  # nothing sent (/v2/: the fixture saw it up)


def test_three_replicas_post_one_message_per_job_with_its_link(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, database_url: str
) -> None:
    seed_release(source)
    index = Manifest.parse(manifest_bytes(source, "projecthami/hami", VERSION))
    versions = [VERSION, "v2.11.0", "v2.12.0"]
    with_client(source, lambda c: _tag(c, index, versions[1:]))
    with receiver("webhook", secret_of("webhook"), "") as hook:
        (tmp_path / "hook.url").write_text(hook.url)
        (tmp_path / "hook.secret").write_text(secret_of("webhook"))
        channel = {"name": "hook", "kind": "webhook", "url_file": str(tmp_path / "hook.url")}
        channel["secret_file"] = str(tmp_path / "hook.secret")
        notify = {"channels": [channel], "public_url": "https://mirror.example.com/"}
        service = {"lease_seconds": LEASE}  # a replica stalled by a busy machine keeps its job: one run, one post
        config = service_config(tmp_path, source, target, service=service, database_url=database_url, notify=notify)
        services = [Service(config, free_port()) for _ in range(3)]
        for replica in services:
            replica.start()
        try:
            jobs = {}
            for number, version in enumerate(versions):
                answers = [  # every replica hears of each release
                    replica.signed({"version": version}, delivery=f"delivery-{number}") for replica in services
                ]
                # 202 while the release's job is queued or running, 200 once it is done (a quick no-op can finish
                # before the last replica hears of it): one job either way
                assert all(a.status_code in (200, 202) for a in answers), [a.text for a in answers]
                assert answers[0].status_code == 202 and len({a.json()["id"] for a in answers}) == 1
                jobs[version] = answers[0].json()["id"]
            done = {v: services[0].wait_done(job_id, seconds=240) for v, job_id in jobs.items()}
            wait_for(lambda: len(hook.received) >= len(versions), 60)
        finally:
            for replica in services:
                replica.stop()
    assert all(job["state"] == "succeeded" for job in done.values()), [j["error"] for j in done.values()]
    messages = [m.json() for m in hook.received]
    assert all(m.signed for m in hook.received)
    assert sorted(m["release"] for m in messages) == sorted(versions)  # one per job, not one per replica
    for message in messages:  # people land on the job's card on the status page; programs get the values file
        job_id, release = jobs[message["release"]], message["release"]
        assert message["page"] == f"https://mirror.example.com/?job={job_id}"
        assert message["values"] == ["https://mirror.example.com" + values_url(job_id, release, "t0", "hami")]
        assert message["helm_lines"][0].startswith("helm upgrade --install hami ")


async def _tag(client: RegistryClient, index: Manifest, versions: list[str]) -> None:
    for version in versions:
        await client.put_manifest("projecthami/hami", version, index)


def test_the_cronjobs_discovery_posts_a_new_release_once_and_a_failing_run_its_reason(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_release(source)
    with receiver("slack", "", token_of("slack")) as slack:
        notify = {"channels": channels(monkeypatch, tmp_path, {"slack": slack})}
        config = write_config(tmp_path / "mirror.yaml", source, [target], notify=notify, discovery={"newest": 1})

        assert main(["sync", "--discover", "--config", str(config)]) == 0  # as deploy/base/cronjob.yaml runs it
        assert main(["sync", "--discover", "--config", str(config)]) == 0  # the next schedule: nothing new
        assert len(slack.received) == 1
        text = slack.received[0].text()
        assert f"{VERSION} mirrored to t0" in text and "helm upgrade --install hami hami-charts/hami" in text

        target.stop()  # the next run cannot reach the target
        assert main(["sync", "--discover", "--config", str(config)]) == 1
        source.stop()  # and the next not even the source: the run stops before any release
        assert main(["sync", "--discover", "--config", str(config)]) == 1
        assert main(["sync", "--discover", "--dry-run", "--config", str(config)]) == 1  # a dry run posts nothing
        assert main(["sync", VERSION, "--target", "nope", "--notify", "--config", str(config)]) == 2  # nor bad input
    assert len(slack.received) == 3
    stopped = slack.received[2].text()
    assert "discovery FAILED: run -> mirror sync" in stopped and "discovery failed: list tags" in stopped, stopped
    failed = slack.received[1].text()  # one message for the run, each failure a line
    assert f"{VERSION} FAILED: hami -> t0 and 1 more" in failed
    assert f"hami -> t0: resolve {target.host}/mirrored/hami:{VERSION}: registry unreachable" in failed
    assert "kube-webhook-certgen -> t0: resolve" in failed


def test_drift_at_a_target_is_posted_to_the_channels_that_want_it(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_release(source)
    other = with_client(target, lambda c: push_single(c, "mirrored/hami", VERSION, seed=9))
    with (
        receiver("webhook", secret_of("webhook"), "") as hook,
        receiver("slack", "", token_of("slack")) as quiet,
    ):
        made = channels(monkeypatch, tmp_path, {"webhook": hook, "slack": quiet})
        made[1]["events"] = ["mirrored"]  # this channel hears of landings only
        config = write_config(tmp_path / "mirror.yaml", source, [target], notify={"channels": made})
        assert main(["sync", VERSION, "--config", str(config), "--notify"]) == 1
    drift = [m.json() for m in hook.received if m.json()["event"] == "drift"]
    assert len(drift) == 1 and hook.received[0].signed
    (seen,) = drift[0]["drifts"]
    assert seen["image"] == "hami" and seen["target"] == "t0" and other.digest in seen["reason"]
    assert seen["releases"] == [VERSION] and drift[0]["release"] == VERSION
    assert [m.json()["event"] for m in hook.received].count("failed") == 0  # drift is not also a failure message
    assert [m.text() for m in quiet.received if "drift" in m.text()] == []


def test_a_post_that_may_have_arrived_is_not_sent_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A receiver that takes the post and answers after the timeout got it: sending it again (re-signed, so the
    platform cannot tell) posted the same message three times. A channel whose URL file went away since the
    config was loaded is one warning, not an exception out of notify()."""
    event = Failed("v2.10.0", (Failure("hami", "t0", "tag not found"),))
    with receiver("slack", "", token_of("slack"), delay=4.0) as slow:
        monkeypatch.setenv("SLOW_URL", slow.url)
        (tmp_path / "gone.url").write_text(slow.url)
        settings = NotifySettings(
            channels=[
                NotifyChannelSettings(name="slow", kind="slack", url_env="SLOW_URL"),
                NotifyChannelSettings(name="gone", kind="slack", url_file=tmp_path / "gone.url"),
            ],
            timeout=1,
            attempts=3,
            deadline=30,
        )
        (tmp_path / "gone.url").unlink()
        sent = asyncio.run(notify(settings, [event]))
        arrived = slow.arrived
    assert arrived == 1  # three before: one per attempt
    errors = {each.channel: each.error or "" for each in sent}
    assert "ReadTimeout" in errors["slow"] and "gone.url" in errors["gone"]


@pytest.mark.parametrize(
    "url",
    [
        "https://oapi.example.com/robot/send?access_token=TOKEN123\n# ops robot",  # a second line in the file
        "https://oapi..example.com/robot/send?access_token=TOKEN123",  # an empty label: idna refuses it
        "https://oapi.example.com:99999/robot/send?access_token=TOKEN123",
        "https://oapi.example.com/robot/send?access_token=TOKEN123\x7f",
    ],
)
def test_a_url_that_is_no_url_is_refused_at_load_without_its_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    """Each passed the load's check and raised out of notify() at the post: a traceback and exit 1 after a clean
    sync on every CronJob run, and in the service no line saying any channel went unheard."""
    monkeypatch.setenv("ROBOT_URL", url)
    with pytest.raises(ValueError, match=r"url: (expected an http\(s\) URL|holds a space)") as refused:
        NotifyChannelSettings(name="robot", kind="wecom", url_env="ROBOT_URL")
    assert "TOKEN123" not in str(refused.value)


def test_a_url_turned_bad_since_load_is_one_undelivered_post(tmp_path: Path) -> None:
    """The file is read again at each post: what it holds then is a failed post like any other, the run's other
    channels still heard."""
    event = Failed("v2.10.0", (Failure("hami", "t0", "tag not found"),))
    with receiver("slack", "", token_of("slack")) as good:
        for name in ("good", "bad"):
            (tmp_path / f"{name}.url").write_text(good.url)
        settings = NotifySettings(
            channels=[
                NotifyChannelSettings(name=name, kind="slack", url_file=tmp_path / f"{name}.url")
                for name in ("good", "bad")
            ],
            deadline=30,
        )
        (tmp_path / "bad.url").write_text("https://hooks..example.com/services/TOKEN123")
        sent = asyncio.run(notify(settings, [event]))
        arrived = good.arrived
    errors = {each.channel: each.error for each in sent}
    assert arrived == 1 and errors["good"] is None
    assert errors["bad"] == "UnicodeError: the URL is not one to post to"


def test_a_release_whose_values_land_a_run_after_its_copies_is_announced_once(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copies landed but the values could not be written (here the target's folder was a file; a SIGTERM,
    an evicted pod or a lost lock between the two alike): the channel heard FAILED, and the next run, writing the
    values with nothing left to copy, said nothing: on-call never learned the release landed. The release is owed
    an announcement (under state_dir), told by the run that writes its values, and again by the next one where
    no channel heard it."""
    seed_release(source)
    with receiver("slack", "", token_of("slack")) as slack:
        notify = {"channels": channels(monkeypatch, tmp_path, {"slack": slack})}
        config = write_config(tmp_path / "mirror.yaml", source, [target], notify=notify, discovery={"newest": 1})
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "t0").write_text("in the way")
        discover = ["sync", "--discover", "--config", str(config)]
        assert main(discover) == 1  # copied and verified; the values not written
        (tmp_path / "out" / "t0").unlink()
        monkeypatch.setenv("NOTIFY_SLACK_URL", slack.url.replace(slack.url.split("/")[2], "127.0.0.1:9"))
        assert main(discover) == 0  # the values written; the channel down: nobody heard
        monkeypatch.setenv("NOTIFY_SLACK_URL", slack.url)
        shutil.rmtree(tmp_path / "out")
        assert main(discover) == 0  # the values written again: told now
        assert main(discover) == 0  # nothing new
        said = [message.text() for message in slack.received]
    assert len(said) == 2, said
    assert f"{VERSION} FAILED" in said[0]
    assert f"{VERSION} mirrored to t0" in said[1] and "images: copied by an earlier run" in said[1]
    assert "helm upgrade --install hami hami-charts/hami" in said[1]


def test_runs_sharing_a_database_announce_a_release_whose_values_landed_later_once(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, monkeypatch: pytest.MonkeyPatch, database_url: str
) -> None:
    """Replicas and a CronJob beside them keep no state_dir in common (emptyDirs): what was told lives in the job
    store, so the pod that writes the values of a release another pod copied announces it, and no pod again."""
    seed_release(source)
    with receiver("slack", "", token_of("slack")) as slack:
        notify = {"channels": channels(monkeypatch, tmp_path, {"slack": slack})}

        def pod(name: str) -> list[str]:
            config = write_config(
                tmp_path / f"{name}.yaml",
                source,
                [target],
                notify=notify,
                discovery={"newest": 1},
                database_url=database_url,
                state_dir=str(tmp_path / name / "state"),
            )
            return ["sync", "--discover", "--config", str(config)]

        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "t0").write_text("in the way")
        assert main(pod("first")) == 1  # copied and verified; the values not written
        (tmp_path / "out" / "t0").unlink()
        assert main(pod("second")) == 0  # nothing to copy; the values written
        assert main(pod("third")) == 0
        said = [message.text() for message in slack.received]
    assert len(said) == 2, said
    assert f"{VERSION} FAILED" in said[0] and f"{VERSION} mirrored to t0" in said[1]
