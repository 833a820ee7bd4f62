"""``KStream``: a record stream and its stateless operations (Kafka Streams' KStream in snake_case)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from streaming.dsl import operators as ops
from streaming.dsl.functions import takes_key
from streaming.dsl.kgrouped import KGroupedStream
from streaming.dsl.ktable import GlobalKTable, KTable
from streaming.dsl.materialized import Materialized, as_materialized, make_store_builder
from streaming.dsl.repartition import GroupBySelectKey, add_repartition
from streaming.dsl.stateful_operators import TableSource
from streaming.dsl.stream_table_join import join_global_table, join_table
from streaming.errors import TopologyError
from streaming.processor.api import TopicNameExtractor
from streaming.serdes import Serde
from streaming.topology.nodes import Partitioner

if TYPE_CHECKING:
    from streaming.dsl.builder import StreamsBuilder
    from streaming.sinks.database import DatabaseSink
    from streaming.windows.specs import JoinWindows

KeyValuePredicate = Callable[[Any, Any], bool]


class KStream:
    """A stream of key-value records. Operations return new streams; nothing runs until the topology does.

    Serdes travel with the stream as in Kafka Streams: ``filter`` keeps both, ``map_values`` keeps the key
    serde, ``select_key`` keeps the value serde, ``map`` keeps neither. A sink with no serde given uses
    the stream's, else the config's ``default.key.serde`` / ``default.value.serde``.

    Operations that may change the key (``map``, ``flat_map``, ``select_key``, ``process``) mark the
    stream: a later ``group_by_key`` or ``to_table`` then repartitions it first, as in Kafka Streams.
    """

    def __init__(self, builder: StreamsBuilder, node: str, key_serde: Serde[Any] | None,
                 value_serde: Serde[Any] | None, repartition_required: bool = False) -> None:
        self._builder = builder
        self._node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._repartition_required = repartition_required

    @property
    def node_name(self) -> str:
        """Name of the topology node that produces this stream."""
        return self._node

    def _then(self, kind: str, operator: Any, name: str | None, key_serde: Serde[Any] | None,
              value_serde: Serde[Any] | None, key_changed: bool = False) -> KStream:
        node = self._builder._add_operator(kind, operator, name, self._node)
        return KStream(self._builder, node, key_serde, value_serde, key_changed or self._repartition_required)

    def filter(self, predicate: KeyValuePredicate, name: str | None = None) -> KStream:
        """Keep records for which ``predicate(key, value)`` is true."""
        return self._then("FILTER", ops.Filter(predicate), name, self.key_serde, self.value_serde)

    def filter_not(self, predicate: KeyValuePredicate, name: str | None = None) -> KStream:
        """Drop records for which ``predicate(key, value)`` is true."""
        return self._then("FILTER", ops.Filter(predicate, negate=True), name, self.key_serde, self.value_serde)

    def map(self, mapper: Callable[[Any, Any], tuple[Any, Any]], name: str | None = None) -> KStream:
        """Replace each record by ``mapper(key, value) -> (new_key, new_value)``."""
        return self._then("MAP", ops.Map(mapper), name, None, None, key_changed=True)

    def map_values(self, mapper: Callable[..., Any], name: str | None = None) -> KStream:
        """Replace each value by ``mapper(value)`` (or ``mapper(key, value)``); the key is unchanged."""
        return self._then("MAPVALUES", ops.MapValues(mapper, takes_key(mapper)), name, self.key_serde, None)

    def flat_map(self, mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]]], name: str | None = None) -> KStream:
        """Replace each record by zero or more ``(key, value)`` pairs from ``mapper(key, value)``."""
        return self._then("FLATMAP", ops.FlatMap(mapper), name, None, None, key_changed=True)

    def flat_map_values(self, mapper: Callable[..., Iterable[Any]], name: str | None = None) -> KStream:
        """Replace each value by zero or more values from ``mapper(value)`` (or ``mapper(key, value)``)."""
        return self._then("FLATMAPVALUES", ops.FlatMapValues(mapper, takes_key(mapper)), name,
                          self.key_serde, None)

    def select_key(self, mapper: Callable[[Any, Any], Any], name: str | None = None) -> KStream:
        """Set each record's key to ``mapper(key, value)``."""
        return self._then("KEY-SELECT", ops.SelectKey(mapper), name, None, self.value_serde, key_changed=True)

    def peek(self, action: Callable[[Any, Any], Any], name: str | None = None) -> KStream:
        """Call ``action(key, value)`` for each record and pass it on unchanged."""
        return self._then("PEEK", ops.Peek(action), name, self.key_serde, self.value_serde)

    def foreach(self, action: Callable[[Any, Any], Any], name: str | None = None) -> None:
        """Call ``action(key, value)`` for each record (terminal: nothing flows on)."""
        self._builder._add_operator("FOREACH", ops.Peek(action), name, self._node)

    def merge(self, other: KStream, name: str | None = None) -> KStream:
        """One stream of the records of both (no ordering between them beyond each one's own)."""
        if other._builder is not self._builder:
            raise TopologyError("cannot merge streams of different StreamsBuilders")
        node = self._builder._add_operator("MERGE", ops.PassThrough(), name, self._node, other._node)
        same_key = self.key_serde if self.key_serde is other.key_serde else None
        same_value = self.value_serde if self.value_serde is other.value_serde else None
        return KStream(self._builder, node, same_key, same_value,
                       self._repartition_required or other._repartition_required)

    def split(self, name: str = "") -> BranchedKStream:
        """Route each record to the first branch whose predicate matches (see :class:`BranchedKStream`)."""
        return BranchedKStream(self, name)

    def branch(self, *predicates: KeyValuePredicate, name: str | None = None) -> list[KStream]:
        """One stream per predicate; a record goes to the first that matches, or is dropped."""
        if not predicates:
            raise TopologyError("branch() needs at least one predicate")
        split = self.split(name or "")
        for index, predicate in enumerate(predicates, start=1):
            split.branch(predicate, name=str(index))
        return list(split.no_default_branch().values())

    def to(self, topic: str | TopicNameExtractor, key_serde: Serde[Any] | None = None,
           value_serde: Serde[Any] | None = None, partitioner: Partitioner | None = None,
           name: str | None = None) -> None:
        """Write the stream to ``topic``. ``partitioner(topic, key, value, n)`` may choose the partition
        (None means the default: murmur2 of the serialized key, as the Java client).

        ``topic`` may instead be a topic name extractor (Kafka Streams' ``TopicNameExtractor``):
        ``topic(key, value, record_context) -> str`` names the topic of each record, e.g.
        ``lambda k, v, ctx: f"lines-{v['category']}"``; ``record_context`` (a
        :class:`~streaming.processor.RecordContext`) has the input record's ``topic``, ``partition`` and
        ``offset`` and the sent record's ``timestamp`` and ``headers``. Serdes and partitioner are the same for
        every topic it names. As in Kafka Streams, Brook never creates such a topic; unlike a producer on a broker
        that auto-creates topics, it checks each name against the cluster's metadata (cached, refreshed on a
        miss at most once a second) before sending, so a record is never written to a topic that did not exist:

        * the extractor raising is a processing error (``processing.exception.handler``);
        * a name that is not a valid topic name, a topic the cluster does not have, and a topic the application
          reads or owns (an input, a changelog, a repartition or dead-letter topic: a dynamic sink writes outputs
          only) are production errors (``production.exception.handler``: fail, skip or dead-letter), whose
          message names the topic, the key and the input record's topic, partition and offset.
        """
        node = name or self._builder._new_name("SINK")
        self._builder.topology.add_sink(node, topic, self._node, key_serde=key_serde or self.key_serde,
                                        value_serde=value_serde or self.value_serde, partitioner=partitioner)

    def to_database(self, sink: DatabaseSink, name: str | None = None) -> None:
        """Upsert each record into ``sink``'s table (a :class:`streaming.sinks.DatabaseSink`), batched per task and
        written at each commit before its offsets; a row is written only if its (reset epoch, version) is newer
        than the stored row's. A terminal operation. See :mod:`streaming.sinks.database`."""
        self._builder._add_operator("TODATABASE", sink.operator(), name, self._node)

    def process(self, supplier: Callable[[], Any], *store_names: str, name: str | None = None) -> KStream:
        """Run a Processor API processor on the stream; it may use the named stores (added with
        ``StreamsBuilder.add_state_store``). The returned stream carries what it forwards."""
        node = self._add_processor(supplier, store_names, name)
        return KStream(self._builder, node, None, None, repartition_required=True)

    def process_values(self, supplier: Callable[[], Any], *store_names: str, name: str | None = None) -> KStream:
        """As :meth:`process`, for a processor that forwards records with the key it was given (Kafka
        Streams' ``processValues``): the returned stream keeps the key serde and needs no repartition
        before a join or ``group_by_key``. Brook does not check the keys; changing one breaks
        co-partitioning silently, so use :meth:`process` for that."""
        node = self._add_processor(supplier, store_names, name)
        return KStream(self._builder, node, self.key_serde, None, repartition_required=self._repartition_required)

    def _add_processor(self, supplier: Callable[[], Any], store_names: tuple[str, ...], name: str | None) -> str:
        node = name or self._builder._new_name("PROCESSOR")
        topology = self._builder.topology
        topology.add_processor(node, supplier, self._node)
        if store_names:
            topology.connect_processor_and_state_stores(node, store_names=list(store_names))
        return node

    # -- grouping, repartitioning, tables -----------------------------------------------------------------------
    def group_by_key(self, key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None,
                     name: str | None = None) -> KGroupedStream:
        """Group by the current key, to ``count``/``reduce``/``aggregate`` (see :class:`KGroupedStream`).

        No repartition unless an earlier operation may have changed the key (``map``, ``select_key``,
        ...); then the records go through ``<application.id>-<name or store>-repartition`` first. Serdes
        default to the stream's.
        """
        return KGroupedStream(self._builder, self._node, key_serde or self.key_serde,
                              value_serde or self.value_serde, self._repartition_required, name)

    def group_by(self, selector: Callable[[Any, Any], Any], key_serde: Serde[Any] | None = None,
                 value_serde: Serde[Any] | None = None, name: str | None = None) -> KGroupedStream:
        """Group by a new key ``selector(key, value)``, to ``count``/``reduce``/``aggregate``.

        Always repartitions: the records go through the internal topic
        ``<application.id>-<name>-repartition`` (``name`` defaults to the first aggregation's store name,
        e.g. ``KSTREAM-AGGREGATE-STATE-STORE-0000000002``), a new sub-topology reading it does the
        aggregation. ``key_serde`` writes the new keys (default: ``default.key.serde``; a serde that cannot
        take the first selected key fails at once, naming this node, the serde and the key);
        ``value_serde`` defaults to the stream's. Records whose selected key is None are skipped (counted).
        """
        node = name or self._builder._new_name("KEY-SELECT")
        self._builder.topology.add_operator(node, GroupBySelectKey(selector, key_serde, node), self._node)
        return KGroupedStream(self._builder, node, key_serde, value_serde or self.value_serde, True, name)

    def repartition(self, key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None,
                    name: str | None = None, partitioner: Partitioner | None = None) -> KStream:
        """Write the stream to the internal topic ``<application.id>-<name>-repartition`` and read it back
        (a new sub-topology), so each record lands on the task that owns its key (or the partition
        ``partitioner(topic, key, value, n)`` picks). ``name`` defaults to ``KSTREAM-REPARTITION-<n>``;
        serdes to the stream's. Records with a None key are skipped (counted): they have no partition.
        """
        repartition_name = name or self._builder._new_name("REPARTITION")
        key_serde, value_serde = key_serde or self.key_serde, value_serde or self.value_serde
        source = add_repartition(self._builder, self._node, repartition_name, key_serde, value_serde, partitioner)
        return KStream(self._builder, source, key_serde, value_serde)

    def to_table(self, materialized: Materialized | str | None = None, name: str | None = None) -> KTable:
        """The stream as a table: each record updates its key, a None value deletes it (see
        ``StreamsBuilder.table``). Repartitions first if the key may have changed."""
        builder = self._builder
        spec = as_materialized(materialized)
        store_name = spec.store_name or builder._new_store_name("KSTREAM-TOTABLE-")
        node = name or builder._new_name("TOTABLE")
        key_serde, value_serde = spec.key_serde or self.key_serde, spec.value_serde or self.value_serde
        store = make_store_builder(spec, store_name, key_serde, value_serde)
        builder.topology.add_state_store(store)
        parent = self._node
        if self._repartition_required:
            parent = add_repartition(builder, parent, node, key_serde, value_serde)
        operator = TableSource(store_name)
        builder.topology.add_operator(node, operator, parent)
        builder.topology.connect_processor_and_state_stores(node, store_names=[store_name])
        return KTable(builder, node, key_serde, value_serde, store_name, operator)

    # -- joins: with a stream (streaming.dsl.stream_join), a table or a global table (streaming.dsl.stream_table_join)
    def join(self, other: KStream | KTable | GlobalKTable, *functions: Any, key_serde: Serde[Any] | None = None,
             value_serde: Serde[Any] | None = None, other_value_serde: Serde[Any] | None = None,
             store_name: str | None = None, name: str | None = None) -> KStream:
        """Join each record with another stream, a table or a global table, by what ``other`` is.

        ``join(stream, joiner, join_windows)``: ``joiner(value, other_value)`` (or ``joiner(key, value,
        other_value)``) for each pair of records with equal keys and timestamps within the window; see
        :mod:`streaming.dsl.stream_join`. ``store_name`` names the join stores (``<store_name>-this-join-store``,
        ...); ``other_value_serde`` is the other stream's value serde (default: its own).

        ``join(table, joiner)`` or ``join(global_table, key_mapper, joiner)``: emits ``joiner(value,
        table_value)`` with the record's key, timestamp and headers when the table has a value for the
        record's key (for a global table: for ``key_mapper(key, value)``); emits nothing otherwise. Table
        updates alone emit nothing: only stream records look the table up, and they see it as it is when
        they are processed. Records with a None key or value are skipped (counted in ``dropped_records``).
        A ``KTable`` must be co-partitioned with the stream (same partition count, keys partitioned alike;
        checked at start-up); a table computed from another (``filter``, ``map_values``) is looked up
        through its parent's store, not materialized again. A ``GlobalKTable`` needs neither: every
        instance holds all of it.

        With a stream or a table: if an earlier operation may have changed the key (``map``,
        ``select_key``, ...), the stream is first repartitioned through an internal topic (written with
        ``key_serde``/``value_serde``, default the stream's) with the partition count of the side it
        joins, as in Kafka Streams.
        """
        return self._join(other, functions, "inner", key_serde, value_serde, other_value_serde, store_name, name)

    def left_join(self, other: KStream | KTable | GlobalKTable, *functions: Any, key_serde: Serde[Any] | None = None,
                  value_serde: Serde[Any] | None = None, other_value_serde: Serde[Any] | None = None,
                  store_name: str | None = None, name: str | None = None) -> KStream:
        """As :meth:`join`, and every record of this stream has a result: with a stream, a record that found
        no partner is emitted as ``joiner(value, None)`` once its join window has closed; with a table, a
        record whose key the table does not have (or whose key or mapped key is None) emits
        ``joiner(value, None)`` at once. Records with a None value are skipped (counted)."""
        return self._join(other, functions, "left", key_serde, value_serde, other_value_serde, store_name, name)

    def outer_join(self, other: KStream, joiner: Callable[..., Any], windows: JoinWindows,
                   key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None,
                   other_value_serde: Serde[Any] | None = None, store_name: str | None = None,
                   name: str | None = None) -> KStream:
        """As :meth:`left_join` with a stream, and records of ``other`` without a partner give
        ``joiner(None, other_value)``."""
        return self._join_stream(other, joiner, windows, "outer", key_serde, value_serde, other_value_serde,
                                 store_name, name)

    def _join(self, other: Any, functions: tuple[Any, ...], kind: str, key_serde: Serde[Any] | None,
              value_serde: Serde[Any] | None, other_value_serde: Serde[Any] | None, store_name: str | None,
              name: str | None) -> KStream:
        method = "left_join" if kind == "left" else "join"
        if isinstance(other, KStream):
            if len(functions) != 2:
                raise TopologyError(f"{method}(stream, joiner, join_windows) takes a joiner and JoinWindows, "
                                    f"got {functions!r}")
            return self._join_stream(other, functions[0], functions[1], kind, key_serde, value_serde,
                                     other_value_serde, store_name, name)
        if other_value_serde is not None or store_name is not None:
            raise TopologyError(f"{method}(): other_value_serde and store_name apply to a join with a stream only")
        if isinstance(other, KTable):
            if len(functions) != 1 or not callable(functions[0]):
                raise TopologyError(f"{method}(table, joiner) takes one joiner function, got {functions!r}")
            return join_table(self, other, functions[0], kind == "left", key_serde, value_serde, name)
        if isinstance(other, GlobalKTable):
            if len(functions) != 2 or not all(callable(f) for f in functions):
                raise TopologyError(f"{method}(global_table, key_mapper, joiner) takes a key mapper and a joiner, "
                                    f"got {functions!r}")
            return join_global_table(self, other, functions[0], functions[1], kind == "left", name)
        raise TopologyError(f"{method}() joins a stream with a KStream, a KTable or a GlobalKTable, got {other!r}")

    def _join_stream(self, other: Any, joiner: Callable[..., Any], windows: Any, kind: str,
                     key_serde: Serde[Any] | None, value_serde: Serde[Any] | None,
                     other_value_serde: Serde[Any] | None, store_name: str | None, name: str | None) -> KStream:
        from streaming.dsl.stream_join import join_streams
        if not isinstance(other, KStream):
            raise TopologyError(f"{kind} join: this overload joins two KStreams with JoinWindows, got {other!r}")
        return join_streams(self, other, joiner, windows, kind, key_serde, value_serde, other_value_serde,
                            store_name, name)


