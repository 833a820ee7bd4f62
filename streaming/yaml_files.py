"""YAML files read strictly: a key given twice in one mapping is an error, not a silent override.

PyYAML's ``safe_load`` keeps the last of two equal keys (``partitions: 4`` then ``partitions: 8`` loads as 8),
so a copy-and-paste slip in ``platform.yaml`` or a worker config changes behaviour without a word.
:class:`UniqueKeyLoader` checks every mapping of the composed document before it is constructed and raises
:class:`DuplicateKeyError` naming the key path and both lines. Keys compare as YAML does: by tag and value
(``1`` and ``"1"`` are different keys); merge keys (``<<``) are left to PyYAML.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["DuplicateKeyError", "UniqueKeyLoader", "load_yaml"]


class DuplicateKeyError(yaml.YAMLError):
    """A mapping of the document gives the same key twice (names the key path and both lines)."""


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping with a key given twice."""

    def compose_document(self) -> Any:
        node = super().compose_document()
        _check_unique(node, [])
        return node


def _label(node: yaml.Node) -> str:
    return str(node.value) if isinstance(node, yaml.ScalarNode) else f"<{node.id}>"


def _path(parts: list[str]) -> str:
    return ".".join(parts) if parts else "(top level)"


def _check_unique(node: yaml.Node | None, path: list[str]) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[tuple[str, str], yaml.Node] = {}
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                identity = (key.tag, key.value)
                first = seen.get(identity)
                if first is not None:
                    raise DuplicateKeyError(
                        f"key {key.value!r} is given twice in {_path(path)}: line {first.start_mark.line + 1} "
                        f"and line {key.start_mark.line + 1} (the second would silently replace the first)")
                seen[identity] = key
            _check_unique(value, [*path, _label(key)])
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _check_unique(item, [*path[:-1], f"{path[-1]}[{index}]"] if path else [f"[{index}]"])


def load_yaml(text: str) -> Any:
    """The document in ``text``, like ``yaml.safe_load``, but a key given twice raises :class:`DuplicateKeyError`.

    Raises:
        yaml.YAMLError: not YAML, or a duplicate key (its subclass :class:`DuplicateKeyError`).
    """
    return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
