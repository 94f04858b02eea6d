"""tunectl: declarative block-device I/O tuning for Linux."""

__version__ = "0.1.0"
