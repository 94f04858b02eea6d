"""`tunectl bench`: a read-only sweep of read-ahead and schedulers, with the block-layer figures that explain it.

Pure modules: `diskstat` (the /sys/block/X/stat layout and deltas), `sweep`
(the points of a sweep and their shuffled order), `results` (medians, spread,
the recommendation and its profile fragment), `chart` (a plain-text chart),
`export` (CSV and JSON). The OS is reached from `stack` (the devices under a
target, through the sysfs edge), `runner` (settings, cold reads, restore) and
the edge `tunectl/system/blockio.py` (reading, dropping cached pages, fio).
"""
