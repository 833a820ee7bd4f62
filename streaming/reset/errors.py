"""The errors of an application reset: each names what was wrong and where, in one line, and nothing was changed."""

from __future__ import annotations

from streaming.errors import StreamsError


class ResetError(StreamsError):
    """A reset was refused: bad input (a time in the future, an input listed as internal, a missing topic, a
    malformed plan), or the cluster is not as the reset needs it. Nothing was changed."""


class StalePlanError(ResetError):
    """``--execute --plan FILE``: the cluster changed since the dry run made the plan (names what changed)."""
