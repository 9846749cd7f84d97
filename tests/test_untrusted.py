"""The bounded YAML loader: real-sized documents load as PyYAML loads them; every way of making a small text cost
a lot is refused while it is read, in one line naming the text and the bound."""

from __future__ import annotations

import re
import resource
import time

import pytest
import yaml

from mirror.chart.archive import VALUES_YAML_LIMITS
from mirror.chart.render import MANIFEST_YAML_LIMITS
from mirror.untrusted import MAX_NUMBER_CHARACTERS, UntrustedInput, YamlLimits, clip, load_yaml, load_yaml_all

LIMITS = YamlLimits(max_bytes=1024 * 1024, max_depth=20, max_nodes=10_000)


def values_like_kube_prometheus_stack(sections: int = 125) -> str:
    """About 5000 lines shaped like kube-prometheus-stack's values.yaml: comments, image blocks, lists of
    mappings, a few anchors used a few times and a merge key."""
    lines = ["defaults: &defaults", "  resources: {}", "  nodeSelector: {}", "  tolerations: []", ""]
    for i in range(sections):
        lines += [
            f"## Component {i}",
            "##",
            f"component{i}:",
            "  enabled: true",
            "  image:",
            "    registry: quay.io",
            f"    repository: prometheus/component{i}",
            '    tag: "v1.2.3"',
            '    sha: ""',
            "  serviceMonitor:",
            "    interval: 30s",
            "    relabelings:",
            "      - sourceLabels: [__meta_kubernetes_pod_node_name]",
            "        separator: ;",
            "        regex: ^(.*)$",
            "        targetLabel: nodename",
            "        replacement: $1",
            "        action: replace",
            "    metricRelabelings: []",
            "  podSecurityContext: &security" if i == 0 else "  podSecurityContext: *security",
            "    runAsNonRoot: true" if i == 0 else "",
            "    runAsUser: 65534" if i == 0 else "",
            "  scheduling:",
            "    <<: *defaults",
            "    priorityClassName: ''",
            "  # a comment line, as the real file has many",
            "  extraArgs:",
            "    - --log.level=info",
            "    - --web.enable-lifecycle",
            "  service:",
            "    port: 9090",
            "    type: ClusterIP",
            "    annotations: {}",
            "",
        ]
        lines += ["  # more comments"] * 6
    return "\n".join(lines) + "\n"


def test_a_values_file_the_size_of_kube_prometheus_stacks_loads_as_pyyaml_loads_it() -> None:
    text = values_like_kube_prometheus_stack()
    assert len(text.splitlines()) > 5000
    loaded = load_yaml(text, "values.yaml", VALUES_YAML_LIMITS)
    assert loaded == yaml.safe_load(text)
    assert loaded["component7"]["podSecurityContext"] == {"runAsNonRoot": True, "runAsUser": 65534}
    assert loaded["component7"]["scheduling"]["tolerations"] == []


def test_several_documents_load_and_share_one_set_of_limits() -> None:
    assert load_yaml_all("a: 1\n---\nb: [1, 2]\n---\n", "manifests", LIMITS) == [{"a": 1}, {"b": [1, 2]}, None]
    many = "---\n".join(f"k: [{', '.join(['1'] * 99)}]\n" for _ in range(120))  # 101 nodes each: 12,120
    with pytest.raises(UntrustedInput, match="manifests: more than 10000 YAML nodes"):
        load_yaml_all(many, "manifests", LIMITS)


