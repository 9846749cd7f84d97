"""A sync run: for each release and image, resolve the source and pass the signature gate, then per target
the stages of `target.py` (decide, copy, verify: a typed outcome); finally, per chart and target where every
image it uses verified, the delivery (values, render check, publish, write).

    config -> jobs -> (per image) resolve -> signed? -> (per target) decide -> copy -> verify -> outcome
           -> (per chart and target) values -> render check -> publish -> write
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Hashable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from mirror.chart.source import ChartLocation
from mirror.engine.cache import RunCache
from mirror.engine.charts import fetch_install_charts
from mirror.engine.clients import Clients, retry_policy
from mirror.engine.deliver import Delivery, deliver, unverified_images
from mirror.engine.discover import DiscoveryError, discover
from mirror.engine.jobs import ChartJob, ImageJob, ReleaseJob, build_release_jobs, check_versions, select_targets
from mirror.engine.lock import target_locks
from mirror.engine.namespaces import prepare_namespaces
from mirror.engine.outcomes import Copied, Failed, UpToDate
from mirror.engine.plan import apply_policy
from mirror.engine.policy import signable
from mirror.engine.referrers import Found
from mirror.engine.shutdown import STOPPING, Interrupted, Shutdown
from mirror.engine.target import SyncOptions, TargetStages
from mirror.engine.tree import known_tree
from mirror.errors import MirrorError
from mirror.oci import Descriptor
from mirror.output import check_writable
from mirror.progress import Progress
from mirror.reference import api_host
from mirror.release import is_prerelease, version_key
from mirror.report import ImageResult, ReleaseResult
from mirror.settings import MirrorSettings, TargetSettings
from mirror.untrusted import clip

if TYPE_CHECKING:  # sigstore is imported only where a rule applies
    from mirror.engine.signatures import HeldCopy, SignatureCheck, SignatureGate

__all__ = ["SyncOptions", "Syncer", "discover_and_sync", "sync"]

# Images worked on at once. Blob transfers have their own, smaller limit; this one keeps the connection pools'
# queues short (httpcore's pool scanned its whole queue on every change: 4000 queued look-ups took 100 s). 16 images
# of a dozen or more HEADs each keep a registry's 32 connections (the default) busy; more only wait at the pool
# holding memory (the benchmark's 50 images to three targets: peak RSS 66 MB at 32, 63 MB at 16, no slower).
IMAGES_AT_ONCE = 16
EVENT_CHARS = 1000  # of a delivery's refusal on the progress line (the run's report says it whole)
SHOWN_IMAGES = 3  # of the images that kept a chart's values from being written, named in its error
T = TypeVar("T")
log = logging.getLogger("mirror")


@dataclass(frozen=True, slots=True)
class Signed:
    """The signature gate's word on an image: its check (where a rule applies), or why it was not checked."""

    check: SignatureCheck | None = None
    error: str | None = None


