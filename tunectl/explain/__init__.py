"""`tunectl explain`: why a file reads slowly, layer by layer, and what to change.

The pure parts (superblock and table parsers, the trace reader, the rule table)
open no file; `facts` and `measure` are the edges that read the machine.
"""