def billion_laughs(levels: int = 9) -> str:
    lines = [f"l0: &l0 [{', '.join(['lol'] * 10)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


HOSTILE = [
    ("alias bomb", billion_laughs(), "more than 10000 YAML nodes with its aliases expanded"),
    (
        "merge-key bomb",
        "a0: &a0 {k: 1}\n" + "".join(f"a{i}: &a{i} {{<<: [{', '.join([f'*a{i - 1}'] * 10)}]}}\n" for i in range(1, 9)),
        "more than 10000 YAML nodes",
    ),
    ("an alias inside what it names", "a: &a [1, *a]\n", "a YAML alias inside what it names"),
    ("nested 21 deep", "a: " + "[" * 21 + "]" * 21, "YAML nested more than 20 deep"),
    ("nested 5000 deep", "a: " + "[" * 5000 + "]" * 5000, "not usable YAML"),
    ("block nesting", "".join(f"{' ' * i}k{i}:\n" for i in range(30)) + " " * 30 + "x\n", "nested more than 20"),
    # an anchor 15 deep is within the limit, and so is the alias's position; together they are 25 deep
    ("an alias deepens", "a: &a " + "[" * 15 + "]" * 15 + "\nb: " + "[" * 10 + "*a" + "]" * 10, "more than 20 deep"),
    ("over the byte limit", "a: " + "x" * (1024 * 1024), "1048579 characters of YAML (limit 1048576)"),
    ("a long integer", "a: " + "9" * (MAX_NUMBER_CHARACTERS + 1), f"an integer of {MAX_NUMBER_CHARACTERS + 1}"),
    ("a base-60 integer", "a: 1" + ":00" * 100_000, "an integer of 300001 characters"),
    ("not YAML", "a: [1\nb: 2", "not usable YAML"),
    ("an unknown tag", "a: !!python/object:os.system x", "not usable YAML"),
]


@pytest.mark.parametrize(("case", "text", "message"), HOSTILE, ids=[case[0] for case in HOSTILE])
def test_hostile_yaml_is_refused_in_one_line_while_it_is_read(case: str, text: str, message: str) -> None:
    started = time.monotonic()
    with pytest.raises(UntrustedInput, match=re.escape(message)) as refused:
        load_yaml(text, "chart x 1.0.0: values.yaml", LIMITS)
    line = str(refused.value)
    assert line.startswith("chart x 1.0.0: values.yaml: ") and "\n" not in line and len(line) < 500
    assert time.monotonic() - started < 30  # generous: each is refused in milliseconds, expanded it is hours


def test_a_bomb_is_refused_before_anything_is_expanded() -> None:
    """The default limits of a chart's values.yaml against 10**9 strings by reference: refused with the memory
    of a process that has done nothing."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(UntrustedInput, match="more than 500000 YAML nodes"):
        load_yaml(billion_laughs(), "values.yaml", VALUES_YAML_LIMITS)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50 * 1024  # KiB: under 50 MB


def test_text_from_the_input_in_a_message_is_cut_short() -> None:
    with pytest.raises(UntrustedInput) as refused:
        load_yaml("a: *" + "x" * 100_000, "index.yaml", LIMITS)
    assert "undefined alias" in str(refused.value) and len(str(refused.value)) < 500


def test_rendered_manifests_nested_to_their_limit_load() -> None:
    """CRD schemas are the deepest YAML a chart renders; 200 deep (their limit) still loads, recursion and all."""
    deepest = MANIFEST_YAML_LIMITS.max_depth
    (document,) = load_yaml_all("[" * deepest + "]" * deepest, "templates/crd.yaml", MANIFEST_YAML_LIMITS)
    depth, node = 1, document
    while node:
        depth, node = depth + 1, node[0]
    assert depth == deepest
    with pytest.raises(UntrustedInput, match="nested more than 200 deep"):
        load_yaml_all("[" * (deepest + 1) + "]" * (deepest + 1), "templates/crd.yaml", MANIFEST_YAML_LIMITS)


def test_aliases_within_the_limits_load_as_shared_values() -> None:
    loaded = load_yaml("a: &a {x: [1, 2]}\nb: *a\nc: *a\n", "values.yaml", LIMITS)
    assert loaded == {"a": {"x": [1, 2]}, "b": {"x": [1, 2]}, "c": {"x": [1, 2]}}
    assert load_yaml("", "values.yaml", LIMITS) is None


@pytest.mark.parametrize(
    ("shown", "escaped"),
    [("\x1b[2J", "\\x1b[2J"), ("\x9b2J", "\\x9b2J"), ("\x85", "\\x85"), ("evil\u202egpj.exe", "evil\\u202egpj.exe")],
)
def test_clip_leaves_no_character_that_moves_the_cursor_or_reorders_the_line(shown: str, escaped: str) -> None:
    """An 8-bit CSI (U+009B) drives a terminal as ESC [ does; U+202E shows what follows backwards."""
    assert clip(f"image {shown}") == f"image {escaped}"
    assert clip(f"image {shown}" + "x" * 3000).startswith(f"image {escaped}")
