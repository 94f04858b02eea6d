"""The thin OS edges: sysfs, the udev database, subprocesses, the state store.

Each is bound to an injected root or runs through one door, so the same code runs
on the real machine, on a loop device and on a fake tree in a test.
"""
