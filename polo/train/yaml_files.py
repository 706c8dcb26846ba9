"""Reading the YAML that users write (recipes, arena files, overrides), strictly and within bounds.

On top of PyYAML's safe loader (plain data only, never objects): a key given twice in one mapping is an
error naming both lines (plain YAML keeps the last silently); anchors and aliases work, but the document
they expand to is limited to ``MAX_NODES`` nodes, so a "billion laughs" alias bomb is refused in
milliseconds instead of growing without bound; a recursive alias and a file over ``MAX_BYTES`` are refused.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from polo.core.registry import ConfigError

MAX_BYTES = 1_000_000
"""Largest YAML file read (a recipe or arena file is a few kilobytes)."""
MAX_NODES = 100_000
"""Largest document, counted with every alias expanded (a recipe has about a hundred nodes)."""
MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(yaml.SafeLoader):
    """The safe loader, refusing a key that appears twice in one mapping (``<<`` merges may be overridden)."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                line = first_line.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: the safe loader reports it
                continue
            if line != key_node.start_mark.line + 1:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first given on line {line})", key_node.start_mark)
        return super().construct_mapping(node, deep)


def expanded_size(node: Node, source: str) -> int:
    """Nodes in the document with every alias expanded, computed once per distinct node (so in time linear
    in the file); ConfigError past ``MAX_NODES`` or on a recursive alias."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(n: Node) -> int:
        if id(n) in sizes:
            return sizes[id(n)]
        if id(n) in open_nodes:
            raise ConfigError(f"{source}: line {n.start_mark.line + 1}: a recursive alias (an anchor used inside "
                              f"itself)")
        open_nodes.add(id(n))
        children = n.value if isinstance(n, SequenceNode) else (
            [c for pair in n.value for c in pair] if isinstance(n, MappingNode) else [])
        total = 1 + sum(size(c) for c in children)
        open_nodes.discard(id(n))
        if total > MAX_NODES:
            raise ConfigError(f"{source}: expands to more than {MAX_NODES:,} YAML nodes (aliases expanded); polo "
                              f"files are far smaller, is this an alias bomb?")
        sizes[id(n)] = total
        return total

    return size(node)


def load_yaml(text: str, source: str) -> Any:
    """The data in ``text`` (``source`` names it in errors); yaml.YAMLError on a syntax error or a duplicate
    key, ConfigError on a document that is too large or too deep."""
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        expanded_size(node, source)
        return loader.construct_document(node)
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply") from None
    finally:
        loader.dispose()


def read_yaml_mapping(path: Path, kind: str) -> dict:
    """A YAML file that must hold a mapping (a recipe, an arena file); every problem is one ConfigError line
    naming the file (and the line of a syntax error or a duplicate key)."""
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise ConfigError(f"{path}: {size:,} bytes; {kind} is limited to {MAX_BYTES:,} bytes")
    try:
        tree = load_yaml(path.read_text(encoding="utf-8"), str(path))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        label = "" if isinstance(err, yaml.constructor.ConstructorError) else "YAML syntax error: "
        raise ConfigError(f"{path}:{where}: {label}{problem}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start})") from None
    tree = {} if tree is None else tree
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: {kind} must be a YAML mapping")
    return tree
