"""Input from outside (a chart repository, a webhook, a registry's error body) read within bounds, and text
from it cut short before it reaches a message, a log line or a stored job.

YAML from outside (a chart repository's index.yaml, a chart's Chart.yaml and values.yaml, what Helm renders) is
read by `load_yaml`: PyYAML's safe loader with a composer that counts, as it composes, the size and depth each
node has with its aliases expanded, so an alias bomb is refused at the first node over a limit, in
milliseconds, instead of when something walks, copies or serialises what it stands for."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, ScalarEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from mirror.errors import Kind, MirrorError

try:
    from yaml._yaml import CParser as _Parser  # libyaml: parses about ten times faster
except ImportError:  # PyYAML built without libyaml

    class _Parser(Reader, Scanner, Parser):  # type: ignore[no-redef]
        def __init__(self, stream: bytes | str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)


MAX_SHOWN = 300  # characters of someone else's text an error message may carry


def load_json(text: str | bytes) -> Any:
    """`json.loads`, with nesting deeper than Python's parser can recurse refused as malformed JSON (a
    ValueError, which every reader of JSON from outside handles) instead of a RecursionError, which no
    caller expects: a few KB of brackets in a manifest or a token answer would otherwise end the run."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


# C0 and C1 controls and DEL (a terminal reads an 8-bit CSI too), and the marks that reorder text on screen
_CONTROLS = (*range(32), *range(127, 160))
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_ESCAPES = (
    {code: f"\\x{code:02x}" for code in _CONTROLS}
    | {code: f"\\u{code:04x}" for code in _BIDI}
    | {10: "\\n", 13: "\\r", 9: "\\t"}
)


