"""What a run's messages say and how much of it: drift of an image several releases share is one message naming
every release; a failure at many images and targets stays under each chat's limit (the headline kept, whole lines
dropped from the end, one line saying how many), while the generic webhook's JSON carries everything; the
`helm upgrade` line of a private target, which logs in first, upgrades. Each post goes through the real send path
to a receiver on loopback that checks the platform's signature, as in tests/test_notify.py."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.sample import push_multiarch, push_single
from mirror.engine.outcomes import Drift
from mirror.notify.events import Drifted, Failed, Failure, events_of, upgrade_line
from mirror.notify.send import notify
from mirror.oci import Manifest
from mirror.report import ImageResult, ReleaseResult, TargetResult
from mirror.settings import NotifyChannelSettings, NotifySettings
from mirror.values import ChartSpec, helm_command
from tests.receivers import Receiver, receiver
from tests.support import manifest_bytes, with_client, write_config
from tests.test_notify import KINDS, _tag, channels, secret_of, token_of
from tests.test_notify_escaping import LOOKALIKES
from tests.test_sync import VERSION, seed_release

# what each chat takes in one message's text, in UTF-8 bytes: WeCom's and DingTalk's documented markdown limits,
# Feishu's 20 KB request body less room for its envelope, Slack's 40000 characters kept well under
LIMITS = {"wecom": 4096, "dingtalk": 20000, "feishu": 20000, "slack": 12000}
CHATS = tuple(LIMITS)


@pytest.fixture
def every_platform(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[NotifySettings, dict[str, Receiver]]]:
    """A real receiver per platform, and settings with one channel for each."""
    with ExitStack() as stack:
        made = {kind: stack.enter_context(receiver(kind, secret_of(kind), token_of(kind))) for kind in KINDS}
        settings = [NotifyChannelSettings.model_validate(each) for each in channels(monkeypatch, tmp_path, made)]
        yield NotifySettings(channels=settings, timeout=10, attempts=1, deadline=30), made


def _posted(platforms: tuple[NotifySettings, dict[str, Receiver]], event: Failed) -> dict[str, Receiver]:
    settings, made = platforms
    sent = asyncio.run(notify(settings, [event]))
    assert [each.error for each in sent] == [None] * len(made), sent  # every platform took it
    assert all(len(each.received) == 1 and each.received[0].signed for each in made.values())
    return made


def _failure_at_every_image(images: int, reason_length: int) -> Failed:
    """Each image failed at two targets, with a registry's long reason full of characters each chat must escape
    (look-alikes of three UTF-8 bytes in DingTalk, WeCom and Feishu; entities in Slack)."""
    unit = "denied: <repository> [name] *unknown* "
    reason = (unit * (reason_length // len(unit) + 1))[:reason_length]
    return Failed(
        "v2.10.0",
        tuple(
            Failure(f"image-{number:02d}", target, f"{reason} #{number}")
            for number in range(images)
            for target in ("t0", "t1")
        ),
    )


def _as_read(kind: str, text: str) -> str:
    """A chat's text mapped back to the characters people read."""
    if kind == "slack":
        return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return text.translate(LOOKALIKES)


def _check_cut(kind: str, text: str, event: Failed) -> int:
    """The message fits its platform, keeps its headline and a run of whole failure lines from the first, and says
    how many it left out; how many it kept."""
    assert len(text.encode()) <= LIMITS[kind], (kind, len(text.encode()))
    parts = text.split("\n\n" if kind in ("dingtalk", "wecom") else "\n")
    headline, *kept, more = parts
    assert f"mirror: v2.10.0 FAILED: image-00 -> t0 and {len(event.failures) - 1} more" in headline, kind
    expected = [f"{f.what} -> {f.where}: {f.reason}" for f in event.failures]
    whole = [_as_read(kind, line) for line in kept]
    if whole and whole[-1].endswith("…"):  # the line that did not fit, clipped to the room left
        clipped = re.sub(r"&[a-z]*$", "", whole.pop()[:-1])  # Slack's escape the clip may have cut
        assert expected[len(whole)].startswith(clipped) and len(clipped) > 40, kind
    assert whole == expected[: len(whole)], kind
    assert more == f"... and {len(event.failures) - len(kept)} more", kind
    return len(kept)


def test_a_failure_at_thirteen_images_and_two_targets_fits_wecoms_4096_bytes(
    every_platform: tuple[NotifySettings, dict[str, Receiver]],
) -> None:
    """5,492 bytes for WeCom before: refused with a 200 and an error code, and lost. The other chats take it whole."""
    event = _failure_at_every_image(13, 160)
    made = _posted(every_platform, event)

    wecom = made["wecom"].received[0].json()["markdown"]["content"]
    assert 0 < _check_cut("wecom", wecom, event) < len(event.failures)
    for kind in ("dingtalk", "feishu", "slack"):
        text = made[kind].received[0].text()
        assert "... and" not in text and _as_read(kind, text).count(": denied: ") == len(event.failures), kind


