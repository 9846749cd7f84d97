"""The images a chart can run, read from its values.yaml and its subcharts': every image reference, wherever it
sits, including those used only with a feature or a subchart enabled, or on an older Kubernetes.

Three shapes are read, and each is written back in its own shape (`values.py`):
- a block with a `registry` key: `{registry: docker.io, repository: projecthami/hami, tag: ..., digest: ...}`;
  `global.imageRegistry`, when set, replaces its registry (the Bitnami convention, which HAMi's chart follows);
- a block without one: `{repository: nvcr.io/nvidia/k8s/dcgm-exporter, tag: ...}`, the host (if any) inside
  `repository` (HAMi-WebUI, dcgm-exporter);
- a string: `image: "quay.io/prometheus/prometheus:v2.54.1"` under a key named `image` (or ending in `Image`).
Either may sit inside a list (`sidecars: [{image: busybox:1.36}]`): it is read and keyed `sidecars[0].image`, with
the list's key (`list_key`), but never written back, since values cannot change one entry of a list without
replacing the whole list (`jobs.py` leaves it behind, named).

A subchart's blocks are keyed under its alias or name in the parent's values (`dcgm-exporter.image`), its
values being the parent's overrides over its own defaults, with the parent's `global` on top, as Helm does.
A subchart switched off by its `condition` or `tags` still has its blocks read (`enabled=False`).

An empty tag is resolved as the templates resolve it: kube-scheduler's from the cluster's Kubernetes version,
else `global.imageTag` (HAMi's release tag), else the chart's appVersion. Rendering with real Helm
(`render.py`, through `tags.py`) is the ground truth; this is what it is checked against, and the fallback, where
the source registry still has the last word between the guess and its `v` twin (`tag_twin`, `engine/charts.py`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal

from mirror.chart.archive import ChartArchive, ChartError
from mirror.chart.merge import deep_merge
from mirror.reference import ReferenceError, Repository, is_valid_digest, is_valid_tag, normalise_repository

DEFAULT_REGISTRY = "docker.io"
MAX_VALUES_DEPTH = 64  # deeper than any real chart; deeper nesting is not walked
MAX_INSTANCES = 256  # subcharts (each alias an instance) read in one chart, at every depth together
# mappings and keys read in one chart's values, its subcharts' merged in as often as they are instances (the
# largest real charts, kube-prometheus-stack with its subcharts, read about 20,000)
MAX_VALUES_NODES = 200_000
MAX_KEY_CHARS = 256  # a values key longer than this is not walked for image blocks
Shape = Literal["block", "repository", "string"]
# how an inferred tag was settled: "" the guess alone, "render" by a Helm render of the chart (`tags.py`), "source"
# by the source registry, which lacked the guess and held its `v` twin (`engine/charts.py`)
TagCheck = Literal["", "render", "source"]
SecretForm = Literal["name", "string"]  # a pull secret entry `{name: acr-pull}` (Kubernetes' own shape) or `acr-pull`
GLOBAL_SECRETS = ("global", "imagePullSecrets")
COMMENTED_ENTRY = re.compile(r"#+\s*-\s+(\S.*)")  # a list entry commented out as an example


@dataclass(frozen=True, slots=True)
class ImageBlock:
    """One image reference in the values: where it sits and what it names, with the tag the chart will use."""

    path: tuple[str, ...]  # e.g. ("scheduler", "extender", "image"), ("dcgm-exporter", "image")
    registry: str
    repository: str  # without the host
    tag: str  # resolved; empty when only a digest names the image
    digest: str | None = None
    shape: Shape = "block"
    tag_from_kube_version: bool = False  # the chart takes it from .Capabilities.KubeVersion
    tag_inferred: bool = False  # empty in the values: taken from global.imageTag or appVersion (tags.py checks)
    registry_from_global: bool = False  # global.imageRegistry named its registry (values.py then clears it)
    enabled: bool = True  # False: it sits in a subchart that is off with the chart's default values
    chart: str = ""  # the subchart holding it ("dcgm-exporter", "kube-prometheus-stack/grafana"); "" for the chart
    # the list it sits in ("sidecars" for `sidecars[0].image`): values cannot point it at a copy without replacing
    # the whole list, which mirror does not write; "" for a block outside any list
    list_key: str = ""
    tag_check: TagCheck = ""  # what settled an inferred tag (`TagCheck`)

    @classmethod
    def at(cls, key: str, registry: str, repository: str, tag: str) -> ImageBlock:
        return cls(tuple(key.split(".")), registry, repository, tag)

    @property
    def key(self) -> str:
        return ".".join(self.path)

    @property
    def source(self) -> Repository:
        return Repository.of(self.registry, self.repository)

    @property
    def in_list(self) -> bool:
        return bool(self.list_key)

    @property
    def reference(self) -> str:
        name = f"{self.registry}/{normalise_repository(self.registry, self.repository)}"
        return name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def kube_tag(kube_version: str) -> str:
    return "v" + kube_version.removeprefix("v")


def tag_twin(tag: str) -> str | None:
    """The other spelling of a version tag (`2.13.0` <-> `v2.13.0`): what a template may make of the same
    appVersion (kube-state-metrics' `v` + appVersion, dcgm-exporter's appVersion as it is); None for a tag that
    does not start with a version number."""
    bare = tag[1:] if tag.startswith("v") else tag
    twin = bare if bare != tag else f"v{tag}"
    return twin if bare[:1].isdigit() and is_valid_tag(twin) else None


def image_blocks(
    chart: ChartArchive, kube_version: str, overrides: dict[str, Any] | None = None, max_images: int | None = None
) -> list[ImageBlock]:
    """Every image reference of the chart and its subcharts, in file order (the chart's own first), with the
    values the user passes (`overrides`) layered over the chart's defaults; more than `max_images` (the setting
    `chart.max_images`) is refused."""
    values = deep_merge(chart.values(), overrides or {})
    budget = _Budget(chart)
    blocks = []
    for block in _chart_blocks(chart, values, (), "", True, kube_version, values.get("tags"), budget):
        blocks.append(block)
        if max_images is not None and len(blocks) > max_images:
            raise ChartError(
                f"chart {chart.name} {chart.version}: {len(blocks)} image blocks found so far, more than "
                f"chart.max_images ({max_images})"
            )
    return blocks


@dataclass
class _Budget:
    """What reading one chart may still cost: subchart instances and values nodes, for untrusted input (a few
    KB of aliases, in the Chart.yaml or in YAML anchors, can otherwise stand for millions)."""

    chart: ChartArchive
    instances: int = MAX_INSTANCES
    nodes: int = MAX_VALUES_NODES

    def instance(self) -> None:
        self.instances -= 1
        if self.instances < 0:
            raise ChartError(f"{self._where}: more than {MAX_INSTANCES} subchart instances (aliases included)")

    def node(self, cost: int = 1) -> None:
        self.nodes -= cost
        if self.nodes < 0:
            raise ChartError(
                f"{self._where}: values too large to read, more than {MAX_VALUES_NODES} mappings and keys with "
                "its subcharts' (YAML aliases?)"
            )

    @property
    def _where(self) -> str:
        return f"chart {self.chart.name} {self.chart.version}"


def _chart_blocks(
    chart: ChartArchive,
    values: dict[str, Any],
    prefix: tuple[str, ...],
    chart_path: str,
    enabled: bool,
    kube_version: str,
    tags: Any,
    budget: _Budget,
) -> Iterator[ImageBlock]:
    scope = _Scope(_global_values(chart, values), chart.app_version, kube_version)
    dependencies = list(_dependencies(chart, values, tags, budget))
    subchart_keys = frozenset(key for _, key, _ in dependencies)
    for found in _walk(values, (), 0, subchart_keys, budget):
        block = scope.block(found.path, found.node)
        if block is not None:
            list_key = ".".join(prefix + found.list_path) if found.list_path else ""
            yield replace(block, path=prefix + block.path, enabled=enabled, chart=chart_path, list_key=list_key)
    for subchart, key, on in dependencies:
        own = subchart.values()
        merged = _merge(own, _mapping(values.get(key)), budget)
        merged["global"] = _merge(_global_values(subchart, own), _mapping(values.get("global")), budget)
        inner = f"{chart_path}/{key}" if chart_path else key
        yield from _chart_blocks(subchart, merged, (*prefix, key), inner, enabled and on, kube_version, tags, budget)


def _dependencies(
    chart: ChartArchive, values: dict[str, Any], tags: Any, budget: _Budget
) -> Iterator[tuple[ChartArchive, str, bool]]:
    """Each subchart with the key its values sit under (alias or name) and whether it is on, as Helm decides:
    the first `condition` path that holds a boolean (in the parent's values over the subchart's own defaults)
    wins, else any true tag turns it on, else it is on. A subchart listed twice under two aliases is two
    instances; one not listed at all is on, under its name."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for entry in chart.dependencies():
        by_name.setdefault(entry["name"], []).append(entry)
    for subchart in chart.subcharts:
        for entry in by_name.get(subchart.name) or [{}]:
            budget.instance()
            key = str(entry.get("alias") or subchart.name)
            scoped = _merge({key: subchart.values()}, values, budget)
            yield subchart, key, _enabled(entry, scoped, tags)


