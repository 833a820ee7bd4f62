"""Small applications the integration tests run in worker processes."""
