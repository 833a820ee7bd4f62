"""Word count with the Processor API and a stream-time punctuator.

Run it: ``brook worker run apps.wordcount:topology --config apps/wordcount/config.yaml``.
"""

from apps.wordcount.topology import (
    INPUT_TOPIC,
    OUTPUT_TOPIC,
    PENDING_STORE,
    STORE,
    WORDS_TOPIC,
    LineSplitter,
    WordCountProcessor,
    topology,
)

__all__ = ["INPUT_TOPIC", "OUTPUT_TOPIC", "PENDING_STORE", "STORE", "WORDS_TOPIC", "LineSplitter", "WordCountProcessor",
           "topology"]