def _merge(base: dict[str, Any], extra: dict[str, Any], budget: _Budget) -> dict[str, Any]:
    """`deep_merge` for two sides from the chart: what it reads is charged to the budget."""
    budget.node(1 + len(extra))
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value, budget)
        else:
            merged[key] = value
    return merged


def every_subchart_on(chart: ChartArchive) -> dict[str, Any]:
    """Values that switch on every subchart, at any depth: each one's first condition set true, every tag
    true. Rendered with them, a chart shows what each of its images really resolves to."""
    on: dict[str, Any] = {}
    tags: dict[str, bool] = {}
    _switch_on(chart, (), on, tags, _Budget(chart))
    return deep_merge(on, {"tags": tags}) if tags else on


def _switch_on(
    chart: ChartArchive, prefix: tuple[str, ...], on: dict[str, Any], tags: dict[str, bool], budget: _Budget
) -> None:
    values = chart.values()
    for subchart, key, _ in _dependencies(chart, values, None, budget):
        entry = next((d for d in chart.dependencies() if str(d.get("alias") or d["name"]) == key), {})
        condition = str(entry.get("condition") or "").split(",")[0].strip()
        if condition and condition.count(".") < MAX_VALUES_DEPTH:
            node: Any = on
            *parents, leaf = (*prefix, *condition.split("."))
            for part in parents:
                node = node.setdefault(part, {}) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node[leaf] = True
        wanted = entry.get("tags")
        tags.update({str(tag): True for tag in wanted} if isinstance(wanted, list) else {})
        _switch_on(subchart, (*prefix, key), on, tags, budget)