class Syncer:
    """Runs release jobs over a set of open registry clients: per image, resolve the source and pass the
    signature gate; per target, the stages of `target.py`; per chart and target, the delivery. One per run."""

    def __init__(
        self,
        settings: MirrorSettings,
        clients: Clients,
        options: SyncOptions,
        progress: Progress,
        shutdown: Shutdown | None = None,
    ) -> None:
        self.settings = settings
        self.shutdown = shutdown or Shutdown()
        self.clients = clients
        self.options = options
        self.progress = progress
        self.cache = RunCache(settings, clients, self.shutdown)
        self.shutdown.on_abandon(self.cache.cancel_pending)
        self.stages = TargetStages(settings, options, self.cache, progress)
        self._image_limit = asyncio.Semaphore(IMAGES_AT_ONCE)
        self._gate: SignatureGate | None = None
        self._images_done: dict[Hashable, ImageResult] = {}  # by `_same_copy`: releases of a run share images

    async def run(self, jobs: list[ReleaseJob]) -> list[ReleaseResult]:
        # the release whose values the newest folder takes: a pre-release never does (values.py)
        newest = max((j.version for j in jobs if not is_prerelease(j.version)), key=version_key, default=None)
        try:
            return [await self._release_unless_stopping(job, latest=job.version == newest) for job in jobs]
        finally:
            await self.cache.aclose()
            if self._gate is not None:
                await self._gate.aclose()

    async def _release_unless_stopping(self, job: ReleaseJob, latest: bool) -> ReleaseResult:
        if self.shutdown.stopping:
            return ReleaseResult(job.version, self.options.dry_run, errors=[STOPPING])
        return await self.run_release(job, latest)

    async def run_release(self, job: ReleaseJob, latest: bool) -> ReleaseResult:
        for host in {ref.repository.registry for image in job.images for ref in image.targets}:
            repos = frozenset(r.repository.name for i in job.images for r in i.targets if r.repository.registry == host)
            self.cache.blobs_at(host, repos)
        images = await asyncio.gather(*(self._limited(self.run_image(image)) for image in job.images))
        sources = sorted({image.source.registry for image in job.images})
        rate_limit = next((b for h in sources if (b := self.clients[h].rate_limit)), None)
        result = ReleaseResult(job.version, self.options.dry_run, list(images), source_rate_limit=rate_limit)
        if not self.options.dry_run:
            for target in job.targets:
                for chart in job.charts:
                    await self._deliver(job, chart, target, result, latest)
        return result

    async def _limited(self, work: Awaitable[T]) -> T:
        async with self._image_limit:
            return await work

    async def _deliver(
        self, job: ReleaseJob, chart: ChartJob, target: TargetSettings, result: ReleaseResult, latest: bool
    ) -> None:
        """One chart's values at one target, once every image the chart uses verified there."""
        not_written = f"{chart.spec.name} values for {target.name} not written"
        if unverified := unverified_images(job, chart, result, target):
            shown = ", ".join(unverified[:SHOWN_IMAGES]) + (", ..." if len(unverified) > SHOWN_IMAGES else "")
            result.withheld.append(f"{not_written}: {len(unverified)} of its images not verified there ({shown})")
            return
        client = self.clients[api_host(target.registry)]
        if self.shutdown.stopping:  # a render and a chart push are new work too
            result.errors.append(f"{not_written}: {STOPPING}")
            return
        try:
            delivery = await deliver(
                self.settings, job, chart, target, result, client, latest, self.cache.anonymous_client
            )
        except MirrorError as exc:
            delivery = Delivery(None, f"{not_written}: {exc}")
        except OSError as exc:  # the output went away or filled up since the run began: none of its files written
            reason = f"{exc.strerror or exc} ({exc.filename})" if exc.filename else str(exc)
            delivery = Delivery(None, f"{not_written}: {reason}")
        if delivery.values is None:
            result.errors.append(delivery.error or not_written)
            # the error quotes the chart (rendered references, template names): escaped and bounded on the terminal
            self.progress.event(
                clip(f"{job.version} {chart.spec.name} -> {target.name}: {delivery.error}", EVENT_CHARS)
            )
            return
        result.values.append(delivery.values)
        self.progress.event(f"{job.version} {chart.spec.name} -> {target.name}: wrote {delivery.values.path}")

    async def run_image(self, job: ImageJob) -> ImageResult:
        """The image's copy to every target, once per run: a later release of the run that uses the same image
        (certgen's tag, which HAMi's releases share) takes the earlier one's result, what it copied now up to
        date, and asks no registry anything again. A result that may pass (a failed copy, a source that did not
        answer) is not taken: the later release tries again."""
        key = _same_copy(job)
        earlier = self._images_done.get(key)
        if earlier is not None:
            return _as_again(earlier)
        result = await self._run_image(job)
        if _settled(result):
            self._images_done[key] = result
        return result

    async def _run_image(self, job: ImageJob) -> ImageResult:
        """Resolve the source with a HEAD, the target tags asked at the same time, and with them, where the tag's
        last digest names a tree known by digest, every child and blob the targets should hold: a no-op verifies
        in that one round trip. Then the signature gate, then every target's stages."""
        current = {ref.name: self.cache.target_tag(job, ref) for ref in job.targets}
        guess = job.digest or self.cache.last_digests.get(job.source.registry, job.source.name, job.tag)
        if guess is not None:
            self._ask_ahead(job, guess)
        resolved = await self._resolve(job)
        signed = Signed()
        if isinstance(resolved, Descriptor):
            if job.digest is None:
                self.cache.last_digests.put(job.source.registry, job.source.name, job.tag, resolved.digest)
            if any(ref.target.referrers for ref in job.targets):
                self.cache.look_up_referrers(job, resolved.digest)  # under way while the targets decide
            signed = await self._check_signature(job, resolved.digest, current)
        error = resolved if isinstance(resolved, str) else signed.error
        image = ImageResult(job.image.name, job.source_ref, signature=signed.check, error=error)
        if not isinstance(resolved, Descriptor):
            # answered, not cancelled: a cancelled request still runs to its end (registry/cancelsafe.py), and
            # this image's place among those worked on at once is held until it has
            await asyncio.gather(*current.values(), return_exceptions=True)
            return image
        image.source_digest = resolved.digest
        if error is None:
            self._probe_targets(job, resolved.digest)
            runs = (self.stages.run(job, ref, resolved, current[ref.name]) for ref in job.targets)
            image.targets = list(await asyncio.gather(*runs))
        else:
            await asyncio.gather(*current.values(), return_exceptions=True)
        return image

    def _ask_ahead(self, job: ImageJob, digest: str) -> None:
        """Before the source answers: what the tag most likely resolves to, asked as if it had (each answer is
        kept for the run; a tag that moved costs only the requests for its old tree that the new one does not
        share)."""
        if any(ref.target.referrers for ref in job.targets):
            self.cache.look_up_referrers(job, digest)
        self._probe_targets(job, digest)

    def _probe_targets(self, job: ImageJob, digest: str) -> None:
        """Where an earlier run kept the source tree by digest, ask each target at once for every child and blob
        it should hold, and the source for what refers to each image of the index: the tag's answer then finds
        the verification's (or the plan's) and the look-ups on their way."""
        tree = known_tree(self.cache.manifests, digest)
        if tree is None:
            return
        for ref in job.targets:
            try:
                kept, _ = apply_policy(tree, ref.target.attestations, job.platforms_at(ref))
            except MirrorError:
                continue  # the copy stage says why
            self.cache.blobs[ref.repository.registry].probes.tree(ref.repository.name, kept)
            if ref.target.referrers and kept.digest == digest:  # a rewritten index carries no referrers
                for subject in signable(kept.root.manifests):
                    self.cache.look_up_referrers(job, subject)

    async def _resolve(self, job: ImageJob) -> Descriptor | str:
        """The source's descriptor, or why there is none. A HEAD's 404 cannot tell an unknown repository (a
        misspelt name) from an unknown tag: only then is the registry asked whether it knows the repository, and
        where that look-up fails, the tag is blamed as the 404 alone would have it. A pinned digest is not looked
        up: distribution answers a repository holding only untagged manifests as unknown to its tag list."""
        try:
            resolved = await self.clients.head_tag(job.source.registry, job.source.name, job.source_identifier)
        except MirrorError as exc:
            return str(exc)
        if resolved is not None:
            return resolved
        if job.digest:  # a repository of untagged manifests has no tag list either: it would read as missing
            return f"{job.source_ref}: the pinned digest is no longer served at the source"
        try:
            repository_known = await self.clients.has_repository(job.source.registry, job.source.name)
        except MirrorError:
            repository_known = True
        if not repository_known:
            return f"{job.source_ref}: repository {job.source.name} not found at the source"
        return f"{job.source_ref}: tag not found at the source"

    async def _check_signature(
        self, job: ImageJob, digest: str, current: dict[str, asyncio.Task[Descriptor | None]]
    ) -> Signed:
        """Where a signature rule names the image: refuse it (an error, nothing copied) unless it verifies."""
        rule = self.settings.signatures.rule_for(job.source.registry, job.source.name)
        if rule is None:
            return Signed()
        from mirror.engine.signatures import check_image

        try:
            with self.shutdown.abandoned_as_interrupted(job.source_ref):
                copies = await self._held_copies(job, digest, current)
                source = self.clients[job.source.registry]

                def found() -> asyncio.Future[Found]:  # started only if the source is read
                    return asyncio.shield(self.cache.referrers_of(job, digest))

                check = await check_image(self._signature_gate(), rule, digest, source, job.source.name, found, copies)
        except MirrorError as exc:
            return Signed(error=f"{job.source_ref}: signature not checked: {exc}")
        if check.refused:
            return Signed(check, f"{job.source_ref}@{digest}: not mirrored: {check.refused}")
        self.progress.event(f"{job.source_ref}: signed by {check.signer} ({check.via})")
        return Signed(check)

    def _signature_gate(self) -> SignatureGate:
        from mirror.engine.signatures import SignatureGate

        if self._gate is None:
            signatures, transfer = self.settings.signatures, self.settings.transfer
            retry = retry_policy(self.settings.retry)
            self._gate = SignatureGate.open(
                signatures.trusted_root, signatures.max_bytes, transfer.read_timeout, retry, transfer.deadline
            )
        return self._gate

    async def _held_copies(
        self, job: ImageJob, digest: str, current: dict[str, asyncio.Task[Descriptor | None]]
    ) -> list[HeldCopy]:
        """Targets whose tag already points at `digest` and that carry what refers to it."""
        from mirror.engine.signatures import HeldCopy

        copies = []
        for ref in job.targets:
            try:
                held = await asyncio.shield(current[ref.name])
            except MirrorError:
                continue  # the target's stages report it
            if ref.target.referrers and held is not None and held.digest == digest:
                client = self.clients[ref.repository.registry]
                copies.append(HeldCopy(ref.name, client, ref.repository.name))
        return copies


