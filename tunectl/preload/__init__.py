"""Physical-order preload of a file set: listing (the list format) and order (pure), listfile and skip (shared),
then one module a verb: collect, record, replay, show."""
