"""The tool tags a store's steps are cut at, recorded in its collection's metadata.

A stored step ends at a tool's closing tag; a rollout retrieves after every call of a tool the trainer runs. When
the two sets differ, a stored step can span several of the rollout's tool calls (up to the final answer), so the
store records the tags it cut at, a later write cuts at them too, and the trainer compares them with its tools.
"""

from __future__ import annotations

from collections.abc import Iterable

from rapo_trl.protocol import TOOL_TAGS, check_tool_tag

METADATA_KEY = "tool_tags"
"""The collection-metadata key: the tags, comma-separated (Chroma metadata holds scalars only)."""


def recorded_tool_tags(collection, metadata: dict | None = None) -> tuple[str, ...] | None:
    """The tags the collection's steps were cut at; ``None`` for a store that never recorded them (cut at the
    built-in tools' tags). ``metadata``: the collection's metadata as read now (default: as the object was opened)."""
    value = ((collection.metadata if metadata is None else metadata) or {}).get(METADATA_KEY)
    return tuple(tag for tag in str(value).split(",") if tag) if value else None


def store_tool_tags(collection, metadata: dict | None = None) -> tuple[str, ...]:
    """Where the collection's steps are cut: its recorded tags, else the built-in tools' tags."""
    return recorded_tool_tags(collection, metadata) or TOOL_TAGS


def checked_tags(tool_tags: Iterable[str]) -> tuple[str, ...]:
    """``tool_tags`` as a tuple of valid tags, in order, each once."""
    if isinstance(tool_tags, str):
        raise TypeError(f"tool_tags is a list of tags, got the string {tool_tags!r}; write [{tool_tags!r}].")
    return tuple(dict.fromkeys(check_tool_tag(tag, "in tool_tags") for tag in tool_tags))


def record_tool_tags(collection, tool_tags: Iterable[str], metadata: dict | None = None) -> tuple[str, ...]:
    """Add ``tool_tags`` to the collection's recorded tags; returns all of them. ``metadata``: the collection's
    metadata as read now (another client of a server store may have recorded tags since this object opened it: they
    are kept, not overwritten by the object's copy)."""
    metadata = (collection.metadata if metadata is None else metadata) or {}
    tags = checked_tags((*store_tool_tags(collection, metadata), *tool_tags))
    if tags != recorded_tool_tags(collection, metadata):
        collection.modify(metadata={**metadata, METADATA_KEY: ",".join(tags)})
    return tags