async def sync(
    settings: MirrorSettings,
    versions: list[str],
    options: SyncOptions,
    progress: Progress,
    shutdown: Shutdown | None = None,
    clients: Clients | None = None,
) -> list[ReleaseResult]:
    """Validate the request, fetch the releases' charts, take the targets' locks, run over one client per
    registry host (the caller's, when it has them open already), close."""
    versions = check_versions(settings, versions)
    select_targets(settings, list(options.target_names))  # a mistyped --target exits 2 before any request
    if not options.dry_run:
        check_writable(settings.output_dir, "output_dir")
    shutdown = shutdown or Shutdown()
    own = clients is None
    clients = clients or Clients(settings)
    try:
        with shutdown.interrupted_when_abandoned("fetching the charts"):
            charts = await fetch_install_charts(settings, versions, clients)
        asked, chartless = versions, [version for version in versions if version in charts.failed]
        versions = [version for version in versions if version not in charts.failed]
        jobs = build_release_jobs(settings, versions, list(options.target_names) or None, charts)
        warn_unmatched_rules(settings, jobs)
        warn_unused_registries(settings, jobs)
        shutdown.check()
        async with target_locks(settings, jobs, enabled=not options.dry_run, shutdown=shutdown) as waited:
            if waited:  # another run held a target meanwhile: the source's tags are asked anew
                clients.forget_tags()
            shutdown.check()
            with shutdown.interrupted_when_abandoned("preparing the targets' namespaces"):
                unready = await prepare_namespaces(settings, jobs, clients, options.dry_run, progress)
            results = await Syncer(settings, clients, options, progress, shutdown).run(_ready(jobs, unready))
            failed = [ReleaseResult(v, options.dry_run, errors=[str(charts.failed[v])]) for v in chartless]
            return sorted(_with_unready(results, unready) + failed, key=lambda r: asked.index(r.version))
    finally:
        if own:
            await clients.aclose()
        progress.close()


