"""Partition scaling from the platform: the Spark work of a scaling plan (:mod:`assets.scaling.migrate`). The plan
and the pure steps are the runtime's library, :mod:`streaming.scaling`."""
