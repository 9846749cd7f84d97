"""A sync run: for each release and image, resolve the source, then per target plan, copy and verify;
finally write the values file for each target where every image verified.

    config -> jobs -> (per image) resolve -> plan -> copy -> verify -> (per target) values
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from mirror import acr
from mirror.chart.archive import ChartError
from mirror.engine.blobs import BlobOutcome, TargetBlobs
from mirror.engine.charts import fetch_install_charts
from mirror.engine.clients import Clients, open_client, retry_policy
from mirror.engine.copy import CopyStats, copy_to_target
from mirror.engine.deliver import Delivery, chart_verified, deliver
from mirror.engine.discover import DiscoveryError, discover, discovery_host
from mirror.engine.fanout import Spool
from mirror.engine.jobs import (
    PINNED_TAG_PREFIX,
    ChartJob,
    ImageJob,
    ReleaseJob,
    TargetRef,
    build_release_jobs,
    check_versions,
    pinned_tag,
)
from mirror.engine.lock import target_locks
from mirror.engine.namespaces import prepare_namespaces
from mirror.engine.plan import apply_policy, plan_target
from mirror.engine.policy import source_digest_of
from mirror.engine.referrers import Carried, Found, carry_referrers, look_up_referrers, read_fallback
from mirror.engine.shutdown import Interrupted, Shutdown
from mirror.engine.tree import ManifestTree, load_tree
from mirror.engine.upload import BlobOrigin, RegistryOrigin
from mirror.engine.verify import Verification, verify_copy
from mirror.oci import INDEX_TYPES, Descriptor, ManifestError
from mirror.output import check_writable
from mirror.progress import Progress
from mirror.reference import api_host
from mirror.registry import RegistryClient, RegistryError, RegistryUnreachable
from mirror.registry.budget import BudgetExhausted
from mirror.registry.credentials import CredentialError
from mirror.registry.errors import IntegrityError
from mirror.release import version_key
from mirror.report import ImageResult, ReleaseResult, TargetResult
from mirror.settings import MirrorSettings, TargetSettings

if TYPE_CHECKING:  # sigstore is imported only where a rule applies
    from mirror.engine.signatures import HeldCopy, SignatureGate

# Images worked on at once. Blob transfers have their own, smaller limit; this one keeps the connection pools'
# queues short (httpcore scans its whole queue on every change: 4000 queued look-ups took 100 s).
IMAGES_AT_ONCE = 32
T = TypeVar("T")

# Failures that end one image's copy with a one-line reason; anything else is a bug and propagates.
EXPECTED_FAILURES = (
    RegistryError,
    RegistryUnreachable,
    IntegrityError,
    ManifestError,
    CredentialError,
    BudgetExhausted,
    Interrupted,
)


@dataclass(frozen=True, slots=True)
class Decision:
    """What a target tag needs: nothing (`current`: the digest it verifiably holds), a copy (neither field),
    or to be left alone (`drift`: why)."""

    current: str | None = None
    drift: str | None = None
    children: tuple[str, ...] | None = None  # the current index's children, when verification read them


@dataclass(frozen=True, slots=True)
class SyncOptions:
    target_names: tuple[str, ...] = ()
    dry_run: bool = False
    deep: bool = False
    force: bool = False
    # discovery: a tag already at the source digest counts as mirrored without re-reading its tree, so a
    # release mirrored earlier costs one HEAD per image at the source and per image and target
    trust_matching_tags: bool = False


class Syncer:
    """Runs release jobs over a set of open registry clients. One instance per run: it remembers which
    blobs each target holds and which source trees it has fetched, so nothing is done twice."""

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
        self.shutdown.on_abandon(self.cancel_pending)
        self.clients = clients
        self.options = options
        self.progress = progress
        self._transfer_limit = asyncio.Semaphore(settings.transfer.blob_concurrency)
        self._image_limit = asyncio.Semaphore(IMAGES_AT_ONCE)
        self.spool = Spool(settings.spool.max_bytes, settings.transfer.chunk_size, settings.spool.dir)
        self._blobs: dict[str, TargetBlobs] = {}
        self._trees: dict[str, asyncio.Task[ManifestTree]] = {}
        self._referrers: dict[tuple[str, str, str], asyncio.Task[Found]] = {}
        self._referrer_heads: dict[tuple[str, str, str], asyncio.Task[Found]] = {}
        self._anonymous: dict[str, RegistryClient] = {}
        self._gate: SignatureGate | None = None

    def blobs_at(self, host: str, repositories: frozenset[str]) -> TargetBlobs:
        state = self._blobs.get(host)
        if state is None:
            transfer, retry = self.settings.transfer, self.settings.retry
            state = self._blobs[host] = TargetBlobs(
                self.clients[host],
                self._transfer_limit,
                repositories,
                retry_policy(retry),
                transfer.chunked_upload_threshold,
                transfer.upload_chunk_size,
                self.shutdown,
                transfer.max_blob_size,
            )
        return state

    async def run(self, jobs: list[ReleaseJob]) -> list[ReleaseResult]:
        newest = max((j.version for j in jobs), key=version_key, default=None)
        try:
            return [await self.run_release(job, latest=job.version == newest) for job in jobs]
        finally:
            self.cancel_pending()
            await self.spool.aclose()
            await asyncio.gather(*(c.aclose() for c in self._anonymous.values()))
            if self._gate is not None:
                await self._gate.aclose()

    def origin_for(self, job: ImageJob) -> BlobOrigin:
        """The source repository; through the spool when several targets want the same blobs."""
        source = RegistryOrigin(self.clients[job.source.registry], job.source.name)
        return self.spool.origin(source) if len(job.targets) > 1 else source

    def cancel_pending(self) -> None:
        """Stop transfers nobody waits for any more (their image already failed)."""
        for blobs in self._blobs.values():
            blobs.cancel_pending()
        for task in (*self._trees.values(), *self._referrers.values(), *self._referrer_heads.values()):
            task.cancel()

    async def run_release(self, job: ReleaseJob, latest: bool) -> ReleaseResult:
        for host in {ref.repository.registry for image in job.images for ref in image.targets}:
            repos = frozenset(r.repository.name for i in job.images for r in i.targets if r.repository.registry == host)
            self.blobs_at(host, repos)
        images = await asyncio.gather(*(self._limited(self.run_image(image)) for image in job.images))
        result = ReleaseResult(job.version, dry_run=self.options.dry_run, images=list(images))
        sources = {image.source.registry for image in job.images}
        result.source_rate_limit = next((b for h in sorted(sources) if (b := self.clients[h].rate_limit)), None)
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
        if not chart_verified(job, chart, result, target):
            return
        client = self.clients[api_host(target.registry)]
        try:
            delivery = await deliver(self.settings, job, chart, target, result, client, latest)
        except (*EXPECTED_FAILURES, ChartError) as exc:
            delivery = Delivery(None, f"{chart.spec.name} values for {target.name} not written: {exc}")
        except OSError as exc:  # the output went away or filled up since the run began: none of its files written
            reason = f"{exc.strerror or exc} ({exc.filename})" if exc.filename else str(exc)
            delivery = Delivery(None, f"{chart.spec.name} values for {target.name} not written: {reason}")
        if delivery.values is None:
            result.errors.append(delivery.error or f"{chart.spec.name} values for {target.name} not written")
            self.progress.event(f"{job.version} {chart.spec.name} -> {target.name}: {delivery.error}")
            return
        result.values.append(delivery.values)
        self.progress.event(f"{job.version} {chart.spec.name} -> {target.name}: wrote {delivery.values.path}")

    async def run_image(self, job: ImageJob) -> ImageResult:
        result = ImageResult(job.image.name, job.source_ref)
        source = self.clients[job.source.registry]
        # The target tags are asked for while the source answers: a round trip saved on every image.
        current = {ref.name: self._head_target_tag(job, ref) for ref in job.targets}
        try:
            resolved = await source.head_manifest(job.source.name, job.source_identifier)
        except EXPECTED_FAILURES as exc:
            result.error = str(exc)
        if result.error is None and resolved is None:
            missing = "the pinned digest is no longer served" if job.digest else "tag not found"
            result.error = f"{job.source_ref}: {missing} at the source"
        if result.error is None and resolved is not None:
            result.source_digest = resolved.digest
            if any(ref.target.referrers for ref in job.targets):
                self.look_up_referrers(job, resolved.digest)  # under way while the targets decide
            await self._check_signature(job, resolved.digest, result, current)
        if result.error is not None or resolved is None:
            # answered, not cancelled: a cancelled request still runs to its end (registry/cancelsafe.py), and
            # this image's place among those worked on at once is held until it has
            await asyncio.gather(*current.values(), return_exceptions=True)
            return result
        runs = (self.run_target(job, ref, resolved, current[ref.name]) for ref in job.targets)
        result.targets = list(await asyncio.gather(*runs))
        return result

    async def _check_signature(
        self, job: ImageJob, digest: str, result: ImageResult, current: dict[str, asyncio.Task[Descriptor | None]]
    ) -> None:
        """Where a signature rule names the image: refuse it (an error, nothing copied) unless it verifies."""
        rule = self.settings.signatures.rule_for(job.source.registry, job.source.name)
        if rule is None:
            return
        from mirror.engine.signatures import SignatureGate, check_image

        if self._gate is None:
            signatures, timeout = self.settings.signatures, self.settings.transfer.read_timeout
            retry = retry_policy(self.settings.retry)
            deadline = self.settings.transfer.deadline
            self._gate = SignatureGate.open(signatures.trusted_root, signatures.max_bytes, timeout, retry, deadline)
        try:
            copies = await self._held_copies(job, digest, current)
            source = self.clients[job.source.registry]

            def found() -> asyncio.Future[Found]:  # started only if the source is read
                return asyncio.shield(self.referrers_of(job, digest))

            check = await check_image(self._gate, rule, digest, source, job.source.name, found, copies)
        except EXPECTED_FAILURES as exc:
            result.error = f"{job.source_ref}: signature not checked: {exc}"
            return
        result.signature = check.to_json()
        if check.refused:
            result.error = f"{job.source_ref}@{digest}: not mirrored: {check.refused}"
        else:
            self.progress.event(f"{job.source_ref}: signed by {check.signer} ({check.via})")

    async def _held_copies(
        self, job: ImageJob, digest: str, current: dict[str, asyncio.Task[Descriptor | None]]
    ) -> list[HeldCopy]:
        """Targets whose tag already points at `digest` and that carry what refers to it."""
        from mirror.engine.signatures import HeldCopy

        copies = []
        for ref in job.targets:
            try:
                held = await asyncio.shield(current[ref.name])
            except EXPECTED_FAILURES:
                continue  # run_target reports it
            if ref.target.referrers and held is not None and held.digest == digest:
                client = self.clients[ref.repository.registry]
                copies.append(HeldCopy(ref.name, client, ref.repository.name))
        return copies

    def referrers_of(self, job: ImageJob, digest: str, api: bool = True) -> asyncio.Task[Found]:
        """What refers to a source digest, listed in full, once per run for the gate and every target. `api`:
        False once the source is known to lack the referrers API (its tags are still looked at)."""
        key = (job.source.registry, job.source.name, digest)
        task = self._referrers.get(key)
        if task is None:
            task = self._referrers[key] = asyncio.ensure_future(self._listed(job, digest, api))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # read by whoever needs it, or dropped
        return task

    async def _listed(self, job: ImageJob, digest: str, api: bool) -> Found:
        """The look-up's HEADs, then the fallback index's listing, read from a target that holds its exact bytes
        (an earlier run's copy) where one does, so a re-run sends the source no GET for it."""
        heads = await asyncio.shield(self.look_up_referrers(job, digest, api))
        copies = [(self.clients[ref.repository.registry], ref.repository.name) for ref in job.targets]
        return await read_fallback(heads, self.clients[job.source.registry], job.source.name, copies)

    def look_up_referrers(self, job: ImageJob, digest: str, api: bool = True) -> asyncio.Task[Found]:
        """The HEADs (and the referrers API) of the look-up, started as soon as the source digest is known; the
        fallback index's listing, a manifest GET, is read only when something needs it (`referrers_of`)."""
        key = (job.source.registry, job.source.name, digest)
        task = self._referrer_heads.get(key)
        if task is None:
            source = self.clients[job.source.registry]
            task = self._referrer_heads[key] = asyncio.ensure_future(
                look_up_referrers(source, job.source.name, digest, api)
            )
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return task

    def _head_target_tag(self, job: ImageJob, ref: TargetRef) -> asyncio.Task[Descriptor | None]:
        client = self.clients[ref.repository.registry]
        task = asyncio.ensure_future(client.head_manifest(ref.repository.name, job.tag))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # read by run_target, or dropped
        return task

    def source_tree(self, job: ImageJob, digest: str) -> asyncio.Task[ManifestTree]:
        task = self._trees.get(digest)
        if task is None:
            source = self.clients[job.source.registry]
            concurrency = self.settings.transfer.manifest_concurrency
            task = self._trees[digest] = asyncio.ensure_future(load_tree(source, job.source.name, digest, concurrency))
        return task

    async def run_target(
        self, job: ImageJob, ref: TargetRef, resolved: Descriptor, current: asyncio.Task[Descriptor | None]
    ) -> TargetResult:
        result = TargetResult(ref.name, f"{ref.repository}:{job.tag}")
        try:
            await self._copy_and_verify(job, ref, resolved, current, result)
        except EXPECTED_FAILURES as exc:
            result.action, result.error = "failed", str(exc) + acr.missing_namespace_hint(ref.target.registry, exc)
        if result.error:
            self.progress.event(f"{job.image.name}:{job.tag} -> {ref.name}: FAILED: {result.error}")
        return result

    async def _copy_and_verify(
        self,
        job: ImageJob,
        ref: TargetRef,
        resolved: Descriptor,
        current: asyncio.Task[Descriptor | None],
        result: TargetResult,
    ) -> None:
        """Decide what the target needs, copy what is missing, verify, and record each step in `result`.
        Whether a node can pull the tag anonymously is asked alongside the decision (one round trip saved
        when nothing needs copying) and again after a copy."""
        client = self.clients[ref.repository.registry]
        label = f"{job.image.name}:{job.tag} -> {ref.name}"
        pullable = asyncio.ensure_future(self._pullable(ref, job.tag))
        try:
            decision = await self._decide(job, ref, resolved, await current, client, label)
        except BaseException:
            pullable.cancel()
            raise
        if decision.drift and job.digest and not job.tag.startswith(PINNED_TAG_PREFIX):
            # nodes pull a pinned copy by digest: the chart's tag, moved upstream, need not stop it
            pullable.cancel()
            pinned = replace(job, tag=pinned_tag(job.digest))
            self.progress.event(f"{label}: the tag holds another digest; the pinned copy goes to {pinned.tag}")
            result.reference = f"{ref.repository}:{pinned.tag}"
            await self._copy_and_verify(pinned, ref, resolved, self._head_target_tag(pinned, ref), result)
            return
        if decision.drift:
            pullable.cancel()
            result.error = decision.drift
            return
        if decision.current is not None:
            result.action, result.digest, result.verified = "up-to-date", decision.current, True
            if decision.current != resolved.digest:
                result.rewrite = {"source_digest": resolved.digest, "target_digest": decision.current}
            result.anonymous_pull = await pullable  # the values' pull secret depends on it, every run
            await self._carry_referrers(job, ref, resolved, result, decision.children)
            return
        pullable.cancel()
        stats = await self._copy(job, ref, resolved, client, result, label)
        if stats is None:  # a dry run: planned only
            return
        self._record_copy(result, stats, resolved, label)
        expected_children = [d.digest for d in stats.root.manifests] if stats.root.is_index else None
        check = await self._verify(
            client, ref.repository.name, job.tag, stats.root.digest, expected_children, tag_only=True
        )
        if not check.ok:
            result.error = "verification failed: " + "; ".join(check.problems[:3])
            return
        result.verified = True
        self.progress.event(f"{label}: copied and verified ({stats.root.digest[:19]})")
        result.anonymous_pull = await self._pullable(ref, job.tag)
        await self._carry_referrers(job, ref, resolved, result, tuple(d.digest for d in stats.root.manifests))

    async def _carry_referrers(
        self,
        job: ImageJob,
        ref: TargetRef,
        resolved: Descriptor,
        result: TargetResult,
        children: tuple[str, ...] | None,
    ) -> None:
        """Signatures, attestations and SBOMs of the image's index and of each of its children (as the copy or
        the verification saw them, else read from the target), where the target keeps the source's digest."""
        if not ref.target.referrers:
            return
        if result.digest != resolved.digest:
            reason = "the index was rewritten at this target: what refers to the source digest would not match"
            result.referrers = {"carried": [], "left_out": [{"digest": resolved.digest, "reason": reason}]}
            return
        target = self.clients[ref.repository.registry]
        root = await asyncio.shield(self.referrers_of(job, resolved.digest))
        if children is None:
            children = await self._children_at(target, ref.repository.name, resolved)
        found = [root, *await asyncio.gather(*(asyncio.shield(self.referrers_of(job, c, root.api)) for c in children))]
        parts = await asyncio.gather(
            *(
                carry_referrers(
                    self.clients[job.source.registry],
                    job.source.name,
                    target,
                    ref.repository.name,
                    self._blobs[ref.repository.registry],
                    digest,
                    each,
                    ref.target.attestations,
                )
                for digest, each in zip([resolved.digest, *children], found, strict=True)
            )
        )
        carried = Carried([c for p in parts for c in p.carried], [c for p in parts for c in p.left_out])
        if carried.carried or carried.left_out:
            result.referrers = carried.to_json()
            kinds = ", ".join(sorted({c["kind"] for c in carried.carried})) or "nothing"
            self.progress.event(
                f"{job.image.name}:{job.tag} -> {ref.name}: carried {len(carried.carried)} referrer(s) ({kinds})"
                + (f", left out {len(carried.left_out)}" if carried.left_out else "")
            )

    async def _children_at(self, target: RegistryClient, repository: str, resolved: Descriptor) -> tuple[str, ...]:
        """The child digests of an index, read from the target's verified copy (the source gets no GET)."""
        if resolved.media_type not in INDEX_TYPES:
            return ()
        return tuple(d.digest for d in (await target.get_manifest(repository, resolved.digest)).manifests)

    async def _decide(
        self,
        job: ImageJob,
        ref: TargetRef,
        resolved: Descriptor,
        current: Descriptor | None,
        client: RegistryClient,
        label: str,
    ) -> Decision:
        """Is the target tag already a verified copy of the source (or mirror's rewrite of it), something
        else (drift), or missing or incomplete (copy)?"""
        repository = ref.repository.name
        if current is None:
            return Decision()
        expected = await self._expected_digest(client, repository, current.digest, resolved.digest)
        if current.digest == expected and self.options.trust_matching_tags:
            return Decision(current=expected)
        if current.digest == expected:
            check = await self._verify(client, repository, job.tag, expected, resolved=current)
            if check.ok:
                self.progress.event(f"{label}: up to date, verified ({expected[:19]})")
                return Decision(current=expected, children=check.children)
            self.progress.event(f"{label}: tag present but incomplete ({check.problems[0]}); copying again")
            return Decision()
        if self.options.force:
            return Decision()
        return Decision(
            drift=f"drift: {ref.repository}:{job.tag} points at {current.digest}, the source at "
            f"{resolved.digest}; left alone (release tags should not move; --force overwrites)"
        )

    async def _copy(
        self,
        job: ImageJob,
        ref: TargetRef,
        resolved: Descriptor,
        client: RegistryClient,
        result: TargetResult,
        label: str,
    ) -> CopyStats | None:
        """Plan against the target and push what it lacks, the tag last. None for a dry run."""
        source_tree = await asyncio.shield(self.source_tree(job, resolved.digest))
        platforms = list(job.image.platforms or ref.target.platforms or []) or None
        tree, dropped = apply_policy(source_tree, ref.target.attestations, platforms)
        blobs = self._blobs[ref.repository.registry]
        plan = await plan_target(ref, tree, blobs, client, source_tree.root if dropped else None, dropped)
        result.plan = plan.describe()
        if self.options.dry_run:
            result.action = "planned"
            self.progress.event(f"{label}: would {plan.describe()}")
            return None
        self.progress.event(f"{label}: {plan.describe()}")
        self.progress.expect(plan.bytes_to_copy)
        return await copy_to_target(
            plan,
            job.tag,
            self.origin_for(job),
            client,
            blobs,
            self.settings.transfer.manifest_concurrency,
            ref.target.attestations,
            self.progress.advance,
        )

    def _record_copy(self, result: TargetResult, stats: CopyStats, resolved: Descriptor, label: str) -> None:
        result.action = "copied"
        result.blobs = {outcome.value: stats.counts[outcome] for outcome in BlobOutcome}
        result.bytes_uploaded = stats.bytes_uploaded
        result.digest = stats.root.digest
        if stats.root.digest != resolved.digest:
            result.rewrite = {
                "source_digest": resolved.digest,
                "target_digest": stats.root.digest,
                "dropped": [d.to_json() for d in stats.dropped],
            }
            self.progress.event(
                f"{label}: index rewritten {resolved.digest[:19]} -> {stats.root.digest[:19]}, left out "
                + "; ".join(f"{d.digest[:19]} ({d.platform}: {d.reason})" for d in stats.dropped)
            )

    async def _expected_digest(self, client: RegistryClient, repository: str, current: str, source: str) -> str:
        """What the target tag should point at: the source digest, or a rewrite of it made by this tool
        (recorded in the rewritten index's annotations, read from the target: no source pull)."""
        if current == source:
            return source
        manifest = await client.get_manifest(repository, current)
        return current if source_digest_of(manifest) == source else source

    async def _pullable(self, ref: TargetRef, tag: str) -> bool:
        """Can a node without credentials pull the copy? Decides whether the values need a pull secret."""
        if acr.allows_anonymous_pull(ref.repository.registry) is False:
            return False
        client = self._anonymous_client(ref.repository.registry)
        try:
            return await client.head_manifest(ref.repository.name, tag) is not None
        except EXPECTED_FAILURES:
            return False

    def _anonymous_client(self, host: str) -> RegistryClient:
        client = self._anonymous.get(host)
        if client is None:
            client = self._anonymous[host] = open_client(self.settings, host, anonymous=True)
        return client

    async def _verify(
        self,
        client: RegistryClient,
        repository: str,
        tag: str,
        digest: str,
        children: list[str] | None = None,
        resolved: Descriptor | None = None,
        tag_only: bool = False,
    ) -> Verification:
        concurrency = self.settings.transfer.manifest_concurrency
        return await verify_copy(
            client, repository, tag, digest, self.options.deep, concurrency, children, resolved, tag_only
        )


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
    if not options.dry_run:
        check_writable(settings.output_dir, "output_dir")
    own = clients is None
    clients = clients or Clients(settings)
    try:
        charts = await fetch_install_charts(settings, versions, clients)
        jobs = build_release_jobs(settings, versions, list(options.target_names) or None, charts)
        async with target_locks(settings, jobs, enabled=not options.dry_run):
            await prepare_namespaces(settings, jobs, clients, options.dry_run, progress)
            return await Syncer(settings, clients, options, progress, shutdown).run(jobs)
    finally:
        if own:
            await clients.aclose()
        progress.close()


async def discover_and_sync(
    settings: MirrorSettings, options: SyncOptions, progress: Progress, shutdown: Shutdown | None = None
) -> list[ReleaseResult]:
    """Find the releases the discovery filter selects at the source, then sync each of them. A source that
    cannot be listed raises DiscoveryError with one line, as a failed copy reports one line."""
    if not options.dry_run:
        check_writable(settings.output_dir, "output_dir")
    async with Clients(settings) as clients:
        try:
            versions = await discover(settings, clients[discovery_host(settings)])
        except (*EXPECTED_FAILURES, ChartError) as exc:
            raise DiscoveryError(f"discovery failed: {exc}") from None
        progress.event(f"discovered {len(versions)} release(s): {', '.join(versions) or 'none'}")
        if not versions:
            progress.close()
            return []
        return await sync(settings, versions, replace(options, trust_matching_tags=True), progress, shutdown, clients)