def _ready(jobs: list[ReleaseJob], unready: dict[str, MirrorError]) -> list[ReleaseJob]:
    """The jobs without the targets that are not ready; where none is, the first reason stops the run."""
    if not unready:
        return jobs
    if not {target.name for job in jobs for target in job.targets} - set(unready):
        raise next(iter(unready.values()))
    return [
        replace(
            job,
            targets=tuple(t for t in job.targets if t.name not in unready),
            images=tuple(replace(i, targets=tuple(r for r in i.targets if r.name not in unready)) for i in job.images),
        )
        for job in jobs
    ]


def _with_unready(results: list[ReleaseResult], unready: dict[str, MirrorError]) -> list[ReleaseResult]:
    """Each release's result, saying of each target that was not ready that nothing was copied there, and why."""
    for result in results:
        result.errors += [f"target {name}: nothing copied there: {why}" for name, why in unready.items()]
    return results


def warn_unmatched_rules(settings: MirrorSettings, jobs: list[ReleaseJob]) -> None:
    """A signature rule naming no image of the run checks nothing: say so, since a misspelt name would
    otherwise let the image it meant through unchecked."""
    repositories = {(image.source.registry, image.source.name) for job in jobs for image in job.images}
    for pattern in settings.signatures.unmatched(repositories):
        log.warning("signatures.require: %r names no image of this run: no signature is checked for it", pattern)


