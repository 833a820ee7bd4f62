"""Testing without a broker: TopologyTestDriver and its topics, generators of test data, and a restore
listener that counts (RestoreCounter)."""

from streaming.testing.driver import TopologyTestDriver
from streaming.testing.generators import GeneratedRecord, disordered_timestamps, items, orders, users, words
from streaming.testing.restore import RestoreCounter
from streaming.testing.topics import TestInputTopic, TestOutputTopic, TestRecord

__all__ = ["GeneratedRecord", "RestoreCounter", "TestInputTopic", "TestOutputTopic", "TestRecord", "TopologyTestDriver",
           "disordered_timestamps", "items", "orders", "users", "words"]