class BranchedKStream:
    """Result of ``KStream.split()``: add branches, then end with ``default_branch()`` or
    ``no_default_branch()``, which return the branches as ``{name: KStream}``.

    Branch names are the split's ``name`` prefix followed by the branch's name, or by its position
    (from 1) when unnamed; the default branch is named ``"0"`` unless given a name.
    """

    def __init__(self, stream: KStream, prefix: str) -> None:
        self._stream = stream
        self._prefix = prefix
        self._operator = ops.Branch()
        self._node = stream._builder._add_operator("BRANCH", self._operator, None, stream._node)
        self._branches: dict[str, KStream] = {}
        self._names: set[str] = set()
        self._done = False

    def branch(self, predicate: KeyValuePredicate, name: str | None = None,
               chain: Callable[[KStream], Any] | None = None) -> BranchedKStream:
        """Records matching ``predicate(key, value)`` (and no earlier branch) go to this branch.

        ``chain(stream)`` builds on the branch right away: if it returns a KStream, that stream is the
        branch in the result (Kafka Streams' ``Branched.withFunction``); if it returns None, the branch
        is left out of the result (``Branched.withConsumer``).
        """
        self._check_open()
        branch_name = self._prefix + (name if name is not None else str(len(self._operator.branches) + 1))
        child = self._add_branch(branch_name, chain)
        self._operator.branches.append((predicate, child))
        return self

    def default_branch(self, name: str | None = None,
                       chain: Callable[[KStream], Any] | None = None) -> dict[str, KStream]:
        """Records matching no branch go here; returns all branches."""
        self._check_open()
        self._operator.default = self._add_branch(self._prefix + (name if name is not None else "0"), chain)
        self._done = True
        return dict(self._branches)

    def no_default_branch(self) -> dict[str, KStream]:
        """Records matching no branch are dropped; returns all branches."""
        self._check_open()
        self._done = True
        return dict(self._branches)

    def _add_branch(self, branch_name: str, chain: Callable[[KStream], Any] | None) -> str:
        if branch_name in self._names:
            raise TopologyError(f"split(): branch {branch_name!r} is defined twice")
        self._names.add(branch_name)
        builder = self._stream._builder
        node = builder._add_operator("BRANCH-CHILD", ops.PassThrough(), None, self._node)
        stream: KStream | None = KStream(builder, node, self._stream.key_serde, self._stream.value_serde,
                                         self._stream._repartition_required)
        if chain is not None:
            stream = chain(stream)
        if stream is not None:
            self._branches[branch_name] = stream
        return node

    def _check_open(self) -> None:
        if self._done:
            raise TopologyError("split(): no branch can be added after default_branch()/no_default_branch()")