def _enabled(entry: dict[str, Any], values: dict[str, Any], tags: Any) -> bool:
    for condition in str(entry.get("condition") or "").split(","):
        value = _lookup(values, condition.strip())
        if isinstance(value, bool):
            return value
    wanted = entry.get("tags")
    if isinstance(wanted, list) and wanted and isinstance(tags, dict):
        states = [tags.get(t) for t in wanted if isinstance(tags.get(t), bool)]
        if states:
            return any(states)
    return True


def _lookup(values: dict[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in dotted.split(".") if dotted else ():
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node if dotted else None


def _global_values(chart: ChartArchive, values: dict[str, Any]) -> dict[str, Any]:
    """`global`, where the fields mirror reads have the shapes Helm's convention gives them; else one line."""
    found = values.get("global")
    if found is None:
        return {}
    where = f"chart {chart.name} {chart.version}: values"
    if not isinstance(found, dict):
        raise ChartError(f"{where}: global is a {type(found).__name__}, not a mapping")
    for key in ("imageRegistry", "imageTag"):
        if isinstance(found.get(key), (dict, list)):
            raise ChartError(f"{where}: global.{key} is a {type(found[key]).__name__}, not a string")
    return found


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class _Scope:
    """What an empty tag or a missing registry resolves to in one chart."""

    global_values: dict[str, Any]
    app_version: str
    kube_version: str

    def block(self, path: tuple[str, ...], node: dict[str, Any] | str) -> ImageBlock | None:
        if isinstance(node, str):
            return self._string(path, node)
        repository = _text(node.get("repository"))
        global_registry = _text(self.global_values.get("imageRegistry"))
        if "registry" in node:
            registry = global_registry or _text(node.get("registry"))
            shape: Shape = "block"
        else:
            registry, shape = "", "repository"
        if not registry:
            registry, repository = split_host(repository)
        digest = _text(node.get("digest")) or None
        if digest is not None and not is_valid_digest(digest):
            return None  # not a digest a node could pull by
        tag = _text(node.get("tag"))
        from_kube = not tag and repository.rsplit("/", 1)[-1] == "kube-scheduler"
        if from_kube:
            tag = kube_tag(self.kube_version)
        inferred = not tag and digest is None
        if inferred:
            tag = _text(self.global_values.get("imageTag")) or self.app_version
        if (tag and not is_valid_tag(tag)) or not (tag or digest):
            return None  # nothing the chart could pull with: not an image block
        try:
            Repository.of(registry, repository)
        except ReferenceError:
            return None
        from_global = shape == "block" and bool(global_registry)
        return ImageBlock(path, registry, repository, tag, digest, shape, from_kube, inferred, from_global)

    def _string(self, path: tuple[str, ...], text: str) -> ImageBlock | None:
        parsed = parse_image(text)
        if parsed is None:
            return None
        registry, repository, tag, digest = parsed
        return ImageBlock(path, registry, repository, tag, digest, "string")


def parse_image(text: str) -> tuple[str, str, str, str | None] | None:
    """`[host/]repo[:tag][@digest]` as a node pulls it -> (registry, repository, tag, digest), the tag kept when
    a digest follows it (`repository.parse` keeps only the digest); None for a name with neither, or invalid."""
    name, at, digest = text.strip().partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    if not (tag or at):
        return None  # no tag or digest: a name, not something a node pulls
    if (at and not is_valid_digest(digest)) or (tag and not is_valid_tag(tag)):
        return None
    registry, repository = split_host(name[: len(name) - len(last)] + last.split(":", 1)[0])
    try:
        Repository.of(registry, repository)
    except ReferenceError:
        return None
    return registry, repository, tag, digest or None


def split_host(repository: str) -> tuple[str, str]:
    """`nvcr.io/nvidia/k8s/dcgm-exporter` -> (nvcr.io, nvidia/k8s/dcgm-exporter); a name with no host is Docker
    Hub's, as docker reads it."""
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return DEFAULT_REGISTRY, repository


def _text(value: Any) -> str:
    return "" if value is None or isinstance(value, (dict, list)) else str(value).strip()


@dataclass(frozen=True, slots=True)
class _Found:
    """An image block or string in the values: its path (`("sidecars[0]", "image")` inside a list) and, inside
    a list, the path of the outermost list (`("sidecars",)`)."""

    path: tuple[str, ...]
    node: dict[str, Any] | str
    list_path: tuple[str, ...] = ()


def _walk(
    node: Any, path: tuple[str, ...], depth: int, skip: frozenset[str], budget: _Budget, list_path: tuple[str, ...] = ()
) -> Iterator[_Found]:
    """Image blocks and image strings below `node`, in mappings and in lists (`sidecars: [{image: ...}]`);
    `skip`: top-level keys that hold a subchart's values (read with the subchart)."""
    if not isinstance(node, dict) or depth > MAX_VALUES_DEPTH:
        return
    budget.node(1 + len(node))
    if isinstance(node.get("repository"), str) and node["repository"].strip() and _names_a_version(node):
        yield _Found(path, node, list_path)
        return
    for key, child in node.items():
        if not isinstance(key, str) or len(key) > MAX_KEY_CHARS:
            continue
        if depth == 0 and (key in skip or key in ("global", "tags")):
            continue
        if isinstance(child, str) and (key == "image" or key.endswith("Image")):
            if child.strip():
                yield _Found((*path, key), child, list_path)
        elif isinstance(child, dict):
            yield from _walk(child, (*path, key), depth + 1, frozenset(), budget, list_path)
        elif isinstance(child, list):
            yield from _walk_list(child, (*path, key), depth + 1, budget, list_path or (*path, key))


def _walk_list(
    items: list[Any], path: tuple[str, ...], depth: int, budget: _Budget, list_path: tuple[str, ...]
) -> Iterator[_Found]:
    """The mappings of a list (and of lists in it), each as `key[index]`."""
    if depth > MAX_VALUES_DEPTH:
        return
    budget.node(1 + len(items))
    *parents, key = path
    for index, item in enumerate(items):
        where = (*parents, f"{key}[{index}]")
        if isinstance(item, dict):
            yield from _walk(item, where, depth + 1, frozenset(), budget, list_path)
        elif isinstance(item, list):
            yield from _walk_list(item, where, depth + 1, budget, list_path)


def _names_a_version(node: dict[str, Any]) -> bool:
    return any(key in node for key in ("registry", "tag", "digest"))


@dataclass(frozen=True, slots=True)
class PullSecretPlace:
    """A list of pull secrets in the values, and the form its chart's templates take an entry in."""

    path: tuple[str, ...]  # ("global", "imagePullSecrets"), ("dcgm-exporter", "imagePullSecrets")
    form: SecretForm

    def entry(self, name: str) -> str | dict[str, str]:
        return {"name": name} if self.form == "name" else name

    def other_form(self) -> PullSecretPlace:
        return PullSecretPlace(self.path, "string" if self.form == "name" else "name")


def pull_secret_paths(chart: ChartArchive) -> list[PullSecretPlace]:
    """Where the chart and its subcharts take a list of pull secrets: `global.imagePullSecrets` first, then each
    list outside `global` (HAMi-WebUI's top-level `imagePullSecrets`, dcgm-exporter's under its key), so a pull
    secret reaches every pod. Each in the form its chart's values.yaml suggests (`suggested_form`), else in
    `global` the Bitnami convention, a plain name (HAMi's `common.images.pullSecrets` renders `- name: {{ . }}`
    per entry; the charts that take both forms accept it), and elsewhere the Kubernetes field's own shape,
    `{name: ...}` (what a template's `toYaml` passes through). The render proof checks the result."""
    places = list(_secret_places(chart, (), _Budget(chart)))
    hints = (suggested_form(part, GLOBAL_SECRETS) for part in _every_chart(chart, _Budget(chart)))
    global_form: SecretForm = next((hint for hint in hints if hint is not None), "string")
    return [PullSecretPlace(GLOBAL_SECRETS, global_form), *places]


def _secret_places(chart: ChartArchive, prefix: tuple[str, ...], budget: _Budget) -> Iterator[PullSecretPlace]:
    values = chart.values()
    if isinstance(values.get("imagePullSecrets"), list):
        form = suggested_form(chart, ("imagePullSecrets",)) or "name"
        yield PullSecretPlace((*prefix, "imagePullSecrets"), form)
    for subchart, key, _ in _dependencies(chart, values, None, budget):
        yield from _secret_places(subchart, (*prefix, key), budget)


def _every_chart(chart: ChartArchive, budget: _Budget) -> Iterator[ChartArchive]:
    """The chart, then its subcharts at every depth, in file order."""
    yield chart
    for subchart, _, _ in _dependencies(chart, chart.values(), None, budget):
        yield from _every_chart(subchart, budget)


def suggested_form(chart: ChartArchive, path: tuple[str, ...]) -> SecretForm | None:
    """The form of pull secret entries the chart's values.yaml shows at `path`: its default's entries when the
    list has any, else the example commented beside the key (HAMi's `##   - myRegistryKeySecretName`,
    kube-prometheus-stack's `# - name: "image-pull-secret"`); None when it shows neither."""
    default = _lookup(chart.values(), ".".join(path))
    if isinstance(default, list) and default:
        return "name" if isinstance(default[0], dict) else "string"
    text = chart.files.get("values.yaml", b"").decode("utf-8", "replace")
    for comment in _comments_beside(text.splitlines(), path):
        example = COMMENTED_ENTRY.match(comment)
        if example:
            return "name" if example.group(1).startswith("name:") else "string"
    return None


def _comments_beside(lines: list[str], path: tuple[str, ...]) -> Iterator[str]:
    """The comment lines right above and right below the line that sets `path` in a block mapping, nearest
    first; nothing where the path is not written that way."""
    depth, parent = 0, -1  # keys matched, the last one's indentation
    child: int | None = 0  # the indentation of its children (None: not seen yet)
    for number, line in enumerate(lines):
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        own = len(line) - len(stripped)
        if own <= parent:
            return  # the block that held the rest of the path ended
        child = own if child is None else child
        key, colon, _ = stripped.partition(":")
        if own == child and colon and key.strip().strip("'\"") == path[depth]:
            depth, parent, child = depth + 1, own, None
            if depth == len(path):
                yield from _comment_run(reversed(lines[:number]))
                yield from _comment_run(lines[number + 1 :])
                return


def _comment_run(lines: Iterable[str]) -> Iterator[str]:
    for line in lines:
        if not line.lstrip().startswith("#"):
            return
        yield line.strip()


# --- what a rendered manifest pulls, pod by pod ---------------------------------------------------------------

POD_SPEC_LISTS = ("containers", "initContainers", "ephemeralContainers")
FREE_FORM_KEYS = ("data", "stringData", "binaryData", "annotations", "labels")


@dataclass(frozen=True, slots=True)
class PodPull:
    """A pod a rendered manifest makes the cluster run (a pod template of any workload, hooks included, a Pod, a
    custom resource whose `spec.image` an operator runs), with its images and the credentials it pulls them with."""

    kind: str  # the manifest's: Deployment, DaemonSet, Job, CronJob, Prometheus...
    name: str
    namespace: str  # "" where the manifest leaves it to the release's
    source: str  # the template it came from
    images: tuple[str, ...]
    pull_secrets: tuple[str, ...]  # the names its `imagePullSecrets` entries give (`{name: ...}`)
    odd_secrets: tuple[str, ...] = ()  # entries of another shape (a bare string), as text
    service_account: str = "default"

    @property
    def workload(self) -> str:
        return f"{self.kind} {self.name}".strip()

    @property
    def chart_keys(self) -> tuple[str, ...]:
        """The values keys of the subchart whose template made it, from its template's path as Helm names it
        (`webui/charts/kube-prometheus-stack/charts/kube-state-metrics/templates/...`, an alias in place of a
        name); () for the chart's own."""
        parts = self.source.split(" ", 1)[0].split("/")
        keys: list[str] = []
        for at in range(1, len(parts) - 1, 2):
            if parts[at] != "charts":
                break
            keys.append(parts[at + 1])
        return tuple(keys)


def pod_pulls(document: Any, source: str) -> Iterator[PodPull]:
    """Each pod of one rendered document."""
    if not isinstance(document, dict):
        return
    metadata = _mapping(document.get("metadata"))
    kind, name = str(document.get("kind") or ""), str(metadata.get("name") or "")
    for spec in _pod_specs(document):
        names, odd = _secret_entries(spec.get("imagePullSecrets"))
        account = _text(spec.get("serviceAccountName")) or _text(spec.get("serviceAccount")) or "default"
        images = tuple(_spec_images(spec))
        yield PodPull(kind, name, _text(metadata.get("namespace")), source, images, names, odd, account)


def _pod_specs(document: dict[str, Any]) -> Iterator[dict[str, Any]]:
    spec = document.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("image"), str) and "containers" not in spec:
        yield spec  # a custom resource the operator runs as pods (Prometheus, Alertmanager)
    else:
        yield from _nested_pod_specs(document)


def _nested_pod_specs(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list):
            yield node
            return
        for key, child in node.items():
            if key not in FREE_FORM_KEYS:
                yield from _nested_pod_specs(child)
    elif isinstance(node, list):
        for child in node:
            yield from _nested_pod_specs(child)


def _spec_images(spec: dict[str, Any]) -> Iterator[str]:
    if isinstance(spec.get("image"), str) and spec["image"].strip():
        yield spec["image"]
    for key in POD_SPEC_LISTS:
        for container in spec.get(key) or []:
            if isinstance(container, dict) and isinstance(container.get("image"), str):
                yield container["image"]


def _secret_entries(entries: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the names of `{name: ...}` entries, every other entry as text)."""
    names, odd = [], []
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            names.append(entry["name"])
        else:
            odd.append(str(entry))
    return tuple(names), tuple(odd)