def warn_unused_registries(settings: MirrorSettings, jobs: list[ReleaseJob]) -> None:
    """A `registries:` entry for a host no source, target or chart of the config uses is never applied: most
    likely a misspelt host, whose login the run then never sends (the registry's 401 names no config key)."""
    hosts = {image.source.registry for job in jobs for image in job.images}
    hosts |= {settings.source.registry, *(target.registry for target in settings.targets)}
    repositories = [settings.chart.repository] if settings.chart is not None else []
    repositories += [chart.repository for chart in settings.charts]
    locations = [ChartLocation(repository, "") for repository in repositories]
    hosts |= {location.oci_parts()[0] for location in locations if location.is_oci}
    used = {api_host(host) for host in hosts}
    for key in settings.registries:
        if api_host(key) not in used:
            log.warning("registries: %s is a host no source, target or chart uses: is it misspelt?", key)


async def discover_and_sync(
    settings: MirrorSettings,
    options: SyncOptions,
    progress: Progress,
    shutdown: Shutdown | None = None,
    clients: Clients | None = None,
) -> list[ReleaseResult]:
    """Find the releases the discovery filter selects at the source, then sync each of them (over the caller's
    clients, when it has them open already). A source that cannot be listed raises DiscoveryError with one
    line, as a failed copy reports one line."""
    select_targets(settings, list(options.target_names))
    if not options.dry_run:
        check_writable(settings.output_dir, "output_dir")
    own = clients is None
    clients = clients or Clients(settings)
    try:
        try:
            with (shutdown or Shutdown()).interrupted_when_abandoned("discovery"):
                versions = await discover(settings, clients)
        except Interrupted:
            raise
        except MirrorError as exc:
            raise DiscoveryError(f"discovery failed: {exc}") from None
        progress.event(f"discovered {len(versions)} release(s): {', '.join(versions) or 'none'}")
        if not versions:
            progress.close()
            return []
        return await sync(settings, versions, options, progress, shutdown, clients)
    finally:
        if own:
            await clients.aclose()


def _same_copy(job: ImageJob) -> Hashable:
    """What makes two releases' image jobs one copy: the image, what the source is asked for, and each target's
    repository, tag and platform filter."""
    places = tuple((ref.name, str(ref.repository), tuple(job.platforms_at(ref) or ())) for ref in job.targets)
    return (job.image.name, str(job.source), job.source_identifier, job.tag, places)


def _settled(result: ImageResult) -> bool:
    """Whether another try in the run would end the same: every target reached (up to date, copied, planned) or
    refused for good (drift, a refusal); no failure that may pass, no source that did not answer."""
    return result.error is None and not any(isinstance(t.outcome, Failed) for t in result.targets)


def _as_again(earlier: ImageResult) -> ImageResult:
    """An earlier release's result for the same copy, as this release sees it: what was copied is up to date."""
    targets = [
        replace(t, outcome=UpToDate(t.outcome.digest, t.outcome.rewrite)) if isinstance(t.outcome, Copied) else t
        for t in earlier.targets
    ]
    return replace(earlier, targets=targets)
