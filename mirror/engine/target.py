"""One image at one target, as stages that each take the last one's value and return the next:

    decide -> (copy -> verify) -> outcome;  then, for a verified copy: anonymous pull? + carry referrers

`decide` says what the tag needs (`Current | Missing | Drifted`); a copy plans against the target, pushes what
it lacks (the tag last) and verifies the tag; the result is an `Outcome`, from which the report is built."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from mirror import acr
from mirror.engine.blobs import BlobOutcome
from mirror.engine.cache import RunCache
from mirror.engine.copy import CopyStats, copy_to_target
from mirror.engine.jobs import PINNED_TAG_PREFIX, ImageJob, TargetRef, pinned_tag
from mirror.engine.lock import on_lock_lost
from mirror.engine.outcomes import (
    Copied,
    Current,
    Decision,
    Drift,
    Drifted,
    Failed,
    Missing,
    Outcome,
    Planned,
    Refused,
    UpToDate,
    not_landed,
    rewrite_of,
)
from mirror.engine.plan import apply_policy, plan_target
from mirror.engine.policy import is_runnable, policy_of, policy_text, signable, source_digest_of
from mirror.engine.probes import pulls_anonymously
from mirror.engine.referrers import ArtifactSource, Carried, Found, carry_referrers
from mirror.engine.shutdown import Interrupted
from mirror.engine.statecache import ManifestCache
from mirror.engine.tasks import gather_then_raise
from mirror.engine.tree import ManifestTree, known_tree, manifest_by_digest
from mirror.engine.verify import Known, Verification, verify_copy
from mirror.errors import MirrorError
from mirror.oci import INDEX_TYPES, Descriptor, Manifest
from mirror.progress import Progress
from mirror.registry import RegistryClient
from mirror.report import TargetResult
from mirror.settings import MirrorSettings


@dataclass(frozen=True, slots=True)
class SyncOptions:
    target_names: tuple[str, ...] = ()
    dry_run: bool = False
    deep: bool = False
    force: bool = False


@dataclass(frozen=True, slots=True)
class Reached:
    """Where the stages left the tag: the job as copied (its tag, a pinned digest's own where the chart's moved),
    the outcome, and the index's entries where a stage read them."""

    job: ImageJob
    outcome: Outcome
    children: tuple[Descriptor, ...] | None = None


