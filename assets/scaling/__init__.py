"""Partition scaling from the platform: the Spark work of a scaling plan (:mod:`assets.scaling.migrate`) and the
stages that talk to Kafka directly (:mod:`assets.scaling.stages`). The plan and the pure steps are the runtime's
library, :mod:`streaming.scaling`."""