def docker_auth(auth: str) -> tuple[str, str, str] | None:
    """A docker config's `auth` (base64 of user:password) decoded and partitioned at its first colon: (username,
    ":", password), the colon "" where there is none; None where it is not base64 of UTF-8 text."""
    try:
        return base64.b64decode(auth, validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None


def is_number(text: str) -> bool:
    """ASCII digits only, at least one: `str.isdigit` also takes `²` (which int() refuses) and other scripts'
    digits (which it reads), in a header or a value from outside either is a traceback or a number nobody wrote."""
    return text.isascii() and text.isdigit()


def clip(text: str, limit: int = MAX_SHOWN) -> str:
    """`text` as one line of at most about `limit` characters: control characters escaped, the middle cut out
    (saying how much) when it is longer."""
    line = text.translate(_ESCAPES) if len(text) <= limit else ""
    if len(text) <= limit and len(line) <= limit:
        return line
    keep = max(limit // 2 - 10, 1)
    head, tail = text[:keep].translate(_ESCAPES)[:keep], text[-keep:].translate(_ESCAPES)[-keep:]
    return f"{head}...[{len(text) - 2 * keep} characters cut]...{tail}"


class UntrustedInput(MirrorError, ValueError):
    """Input from outside refused: the message is one line naming what was read and the bound it broke."""

    kind = Kind.SOURCE


@dataclass(frozen=True, slots=True)
class YamlLimits:
    """What one YAML text from outside may cost. Nodes are counted as a reader of the loaded data meets them: an
    alias counts every node of what it names, each time it is used, so anchors cannot multiply a small text."""

    max_bytes: int
    max_depth: int  # mappings and sequences inside each other, aliases expanded
    max_nodes: int  # scalars, mappings and sequences, aliases expanded


MAX_NUMBER_CHARACTERS = 4300  # an int longer than this is refused (Python's own limit for int(str)); `1:0:0:...`
# (YAML 1.1's base 60) would otherwise multiply ever larger integers


def load_yaml(text: bytes | str, what: str, limits: YamlLimits) -> Any:
    """The one YAML document in `text` (None when empty), refused with `UntrustedInput` as soon as it breaks a
    limit, before anything is expanded. `what` names it in the message (`chart hami 2.10.0: values.yaml`)."""
    with _reading(text, what, limits) as loader:
        return loader.get_single_data()


def load_yaml_all(text: bytes | str, what: str, limits: YamlLimits) -> list[Any]:
    """Every document in `text`, under one set of limits for the whole text."""
    documents = []
    with _reading(text, what, limits) as loader:
        while loader.check_node():
            documents.append(loader.get_data())
    return documents


@contextmanager
def _reading(text: bytes | str, what: str, limits: YamlLimits) -> Iterator[_Loader]:
    if len(text) > limits.max_bytes:  # characters of a str: at most as many as its bytes
        unit = "bytes" if isinstance(text, bytes) else "characters"
        raise UntrustedInput(f"{what}: {len(text)} {unit} of YAML (limit {limits.max_bytes})")
    loader = _Loader(text, what, limits)
    try:
        yield loader
    except UntrustedInput:
        raise
    except (yaml.YAMLError, ValueError, UnicodeError) as exc:  # ValueError: a scalar no constructor takes
        raise UntrustedInput(f"{what}: not usable YAML: {clip(str(exc))}") from None
    finally:
        loader.dispose()


class _BoundedComposer(Composer):
    """PyYAML's composer, counting while it composes: each node's size and height with its aliases expanded is
    remembered, so an alias costs one look-up and a bomb is refused at the first node over a limit."""

    check_event: Callable[..., bool]  # the parser's

    def __init__(self, what: str, limits: YamlLimits) -> None:
        super().__init__()
        self._what = what
        self._limits = limits
        self._depth = 0  # collections open around the node being composed
        self._total = 0  # nodes so far in the whole text, aliases expanded
        self._sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes, height), for collections closed

    def compose_document(self) -> Node | None:
        self._sizes = {}  # node ids are only stable while their document is alive
        return super().compose_document()

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        if self.check_event(AliasEvent):
            node = super().compose_node(parent, index)
            if isinstance(node, ScalarNode):
                self._count(1)
            elif node is not None:
                if id(node) not in self._sizes:
                    raise UntrustedInput(f"{self._what}: a YAML alias inside what it names (a structure without end)")
                size, height = self._sizes[id(node)]
                self._deepen(self._depth + height)
                self._count(size)
            return node
        if self.check_event(ScalarEvent):
            self._count(1)
            return super().compose_node(parent, index)
        self._count(1)
        self._depth += 1
        self._deepen(self._depth)
        start = self._total
        node = super().compose_node(parent, index)
        self._depth -= 1
        if node is not None:
            self._sizes[id(node)] = (self._total - start + 1, self._height(node))
        return node

    def _height(self, node: Node) -> int:
        children: list[Node] = []
        if isinstance(node, SequenceNode):
            children = node.value
        elif isinstance(node, MappingNode):
            children = [child for pair in node.value for child in pair]
        return 1 + max((self._sizes.get(id(child), (0, 0))[1] for child in children), default=0)

    def _deepen(self, depth: int) -> None:
        if depth > self._limits.max_depth:
            raise UntrustedInput(f"{self._what}: YAML nested more than {self._limits.max_depth} deep")

    def _count(self, nodes: int) -> None:
        self._total += nodes
        if self._total > self._limits.max_nodes:
            raise UntrustedInput(
                f"{self._what}: more than {self._limits.max_nodes} YAML nodes with its aliases expanded"
            )


class _BoundedConstructor(SafeConstructor):
    """The safe constructor, with integers bounded in length."""

    def construct_bounded_int(self, node: ScalarNode) -> int:
        if len(str(node.value)) > MAX_NUMBER_CHARACTERS:
            raise ValueError(f"an integer of {len(str(node.value))} characters")
        return self.construct_yaml_int(node)


_BoundedConstructor.yaml_constructors = {
    **SafeConstructor.yaml_constructors,
    "tag:yaml.org,2002:int": _BoundedConstructor.construct_bounded_int,
}


class _Loader(_BoundedComposer, _Parser, _BoundedConstructor, Resolver):
    """`yaml.CSafeLoader` (or `SafeLoader`) with the counting composer in front of the parser's own."""

    def __init__(self, text: bytes | str, what: str, limits: YamlLimits) -> None:
        _Parser.__init__(self, text)
        _BoundedComposer.__init__(self, what, limits)
        _BoundedConstructor.__init__(self)
        Resolver.__init__(self)