def test_a_failure_too_long_for_every_chat_is_cut_for_each_and_whole_in_the_webhooks_json(
    every_platform: tuple[NotifySettings, dict[str, Receiver]],
) -> None:
    event = _failure_at_every_image(60, 300)
    made = _posted(every_platform, event)

    for kind in CHATS:
        text = made[kind].received[0].text()
        assert 0 < _check_cut(kind, text, event) < len(event.failures), kind
    assert made["dingtalk"].received[0].json()["markdown"]["title"].startswith("mirror: v2.10.0 FAILED: image-00")
    webhook = made["webhook"].received[0].json()
    assert webhook["failures"] == [{"what": f.what, "where": f.where, "reason": f.reason} for f in event.failures]
    assert "... and" not in webhook["text"] and webhook["text"].count(": denied: ") == len(event.failures)


def _drifted_image(name: str, target: str, reason: str) -> ImageResult:
    return ImageResult(name, f"docker.io/{name}", targets=[TargetResult(target, f"{target}/{name}", Drift(reason))])


def test_one_failure_longer_than_wecoms_limit_is_clipped_not_dropped(
    every_platform: tuple[NotifySettings, dict[str, Receiver]],
) -> None:
    """A values refusal naming every unmirrored block runs to kilobytes in one line: WeCom got the headline and
    '... and 1 more', no reason at all."""
    event = _failure_at_every_image(1, 6000)
    made = _posted(every_platform, event)

    wecom = made["wecom"].received[0].json()["markdown"]["content"]
    headline, line, more = wecom.split("\n\n")  # its second line, at t1, left out
    assert len(wecom.encode()) <= LIMITS["wecom"] and len(wecom.encode()) > LIMITS["wecom"] - 100
    assert "FAILED: image-00 -> t0 and 1 more" in headline and more == "... and 1 more"
    first = _as_read("wecom", line)
    assert first.endswith("…") and f"{event.failures[0].what} -> t0: {event.failures[0].reason}".startswith(first[:-1])


def test_the_runs_drift_is_one_event_a_line_per_image_and_target_naming_each_release() -> None:
    certgen = "drift: acr/mirrored/kube-webhook-certgen:v1.1.1 points at sha256:aa, the source at sha256:bb"
    hami = "drift: acr/mirrored/hami:{} points at sha256:cc, the source at sha256:dd"
    results = [
        ReleaseResult(
            version,
            images=[
                _drifted_image("kube-webhook-certgen", "t0", certgen),
                _drifted_image("kube-webhook-certgen", "t1", certgen),
                _drifted_image("hami", "t0", hami.format(version)),
            ],
        )
        for version in ("v2.8.0", "v2.9.0", "v2.10.0")
    ]
    results.append(
        ReleaseResult("v2.11.0", dry_run=True, images=[_drifted_image("kube-webhook-certgen", "t0", certgen)])
    )

    (drifted,) = [e for e in events_of(results) if isinstance(e, Drifted)]  # the run's drift: one message

    assert drifted.release == "v2.8.0, v2.9.0, v2.10.0"
    assert [(", ".join(d.releases), d.image, d.target, d.reason) for d in drifted.drifts] == [
        ("v2.8.0, v2.9.0, v2.10.0", "kube-webhook-certgen", "t0", certgen),
        ("v2.8.0, v2.9.0, v2.10.0", "kube-webhook-certgen", "t1", certgen),
        ("v2.8.0", "hami", "t0", hami.format("v2.8.0")),  # a tag of each release: drift of its own
        ("v2.9.0", "hami", "t0", hami.format("v2.9.0")),
        ("v2.10.0", "hami", "t0", hami.format("v2.10.0")),
    ]


def test_drift_at_twelve_images_and_two_targets_is_one_post_per_chat_not_twenty_four(
    every_platform: tuple[NotifySettings, dict[str, Receiver]],
) -> None:
    """Drift is not mended by the next run: a post per image and target came back every run, and DingTalk's and
    WeCom's robots refuse past 20 posts a minute (with a 200 and an error code: lost)."""
    reason = "drift: acr/mirrored/{}:v1 points at sha256:aa, the source at sha256:bb"
    images = [_drifted_image(f"image-{n:02d}", target, reason.format(n)) for n in range(12) for target in ("t0", "t1")]
    events = events_of([ReleaseResult("v2.10.0", images=images)])
    assert [type(event) for event in events] == [Drifted]

    settings, made = every_platform
    sent = asyncio.run(notify(settings, events))
    assert [each.error for each in sent] == [None] * len(made), sent
    for kind, each in made.items():
        (post,) = each.received
        text = _as_read(kind, post.text())
        assert "mirror: v2.10.0 drift: image-00 at t0 and 23 more" in text, kind
        assert text.count(" -> t1: drift: ") == 12 and text.count(" -> t0: drift: ") == 12, kind


