"""Profiles: the positioned YAML reader, the checks, the library on the search path, resolution, tuned import."""
