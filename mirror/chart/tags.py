"""Empty image tags as the templates really resolve them. A block whose values leave the tag empty gets one from
the template: HAMi's from `global.imageTag`, dcgm-exporter's from the chart's appVersion, kube-state-metrics'
from `v` + appVersion. `images.py` guesses the first two; real Helm knows. So the chart is rendered once with
its default values and every subchart switched on, and each such block takes the one tag its repository is
rendered with (`tag_check="render"`). Where the render is ambiguous, the guess stands, and the render proof after
the copy is still the judge. Where it never shows the repository, as without Helm (the values-only renderer,
`auto` where no Helm is installed) or where Helm refuses the chart, the block comes back unchecked: the source
registry then settles the guess against its `v` twin (`engine/charts.py`). A render over its bounds (a template
that loops) stops the run here, before anything is copied."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from mirror.chart.archive import ChartArchive, ChartError
from mirror.chart.images import ImageBlock, every_subchart_on, parse_image
from mirror.chart.merge import deep_merge
from mirror.chart.render import (
    DEFAULT_BOUNDS,
    RenderBoundExceeded,
    RenderBounds,
    Renderer,
    RenderRequest,
    render_images,
)
from mirror.reference import Repository

log = logging.getLogger("mirror")


def resolve_tags(
    archive: ChartArchive,
    blocks: list[ImageBlock],
    request: RenderRequest,
    renderer: Renderer,
    overrides: dict[str, Any] | None = None,
    bounds: RenderBounds = DEFAULT_BOUNDS,
) -> list[ImageBlock]:
    """`blocks` with each inferred tag replaced by the one Helm renders for its repository, and marked as settled
    by the render; unchanged where no Helm rendered the chart. Synchronous (Helm runs in a child process, waited
    for): callers run it in a thread."""
    if not any(block.tag_inferred for block in blocks) or renderer == "values":
        return blocks
    values = deep_merge(overrides or {}, every_subchart_on(archive))
    try:
        rendering = render_images(archive, values, request, renderer, bounds)
    except RenderBoundExceeded:
        raise
    except ChartError as exc:
        log.warning("chart %s %s: tags left as the values say (%s)", archive.name, archive.version, exc)
        return blocks
    if rendering.renderer.startswith("values.yaml"):
        return blocks
    rendered: dict[str, set[str]] = {}
    for image in rendering.images:
        found = _repository_and_tag(image.reference)
        if found is not None:
            rendered.setdefault(found[0], set()).add(found[1])
    resolved = []
    for block in blocks:
        tags = rendered.get(str(block.source), set())
        if not block.tag_inferred:
            resolved.append(block)
        elif len(tags) == 1:  # the set is shared by the repository's blocks
            resolved.append(replace(block, tag=next(iter(tags)), tag_check="render"))
        elif tags:
            resolved.append(replace(block, tag_check="render"))  # ambiguous: the render proof judges the guess
        else:
            resolved.append(block)  # never rendered: nothing settled it (the source may, `engine/charts.py`)
    return resolved


def _repository_and_tag(reference: str) -> tuple[str, str] | None:
    """(`registry/repository` as `Repository` spells it, tag) of a rendered reference with a tag."""
    parsed = parse_image(reference)
    if parsed is None or not parsed[2]:
        return None
    registry, repository, tag, _ = parsed
    return str(Repository.of(registry, repository)), tag
