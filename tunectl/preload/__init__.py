"""Physical-order preload of a file set: list format, ordering (pure) and the operations."""
