"""The stream applications the platform runs: word count (Processor API) and the orders pipeline."""
