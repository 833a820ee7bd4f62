"""Data quality: Great Expectations asset checks on the topic archives, from the spec's ``quality`` rules, and a
``decodable`` check per archived topic."""

from assets.quality.checks import quality_checks
from assets.quality.undecodable import undecodable_checks

__all__ = ["quality_checks", "undecodable_checks"]
