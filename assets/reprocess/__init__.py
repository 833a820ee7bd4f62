"""Batch reprocessing on Spark: the ``reprocessed/<app>`` daily assets, their checks, and the job they run.

- :mod:`assets.reprocess.inputs` — a day's input from the archive (the frontier, the checks of the archive);
- :mod:`assets.reprocess.state` — what one day's run hands the next, on disk;
- :mod:`assets.reprocess.job` — one day of one app on Spark (:func:`~assets.reprocess.job.reprocess_day`, what the
  asset runs), and a range of days in order in one Spark session (:func:`~assets.reprocess.job.reprocess_days`, what
  a command-line backfill calls);
- :mod:`assets.reprocess.publish` — a reprocessed day's outputs produced to Kafka (``publish: true``);
- :mod:`assets.reprocess.compare` — reprocessed outputs against the live ones, record for record (the integration
  test and ``make demo``);
- :mod:`assets.reprocess.assets` — the Dagster assets and checks.

The names below come from :mod:`assets.reprocess.assets` when first used, not on import: Spark's Python workers
import :mod:`assets.reprocess.job` (its task functions) and need no Dagster, which takes a second or more to import
in every worker.
"""

from typing import Any

__all__ = ["REPROCESS_GROUP", "reprocess_asset_key", "reprocess_assets", "reprocess_checks"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from assets.reprocess import assets

        return getattr(assets, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