class TargetStages:
    def __init__(self, settings: MirrorSettings, options: SyncOptions, cache: RunCache, progress: Progress) -> None:
        self.settings = settings
        self.options = options
        self.cache = cache
        self.progress = progress
        # another run may take a lost target lock: stop as at shutdown (the run then ends with LockLost)
        on_lock_lost(lambda reason: cache.shutdown.request(settings.shutdown_grace, reason))

    async def run(
        self, job: ImageJob, ref: TargetRef, resolved: Descriptor, current: asyncio.Task[Descriptor | None]
    ) -> TargetResult:
        """Every stage for one target."""
        reference = f"{ref.repository}:{job.tag}"
        try:
            with self.cache.shutdown.abandoned_as_interrupted(reference):
                return await self._stages(job, ref, resolved, current)
        except Interrupted as exc:
            return self._failed(job, ref, reference, exc)

    async def _stages(
        self, job: ImageJob, ref: TargetRef, resolved: Descriptor, current: asyncio.Task[Descriptor | None]
    ) -> TargetResult:
        """Whether a node can pull the tag anonymously is asked alongside the decision, or known from it without
        a request (`_pull_check`), and asked again after a copy."""
        try:
            tag = await current
        except MirrorError as exc:
            return self._failed(job, ref, f"{ref.repository}:{job.tag}", exc)
        pullable = self._pull_check(ref, job.tag, found=tag is not None)
        try:
            reached = await self._reach(job, ref, resolved, tag)
        except MirrorError as exc:
            pullable.cancel()
            return self._failed(job, ref, f"{ref.repository}:{job.tag}", exc)
        reference = f"{ref.repository}:{reached.job.tag}"
        if not isinstance(reached.outcome, (UpToDate, Copied)):
            pullable.cancel()
            self._note_failure(job, ref, reached.outcome)
            return TargetResult(ref.name, reference, reached.outcome)
        if reached.job.tag != job.tag or isinstance(reached.outcome, Copied):
            pullable.cancel()
            pullable = self._pull_check(ref, reached.job.tag, found=True)  # the verification found it
        try:
            anonymous_pull = await pullable  # the values' pull secret depends on it, every run
            carried = await self._carry(reached.job, ref, resolved, reached.outcome, reached.children)
        except MirrorError as exc:
            return self._failed(job, ref, reference, exc)
        return TargetResult(ref.name, reference, reached.outcome, anonymous_pull, carried)

    def _failed(self, job: ImageJob, ref: TargetRef, reference: str, exc: MirrorError) -> TargetResult:
        outcome = not_landed(exc, _reason(ref, exc))
        self._note_failure(job, ref, outcome)
        return TargetResult(ref.name, reference, outcome)

    def _note_failure(self, job: ImageJob, ref: TargetRef, outcome: Outcome) -> None:
        if isinstance(outcome, (Drift, Refused, Failed)):
            self.progress.event(f"{job.image.name}:{job.tag} -> {ref.name}: FAILED: {outcome.reason}")

    async def _reach(self, job: ImageJob, ref: TargetRef, resolved: Descriptor, current: Descriptor | None) -> Reached:
        label = f"{job.image.name}:{job.tag} -> {ref.name}"
        decision = await self.decide(job, ref, resolved, current, label)
        match decision:
            case Drifted() if job.digest and not job.tag.startswith(PINNED_TAG_PREFIX):
                # nodes pull a pinned copy by digest: the chart's tag, moved upstream, need not stop it
                pinned = replace(job, tag=pinned_tag(job.digest))
                self.progress.event(f"{label}: the tag holds another digest; the pinned copy goes to {pinned.tag}")
                return await self._reach(pinned, ref, resolved, await self.cache.target_tag(pinned, ref))
            case Drifted(reason=reason):
                return Reached(job, Drift(reason))
            case Current(digest=digest, children=children):
                return Reached(job, UpToDate(digest, rewrite_of(resolved.digest, digest)), children)
        repair = isinstance(decision, Missing) and decision.incomplete
        copied = await self.copy(job, ref, resolved, label, repair)
        if not isinstance(copied, tuple):
            return Reached(job, copied)
        outcome, stats = copied
        return Reached(job, await self.verify_copied(job, ref, outcome, stats, label, repair), _children(stats))

    async def decide(
        self, job: ImageJob, ref: TargetRef, resolved: Descriptor, current: Descriptor | None, label: str
    ) -> Decision:
        """Is the target tag already a verified copy of what the target's policy builds from the source now (its
        tree, or mirror's rewrite of it), something else (drift), or missing, incomplete or built under another
        `platforms:`/`attestations:` (copy, forced or not)?"""
        if current is None:
            return Missing()
        client, repository = self.cache.clients[ref.repository.registry], ref.repository.name
        judged = await _judge(self.cache, job, ref, resolved, current.digest)
        if isinstance(judged, Holds):
            check = await self._verify(client, repository, job.tag, current.digest, resolved=current)
            if check.ok:
                self.progress.event(f"{label}: up to date, verified ({current.digest[:19]})")
                return Current(current.digest, check.children)
            self.progress.event(f"{label}: tag present but incomplete ({check.problems[0]}); copying again")
            return Missing(incomplete=True)
        if isinstance(judged, Stale):
            self.progress.event(f"{label}: {judged.reason}; copying")
            return Missing()
        if self.options.force:
            return Missing()
        return Drifted(
            f"drift: {ref.repository}:{job.tag} points at {current.digest}, the source at "
            f"{resolved.digest}; left alone (release tags should not move; --force overwrites)"
        )

    async def copy(
        self, job: ImageJob, ref: TargetRef, resolved: Descriptor, label: str, repair: bool = False
    ) -> tuple[Copied, CopyStats] | Planned | Failed | Refused:
        """Plan against the target and push what it lacks, the tag last; a dry run stops at the plan. A `repair`
        (a tag whose tree was found incomplete) plans every image's blobs, not only those of missing manifests."""
        source_tree = await asyncio.shield(self.cache.source_tree(job, resolved.digest))
        tree, dropped = apply_policy(source_tree, ref.target.attestations, job.platforms_at(ref))
        client = self.cache.clients[ref.repository.registry]
        blobs = self.cache.blobs[ref.repository.registry]
        plan = await plan_target(ref, tree, blobs, source_tree.root if dropped else None, dropped, repair)
        described = plan.describe()
        if self.options.dry_run:
            self.progress.event(f"{label}: would {described}")
            return Planned(described)
        self.progress.event(f"{label}: {described}")
        self.progress.expect(plan.bytes_to_copy)
        concurrency = self.settings.transfer.manifest_concurrency
        try:
            stats = await copy_to_target(
                plan,
                job.tag,
                self.cache.origin_for(job),
                client,
                blobs,
                concurrency,
                ref.target.attestations,
                self.progress.advance,
                job.platforms_at(ref),
            )
        except MirrorError as exc:
            return not_landed(exc, _reason(ref, exc), described)
        return self._copied(stats, described, resolved, label), stats

    def _copied(self, stats: CopyStats, plan: str, resolved: Descriptor, label: str) -> Copied:
        rewrite = rewrite_of(resolved.digest, stats.root.digest, stats.dropped)
        if rewrite is not None:
            self.progress.event(
                f"{label}: index rewritten {resolved.digest[:19]} -> {stats.root.digest[:19]}, left out "
                + "; ".join(f"{d.digest[:19]} ({d.platform}: {d.reason})" for d in stats.dropped)
            )
        blobs = {outcome.value: stats.counts[outcome] for outcome in BlobOutcome}
        return Copied(stats.root.digest, plan, blobs, stats.bytes_uploaded, rewrite)

    async def verify_copied(
        self, job: ImageJob, ref: TargetRef, copied: Copied, stats: CopyStats, label: str, repair: bool = False
    ) -> Copied | Failed:
        """After a copy, only the tag: each push was confirmed as it went. After a repair, the whole tree again:
        what was found missing under manifests the copy did not push is confirmed there only by asking."""
        client = self.cache.clients[ref.repository.registry]
        expected_children = [d.digest for d in _children(stats)] if stats.root.is_index else None
        check = await self._verify(
            client, ref.repository.name, job.tag, copied.digest, expected_children, after_copy=True, tag_only=not repair
        )
        if not check.ok:
            return Failed("verification failed: " + "; ".join(check.problems[:3]), copied.plan, copied)
        self.progress.event(f"{label}: copied and verified ({copied.digest[:19]})")
        return copied

    async def _carry(
        self,
        job: ImageJob,
        ref: TargetRef,
        resolved: Descriptor,
        outcome: UpToDate | Copied,
        children: tuple[Descriptor, ...] | None,
    ) -> Carried | None:
        """Signatures, attestations and SBOMs of the image's index and of each of its images (as the copy or the
        verification saw them, else read from the target), where the target keeps the source's digest. Not of its
        attestation manifests: nothing signs those, and asking would cost four look-ups each."""
        if not ref.target.referrers:
            return None
        if outcome.digest != resolved.digest:
            reason = "the index was rewritten at this target: what refers to the source digest would not match"
            every = {"kind": "referrers of", "via": "referrers API and older tags", "subject": resolved.digest}
            return Carried([], [{"digest": resolved.digest, **every, "reason": reason}])
        target = self.cache.clients[ref.repository.registry]
        root = await asyncio.shield(self.cache.referrers_of(job, resolved.digest))
        if children is None:
            children = await _children_at(target, ref.repository.name, resolved, self.cache.manifests)
        subjects = signable(children)
        found = [root, *await asyncio.gather(*(self._shielded_referrers(job, d, root.api) for d in subjects))]
        source = ArtifactSource(
            lambda digest: asyncio.shield(self.cache.source_tree(job, digest)), self.cache.origin_for(job)
        )
        blobs, attestations = self.cache.blobs[ref.repository.registry], ref.target.attestations
        parts = await gather_then_raise(
            carry_referrers(source, target, ref.repository.name, blobs, digest, each, attestations)
            for digest, each in zip([resolved.digest, *subjects], found, strict=True)
        )
        carried = Carried([c for p in parts for c in p.carried], [c for p in parts for c in p.left_out])
        if not (carried.carried or carried.left_out):
            return None
        kinds = ", ".join(sorted({c["kind"] for c in carried.carried})) or "nothing"
        self.progress.event(
            f"{job.image.name}:{job.tag} -> {ref.name}: carried {len(carried.carried)} referrer(s) ({kinds})"
            + (f", left out {len(carried.left_out)}" if carried.left_out else "")
        )
        return carried

    async def _shielded_referrers(self, job: ImageJob, digest: str, api: bool) -> Found:
        return await asyncio.shield(self.cache.referrers_of(job, digest, api))

    def _pull_check(self, ref: TargetRef, tag: str, found: bool) -> asyncio.Future[bool]:
        """Can a node without credentials pull the tag? Decides whether the values need a pull secret; asked now,
        alongside the decision (`probes.pulls_anonymously`: the run's own look at the tag, `found`, where the
        registry never asked this run for credentials)."""
        client = self.cache.clients[ref.repository.registry]
        check = pulls_anonymously(client, self.cache.anonymous_client, ref.repository.name, tag, found)
        return asyncio.ensure_future(check)

    async def _verify(
        self,
        client: RegistryClient,
        repository: str,
        tag: str,
        digest: str,
        children: list[str] | None = None,
        resolved: Descriptor | None = None,
        after_copy: bool = False,
        tag_only: bool = False,
    ) -> Verification:
        """`after_copy`: the run's earlier answers at the target predate its pushes, and are not used; `tag_only`:
        only the tag is asked (each push was confirmed as it went)."""
        concurrency = self.settings.transfer.manifest_concurrency
        probes = None if after_copy else self.cache.blobs[client.host].probes
        known = Known(self.cache.manifests, probes)
        return await verify_copy(
            client, repository, tag, digest, self.options.deep, concurrency, children, resolved, tag_only, known
        )


