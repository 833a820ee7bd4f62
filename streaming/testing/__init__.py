"""Testing without a broker: TopologyTestDriver and its topics, plus generators of test data."""

from streaming.testing.driver import TopologyTestDriver
from streaming.testing.generators import GeneratedRecord, disordered_timestamps, items, orders, users, words
from streaming.testing.topics import TestInputTopic, TestOutputTopic, TestRecord

__all__ = ["GeneratedRecord", "TestInputTopic", "TestOutputTopic", "TestRecord", "TopologyTestDriver",
           "disordered_timestamps", "items", "orders", "users", "words"]
