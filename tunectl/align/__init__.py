"""Partition alignment: parted's tables and sysfs topology -> one verdict per partition."""
