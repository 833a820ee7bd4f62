"""The topic archive: every topic of the platform spec copied into daily Parquet partitions by record time.

Nothing is imported here: Spark's Python workers import :mod:`assets.archive.decode` and
:mod:`assets.archive.layout` (a batch run's decoder and files) and need no Dagster, which
:mod:`assets.archive.keys` (the assets' keys and partitions) imports.
"""
