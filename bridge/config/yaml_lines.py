"""YAML read with the line of every key and item, within bounds a hostile file cannot break.

The file is at most :data:`MAX_FILE_SIZE` characters, nests (through aliases too) at most
:data:`MAX_YAML_DEPTH` levels and expands to at most :data:`MAX_YAML_NODES` values; an alias
inside its own anchor, a duplicate key and a non-string key are errors. Every problem is a
:class:`~bridge.errors.ConfigError` naming the file and, when known, the line.
"""

from __future__ import annotations

from typing import Any

import yaml

from bridge.domain.field_path import FieldPath, dotted
from bridge.errors import ConfigError

# Bounds on what the reader accepts, so that a broken or hostile file gives a ConfigError and
# never a RecursionError, an OverflowError at start-up or a reader lost in a YAML alias bomb.
MAX_FILE_SIZE = 4 * 1024 * 1024  # characters; a real file is a few KiB
MAX_YAML_DEPTH = 64  # nesting, counted through aliases; a pod template needs about 12
MAX_YAML_NODES = 100_000  # values after aliases are expanded (a "billion laughs" has 10**9)

#: The 1-based line of every key and list item, by path.
LineIndex = dict[FieldPath, int]


def show(value: Any) -> str:
    """``repr`` for an error message, short, and safe for integers of any size."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Loader(yaml.SafeLoader):
    """SafeLoader that composes no alias into its own node and nests at most MAX_YAML_DEPTH.

    Aliases stay allowed (dev/bridge.yaml shares a pod template with ``&real``), but
    ``a: &x [*x]`` would be a cycle that every later walk recurses into forever, and PyYAML's
    composer itself recurses once per level of nesting.
    """

    def __init__(self, stream: str, source: str) -> None:
        super().__init__(stream)
        self._source = source
        self._open_anchors: set[str] = set()
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        where = f"{self._source}:{event.start_mark.line + 1}"
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open_anchors:
                raise ConfigError(
                    f"{where}: invalid YAML: alias *{event.anchor} is inside its own anchor"
                )
            node: yaml.Node | None = super().compose_node(parent, index)
            return node
        if self._depth >= MAX_YAML_DEPTH:
            raise ConfigError(
                f"{where}: invalid YAML: nested more than {MAX_YAML_DEPTH} levels deep"
            )
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._open_anchors.add(anchor)
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
            self._open_anchors.discard(anchor)
        return node


def _index_lines(
    node: yaml.Node, path: FieldPath, lines: LineIndex, source: str, budget: list[int]
) -> None:
    """Record the 1-based line of every key and item; reject duplicate and non-string keys.

    Aliases make the tree larger than the text: ``budget`` counts the values still allowed
    (MAX_YAML_NODES in all) and the path's length the depth through aliases.
    """
    budget[0] -= 1
    if budget[0] < 0 or len(path) > MAX_YAML_DEPTH:
        limit = f"{MAX_YAML_NODES} values" if budget[0] < 0 else f"{MAX_YAML_DEPTH} levels"
        where = dotted(path[:4]) + ("..." if len(path) > 4 else "")
        raise ConfigError(
            f"{source}:{node.start_mark.line + 1}: {where or 'top level'}: "
            f"the document expands (through its aliases) to more than {limit}"
        )
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != "tag:yaml.org,2002:str":
                where = dotted(path) or "top level"
                raise ConfigError(f"{source}:{line}: {where}: keys must be strings")
            key = key_node.value
            if key in seen:
                raise ConfigError(
                    f"{source}:{line}: {dotted((*path, key))}: duplicate key "
                    f"(first on line {seen[key]})"
                )
            seen[key] = line
            lines[(*path, key)] = line
            _index_lines(value_node, (*path, key), lines, source, budget)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            _index_lines(item, (*path, index), lines, source, budget)


def read_yaml(text: str, source: str) -> tuple[Any, LineIndex]:
    """The document in ``text`` and the line of each of its keys and items."""
    if len(text) > MAX_FILE_SIZE:
        raise ConfigError(
            f"{source}: {len(text)} characters, more than the limit of {MAX_FILE_SIZE}"
        )
    try:
        # The reader checks the text at once: a control character fails here, not in parsing.
        loader = _Loader(text, source)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: invalid YAML: {str(e).splitlines()[0]}") from e
    try:
        node = loader.get_single_node()
        if node is None:
            return {}, {}
        lines: LineIndex = {(): node.start_mark.line + 1}
        _index_lines(node, (), lines, source, [MAX_YAML_NODES])
        return loader.construct_document(node), lines
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{source}:{mark.line + 1}" if mark else source
        raise ConfigError(f"{where}: invalid YAML: {e.problem or e.context}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: invalid YAML: {e}") from e
    except (ValueError, OverflowError, IndexError, TypeError) as e:
        # PyYAML's safe constructor converts scalars with int(), float(), datetime and base64
        # and trusts what it gets: "2026-02-30", an integer of more than 4300 digits or an
        # empty "!!int" raise these from inside it. Nothing else runs in this block.
        raise ConfigError(
            f"{source}: invalid YAML value: {type(e).__name__}: {show(str(e))}"
        ) from e
    finally:
        loader.dispose()
