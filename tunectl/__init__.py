# Copyright: (c) 2026, tunectl developers
# SPDX-License-Identifier: GPL-2.0-or-later
"""tunectl: declarative block-device I/O tuning for Linux."""

__version__ = "0.1.0"
