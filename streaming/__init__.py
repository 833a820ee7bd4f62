"""Brook's stream-processing runtime: the Kafka Streams model in Python.

Public API (internals live in ``streaming.runtime`` and are not imported by users)::

    from streaming import StreamsBuilder, Topology, KafkaStreams, Serdes, Stores, Materialized
    from streaming import TimeWindows, SlidingWindows, SessionWindows, JoinWindows, Suppressed, Windowed
    from streaming.processor import Processor, ProcessorContext, Record, PunctuationType
    from streaming.testing import TopologyTestDriver
    from streaming import FieldEncryption   # field-level encryption (streaming.encryption)
"""

from streaming.config import StreamsConfig
from streaming.dsl import (
    BranchedKStream,
    GlobalKTable,
    KGroupedStream,
    KGroupedTable,
    KStream,
    KTable,
    Materialized,
    StreamsBuilder,
)
from streaming.dsl.suppress import BufferConfig, Suppressed
from streaming.errors import (
    ConfigError,
    DecryptionError,
    DeserializationError,
    InvalidStateStoreError,
    ProcessingError,
    ProductionError,
    StateDirectoryLockedError,
    StreamsError,
    TopologyError,
    UnknownStateStoreError,
)
from streaming.runtime.error_handlers import ErrorContext
from streaming.serdes import Serde, Serdes
from streaming.state import KeyValueStore, Stores
from streaming.timestamps import FieldTimestampExtractor, RecordTimestampExtractor, WallclockTimestampExtractor
from streaming.topology import Topology
from streaming.windows import (
    JoinWindows,
    SessionWindows,
    SlidingWindows,
    TimeWindows,
    Window,
    Windowed,
    WindowedSerdes,
)

__all__ = [
    "BranchedKStream", "ConfigError", "DecryptionError", "DeserializationError", "ErrorContext",
    "FieldTimestampExtractor", "GlobalKTable",
    "InvalidStateStoreError", "KGroupedStream", "KGroupedTable", "KStream", "KTable", "KafkaStreams",
    "KeyQueryMetadata", "KeyValueStore", "Materialized", "ProcessingError", "ProductionError",
    "RecordTimestampExtractor", "Serde", "Serdes", "StateDirectoryLockedError", "Stores", "StreamsBuilder",
    "StreamsConfig", "StreamsError", "Topology", "TopologyError", "UnknownStateStoreError",
    "WallclockTimestampExtractor",
    # windows, suppression
    "BufferConfig", "JoinWindows", "SessionWindows", "SlidingWindows", "Suppressed", "TimeWindows", "Window",
    "Windowed", "WindowedSerdes",
    # field-level encryption
    "EncryptedJsonSerde", "FieldEncryption",
]


def __getattr__(name: str) -> object:
    # KafkaStreams pulls in the client runtime; import it on first use so the DSL stays light.
    if name == "KafkaStreams":
        from streaming.runtime.kafka_streams import KafkaStreams
        return KafkaStreams
    if name == "KeyQueryMetadata":
        from streaming.runtime.interactive_queries import KeyQueryMetadata
        return KeyQueryMetadata
    if name in ("FieldEncryption", "EncryptedJsonSerde"):
        # streaming.encryption imports cryptography (~40 ms): only for the apps that encrypt.
        from streaming import encryption
        return getattr(encryption, name)
    raise AttributeError(f"module 'streaming' has no attribute {name!r}")
