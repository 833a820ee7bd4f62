"""Data quality: Great Expectations asset checks on the topic archives, from the spec's ``quality`` rules."""

from assets.quality.checks import quality_checks

__all__ = ["quality_checks"]