def _reason(ref: TargetRef, exc: MirrorError) -> str:
    """Why the copy did not land, with how to create an ACR namespace where a missing one is the cause."""
    return str(exc) + acr.missing_namespace_hint(ref.target.registry, exc)


def _children(stats: CopyStats) -> tuple[Descriptor, ...]:
    return tuple(stats.root.manifests)


@dataclass(frozen=True, slots=True)
class Holds:
    """The tag holds what the target's policy builds from the source now: verified, it is current."""


@dataclass(frozen=True, slots=True)
class Stale:
    """The tag holds this source as mirror copied it, but not as the policy builds it now: copied again."""

    reason: str


@dataclass(frozen=True, slots=True)
class Foreign:
    """The tag holds something else: drift, overwritten only with --force."""


Judgement = Holds | Stale | Foreign
OTHER_POLICY = "the index there is not what platforms/attestations select now"


async def _judge(cache: RunCache, job: ImageJob, ref: TargetRef, resolved: Descriptor, current: str) -> Judgement:
    """What the target tag holds, against what the target's `platforms:`/`attestations:` build now. A rewrite
    records the policy it was made under, so a no-op reads no tree; a byte-exact copy is read from the manifests
    an earlier run kept, else from the target (the same bytes as the source's): neither sends the source a GET."""
    if current == resolved.digest:
        if _keeps_every_entry(job, ref, resolved):
            return Holds()
        try:
            held = await asyncio.shield(cache.tree_at_target(ref, current))
        except MirrorError as exc:
            return Stale(f"the copy there cannot be read ({exc})")
        built, _ = apply_policy(held, ref.target.attestations, job.platforms_at(ref))
        return Holds() if built.digest == current else Stale(OTHER_POLICY)
    client = cache.clients[ref.repository.registry]
    index = await manifest_by_digest(client, ref.repository.name, current, cache.manifests)
    if source_digest_of(index) != resolved.digest:
        return Foreign()
    recorded = policy_of(index)
    if recorded is None:  # made before rewrites recorded their policy: judged where the source tree is kept
        source = known_tree(cache.manifests, resolved.digest)
        as_held = source is None or _selects_as_held(source, index, ref, job)
        return Holds() if as_held else Stale(OTHER_POLICY)
    return Holds() if recorded == policy_text(ref.target.attestations, job.platforms_at(ref)) else Stale(OTHER_POLICY)


