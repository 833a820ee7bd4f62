"""Partition scaling (issue 18): the spec switch to a new topic generation, and the scaling job built on it."""
