"""The proof that a values file does what it claims: every image the rendered chart would pull is either a
copy verified at the target in this run, or in a registry the config allows (an ACR registry the chart
already uses, such as kube-scheduler's). Where the values need a pull secret, every rendered pod that pulls
from the target is checked for it too: a pod without it (a chart that renders none there, or renders it in
another form) is named, with the kubectl steps that give its ServiceAccount the secret."""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from mirror.chart.images import PodPull
from mirror.chart.render import Rendering
from mirror.reference import ReferenceError, parse
from mirror.untrusted import clip

MIRRORED, ALLOWED, NOT_MIRRORED = "mirrored", "allowed registry", "NOT MIRRORED"
WITH_SECRET, NO_SECRET, OTHER_FORM = "pull secret", "NO PULL SECRET", "PULL SECRET IN ANOTHER FORM"
RESTARTABLE = ("Deployment", "DaemonSet", "StatefulSet")
REFERENCE_SHOWN = 600  # characters of a rendered image reference in a message: more than any valid one has
SHOWN_LINES = 10  # of the images a render left behind, named in one message (the proof lists them all)


@dataclass(frozen=True, slots=True)
class CheckedImage:
    reference: str
    source: str  # template or values key
    verdict: str
    note: str = ""

    def to_json(self) -> dict[str, str]:
        data = {"image": self.reference, "from": self.source, "verdict": self.verdict}
        return {**data, "note": self.note} if self.note else data


@dataclass(frozen=True, slots=True)
class CheckedPod:
    """A rendered pod that pulls from the target, and whether it carries the values' pull secret by name."""

    pod: PodPull
    verdict: str

    def to_json(self) -> dict[str, str]:
        pod = self.pod
        return {
            "pod": pod.workload,
            "from": pod.source,
            "verdict": self.verdict,
            "service_account": pod.service_account,
        }


@dataclass(frozen=True, slots=True)
class Proof:
    renderer: str
    images: tuple[CheckedImage, ...]
    pods: tuple[CheckedPod, ...] = ()  # with a pull secret: each rendered pod that pulls from the target
    pull_secret: str | None = None

    @property
    def ok(self) -> bool:
        """Every image comes from the target or an allowed registry. A pod without the pull secret does not
        pull from elsewhere: it is a warning with its way through (`secret_warnings`), not a failure."""
        return all(image.verdict != NOT_MIRRORED for image in self.images)

    @property
    def pods_without_secret(self) -> tuple[CheckedPod, ...]:
        return tuple(checked for checked in self.pods if checked.verdict != WITH_SECRET)

    @property
    def secret_twice(self) -> tuple[PodPull, ...]:
        """Each pod that carries the secret twice: its chart adds `global.imagePullSecrets` to its own list (as
        kube-state-metrics does), and server-side apply refuses a pod spec naming one secret twice."""
        secret = self.pull_secret
        return tuple(checked.pod for checked in self.pods if secret and checked.pod.pull_secrets.count(secret) > 1)

    @property
    def secret_in_another_form(self) -> bool:
        """Some pod names the secret in a form its chart does not take (HAMi's `name: map[name:acr-pull]`):
        the values' other form may render right."""
        return any(checked.verdict == OTHER_FORM for checked in self.pods)

    def secret_namespaces(self, release_namespace: str) -> list[str]:
        """Each namespace a pod that pulls from the target runs in (the release's where its manifest names none):
        where the pull secret must be, whatever the pod's verdict."""
        return sorted({checked.pod.namespace or release_namespace for checked in self.pods})

    def secret_warnings(self, release_namespace: str) -> list[str]:
        """One line per pod without the pull secret: which pod, why, and the exact commands that let it pull. At
        most the first few, then how many more: each goes into the values file's header and the report. (The
        kubectl line creates the secret in every namespace these pods run in: `secret_namespaces`.)"""
        secret = self.pull_secret or ""
        lines = [_secret_warning(checked, secret, release_namespace) for checked in self.pods_without_secret]
        return first_few(lines, "pods without the pull secret (the report's proof lists each pod)")

    def failures(self) -> list[str]:
        """Each image not mirrored, as one line of bounded length (the reference, its template and note clipped:
        the render is untrusted); the proof's rows keep them whole."""
        return [
            f"{clip(i.reference, REFERENCE_SHOWN)} ({clip(i.source)}{': ' + i.note if i.note else ''})"
            for i in self.images
            if i.verdict == NOT_MIRRORED
        ]

    def to_json(self) -> dict[str, object]:
        data = {"renderer": self.renderer, "ok": self.ok, "images": [i.to_json() for i in self.images]}
        return {**data, "pods": [p.to_json() for p in self.pods]} if self.pods else data


