"""Great Expectations, imported on first use (3-5 s) without the warnings its import triggers."""

from __future__ import annotations

import warnings
from types import ModuleType

__all__ = ["great_expectations"]


def great_expectations() -> ModuleType:
    """The ``great_expectations`` module (``.expectations`` loaded too)."""
    with warnings.catch_warnings():
        # great_expectations imports pyspark, which warns that it does not fully support pandas 3.
        warnings.simplefilter("ignore", FutureWarning)
        import great_expectations
        import great_expectations.expectations  # loads the submodule onto the package
    return great_expectations