def test_drift_of_an_image_three_discovered_releases_share_is_posted_once_to_each_channel(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Discovery's `newest: 3` and one moved certgen tag at the target: three identical messages per channel
    before."""
    seed_release(source)
    index = Manifest.parse(manifest_bytes(source, "projecthami/hami", VERSION))
    with_client(source, lambda c: _tag(c, index, ["v2.11.0", "v2.12.0"]))
    moved = with_client(target, lambda c: push_single(c, "mirrored/kube-webhook-certgen", "v1.1.1", seed=7))
    with ExitStack() as stack:
        made = {kind: stack.enter_context(receiver(kind, secret_of(kind), token_of(kind))) for kind in KINDS}
        section = {"channels": channels(monkeypatch, tmp_path, made)}
        config = write_config(tmp_path / "mirror.yaml", source, [target], notify=section, discovery={"newest": 3})
        assert main(["sync", "--discover", "--config", str(config)]) == 1  # drift fails the run

    releases = f"{VERSION}, v2.11.0, v2.12.0"
    for kind, each in made.items():
        drift = [m for m in each.received if " drift: " in m.text().split("\n")[0]]
        assert len(drift) == 1 and drift[0].signed, (kind, [m.text() for m in each.received])
        text = _as_read(kind, drift[0].text())
        assert f"mirror: {releases} drift: kube-webhook-certgen at t0" in text, kind
        assert moved.digest in text, kind
    webhook = next(m.json() for m in made["webhook"].received if m.json()["event"] == "drift")
    (seen,) = webhook["drifts"]
    assert webhook["release"] == releases and seen["releases"] == [VERSION, "v2.11.0", "v2.12.0"]
    assert seen["image"] == "kube-webhook-certgen" and seen["target"] == "t0"


def test_a_failure_several_releases_share_is_one_event_naming_each_release() -> None:
    missing = "tag not found: docker.io/liangjw/kube-webhook-certgen:v1.1.1"
    results = [
        ReleaseResult(
            version,
            images=[
                ImageResult("kube-webhook-certgen", "docker.io/liangjw/kube-webhook-certgen:v1.1.1", error=missing),
                ImageResult("hami", f"docker.io/projecthami/hami:{version}", error="refused")
                if version == "v2.9.0"
                else ImageResult("hami", f"docker.io/projecthami/hami:{version}"),
            ],
        )
        for version in ("v2.8.0", "v2.9.0", "v2.10.0")
    ]

    failed = [e for e in events_of(results) if isinstance(e, Failed)]

    certgen = Failure("kube-webhook-certgen", "docker.io/liangjw/kube-webhook-certgen:v1.1.1", missing)
    assert [(f.release, f.failures) for f in failed] == [
        ("v2.8.0, v2.9.0, v2.10.0", (certgen,)),  # said once for the three
        ("v2.9.0", (Failure("hami", "docker.io/projecthami/hami:v2.9.0", "refused"),)),  # its own
    ]


def test_an_image_three_discovered_releases_lack_is_one_failure_posted_to_each_channel(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Discovery's `newest: 3` and certgen missing at the source: one message per channel naming the three
    releases, where each release posted the same failure."""
    with_client(source, lambda c: push_multiarch(c, "projecthami/hami", VERSION, seed=1))  # certgen: never pushed
    index = Manifest.parse(manifest_bytes(source, "projecthami/hami", VERSION))
    with_client(source, lambda c: _tag(c, index, ["v2.11.0", "v2.12.0"]))
    with ExitStack() as stack:
        made = {kind: stack.enter_context(receiver(kind, secret_of(kind), token_of(kind))) for kind in KINDS}
        section = {"channels": channels(monkeypatch, tmp_path, made)}
        config = write_config(tmp_path / "mirror.yaml", source, [target], notify=section, discovery={"newest": 3})
        assert main(["sync", "--discover", "--config", str(config)]) == 1

    releases = f"{VERSION}, v2.11.0, v2.12.0"
    for kind, each in made.items():
        certgen = [m for m in each.received if "FAILED: kube-webhook-certgen" in m.text().split("\n")[0]]
        assert len(certgen) == 1 and certgen[0].signed, (kind, [m.text() for m in each.received])
        assert f"mirror: {releases} FAILED: kube-webhook-certgen" in _as_read(kind, certgen[0].text()), kind


SPEC = ChartSpec("hami", "hami", "kube-system", "hami-ack-values.yaml")


def test_the_helm_line_upgrades_a_release_the_cluster_runs_whether_or_not_it_logs_in_first() -> None:
    """A private target's line logs in to the registry, then installs: it went out as `helm install`, which a
    cluster running the release refuses ("cannot re-use a name")."""
    chart = "oci://registry.example.cn/mirrored/hami"
    values = Path("/out/t0/v2.10.0/values.yaml")
    upgrade = f"helm upgrade --install hami {chart} -n kube-system --version 2.10.0 -f {values}"
    login = "helm registry login registry.example.cn --username <your account name> && "

    assert upgrade_line(helm_command(SPEC, "2.10.0", chart, values)) == upgrade
    assert upgrade_line(helm_command(SPEC, "2.10.0", chart, values, private=True)) == login + upgrade


def test_only_helms_install_command_is_rewritten() -> None:
    login = "helm registry login r.example.cn --username 'helm install '"
    values = "-f '/v/helm install /values.yaml'"
    assert upgrade_line(f"{login} && helm install x c {values}") == f"{login} && helm upgrade --install x c {values}"