def _secret_warning(checked: CheckedPod, secret: str, release_namespace: str) -> str:
    pod = checked.pod
    namespace = pod.namespace or release_namespace
    if checked.verdict == OTHER_FORM:
        why = f"names the pull secret in a form its chart does not take ({', '.join(_entries(pod))})"
    else:
        why = "carries no pull secret (its chart renders none there)"
    patch = json.dumps({"imagePullSecrets": [{"name": secret}]}, separators=(",", ":"))
    steps = f"kubectl -n {namespace} patch serviceaccount {pod.service_account} -p '{patch}'"
    if pod.kind in RESTARTABLE:
        steps += f" && kubectl -n {namespace} rollout restart {pod.kind.lower()}/{pod.name}"
    else:
        steps += ", then recreate its pods"
    return (
        f"{pod.workload} ({pod.source}) {why}, so its pods cannot pull from the target: after helm install, run {steps}"
    )


def first_few(
    lines: list[str], what: str = "images the rendered chart pulls from elsewhere", shown: int = SHOWN_LINES
) -> list[str]:
    """The first `shown` lines and one saying how many more `what` there were: what a message carries of a list
    as long as a render makes it."""
    if len(lines) <= shown:
        return lines
    return [*lines[:shown], f"and {len(lines) - shown} more {what}"]


def _entries(pod: PodPull) -> list[str]:
    return [f"name: {name}" for name in pod.pull_secrets] + list(pod.odd_secrets)


def check_rendering(
    rendering: Rendering,
    verified: set[str],
    allowed_registries: list[str],
    named: set[str] | None = None,
    target_prefixes: frozenset[str] = frozenset(),
    pods: Iterable[PodPull] = (),
    pull_secret: str | None = None,
) -> Proof:
    """`verified`: references (`host/repository:tag` and `host/repository@digest`) of the copies verified at
    the target, as nodes pull them; `allowed_registries`: host patterns (`*.aliyuncs.com`) nodes may pull
    from as they are; `named`: the source repositories the chart's values blocks name; `target_prefixes`: the
    target's namespace at each of its hosts (`host/namespace/`), where only a verified copy passes, whatever the
    patterns allow (the target's VPC host is one of `*.aliyuncs.com`: a wrong repository or tag there would
    otherwise pass as allowed; kube-scheduler's google_containers on the same host is another namespace). An image left
    on another registry that no block names (written into a template) is said to be so, with its template.
    With a `pull_secret`, each of the rendered `pods` that pulls from the target is checked for it by name."""
    seen: dict[tuple[str, str], CheckedImage] = {}
    targets = {_repository(reference) for reference in verified}
    for image in rendering.images:
        key = (image.reference, image.source)
        if key not in seen:
            verdict = _verdict(image.reference, verified, allowed_registries, target_prefixes)
            note = ""
            if verdict == NOT_MIRRORED and named is not None and _repository(image.reference) not in {*named, *targets}:
                note = "no values block sets this image"
            seen[key] = CheckedImage(image.reference, image.source, verdict, note)
    checked = check_pods(pods, pull_secret, verified, target_prefixes) if pull_secret else ()
    return Proof(rendering.renderer, tuple(seen.values()), checked, pull_secret)


def check_pods(
    pods: Iterable[PodPull], secret: str, verified: set[str], target_prefixes: frozenset[str]
) -> tuple[CheckedPod, ...]:
    """Each distinct pod with an image at the target (a verified copy, or anything under the target's
    namespace): it carries `secret` by name (`{name: acr-pull}`), names it in another form, or not at all."""
    named = re.compile(rf"(?<![\w.-]){re.escape(secret)}(?![\w.-])")
    checked: dict[PodPull, CheckedPod] = {}
    for pod in pods:
        if pod in checked or not any(_at_target(image, verified, target_prefixes) for image in pod.images):
            continue
        if secret in pod.pull_secrets:
            verdict = WITH_SECRET
        elif any(named.search(entry) for entry in (*pod.pull_secrets, *pod.odd_secrets)):
            verdict = OTHER_FORM
        else:
            verdict = NO_SECRET
        checked[pod] = CheckedPod(pod, verdict)
    return tuple(checked.values())


def _at_target(reference: str, verified: set[str], target_prefixes: frozenset[str]) -> bool:
    try:
        parsed = parse(reference)
    except ReferenceError:
        return False
    return str(parsed) in verified or any(str(parsed.repository).startswith(p) for p in target_prefixes)


def _repository(reference: str) -> str | None:
    try:
        return str(parse(reference).repository)
    except ReferenceError:
        return None


def _verdict(reference: str, verified: set[str], allowed: list[str], target_prefixes: frozenset[str]) -> str:
    try:
        parsed = parse(reference)
    except ReferenceError:
        return NOT_MIRRORED
    if str(parsed) in verified:
        return MIRRORED
    if any(str(parsed.repository).startswith(prefix) for prefix in target_prefixes):
        return NOT_MIRRORED
    if any(fnmatch.fnmatch(parsed.repository.registry, pattern) for pattern in allowed):
        return ALLOWED
    return NOT_MIRRORED
