"""The error of partition scaling: one line naming what was wrong, and nothing was changed."""

from __future__ import annotations

from streaming.errors import StreamsError


class ScalingError(StreamsError):
    """A scaling was refused: a bad partition count or mode, a request that would split a co-partition group,
    topics not as the plan needs them, or a broker that cannot do what the mode asks. Nothing was changed."""