def _keeps_every_entry(job: ImageJob, ref: TargetRef, resolved: Descriptor) -> bool:
    """Whether the policy leaves the source's tree as it is, known without reading the tree."""
    if resolved.media_type not in INDEX_TYPES:
        return True
    return job.platforms_at(ref) is None and ref.target.attestations != "drop"


def _selects_as_held(source: ManifestTree, held: Manifest, ref: TargetRef, job: ImageJob) -> bool:
    """Does the policy keep the entries `held` (an older rewrite) has, or, under `attestations: auto`, those less
    some non-image entries the target refused (`copy.py`)?"""
    built, _ = apply_policy(source, ref.target.attestations, job.platforms_at(ref))
    kept, selected = {entry.digest for entry in held.manifests}, {child.digest for child in built.children}
    if kept == selected:
        return True
    refused = [(entry, child) for entry, child in built.entries() if child.digest not in kept]
    refusable = ref.target.attestations == "auto" and not any(is_runnable(entry, child) for entry, child in refused)
    return kept < selected and refusable


async def _children_at(
    target: RegistryClient, repository: str, resolved: Descriptor, known: ManifestCache
) -> tuple[Descriptor, ...]:
    """The entries of an index, read from the target's verified copy (the source gets no GET)."""
    if resolved.media_type not in INDEX_TYPES:
        return ()
    return tuple((await manifest_by_digest(target, repository, resolved.digest, known)).manifests)
