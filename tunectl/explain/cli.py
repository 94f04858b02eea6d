"""`tunectl explain TARGET`: arguments, the pipeline, and its rendering (text or --json)."""

from __future__ import annotations

import argparse

EPILOG = """\
explain reads the stack under TARGET top to bottom (file, filesystem, loop, dm,
md, partition, disk) with each layer's facts, and ends in findings ranked by
effect (the cold read's speedup, measured by --try or estimated), each with its
evidence and the exact change: a profile fragment, a command, or a rebuild.
It writes nothing to the target's devices.

--cold (the default for a file) drops only the file's, the backing files' and
the stack's block devices' cached pages, never the machine's, then reads the
file with --read-size and reports /sys/block/*/stat of every layer: requests,
merged share, average request size, await, MB/s. --trace records the block
tracepoints of the stack's devices in a tracefs instance of its own and gives
btt's Q2C, D2C and Q2Q per layer. --try rebuilds the file's squashfs image in
a scratch directory beside it (other block sizes, xz) and attaches each copy
with direct I/O on and off, on dm-verity through a scratch verity device of
the user's hash, block sizes and salt (none, and a note, without veritysetup). The
user's image and devices are never touched.

exit codes: 0 explained (findings or not), 2 usage (not a file for --cold,
not on squashfs for --try, no tracefs block events for --trace), 4 not root.

examples:
  tunectl explain /usr/lib/chromium/chromium              # stack, cold read, findings
  tunectl explain /opt/browser/chrome --compare /srv/chrome --trace
  tunectl explain /opt/browser/chrome --try
  tunectl explain /dev/mapper/vroot --json | jq '.findings[].change.text'"""


def add_arguments(name: str, p: argparse.ArgumentParser, add_action) -> None:
    p.epilog = EPILOG
    p.add_argument("target", metavar="TARGET", help="a file, a directory or mountpoint, or a block device")
    cold = p.add_mutually_exclusive_group()
    cold.add_argument("--cold", dest="cold", action="store_true", default=None,
                      help="read the file cold and report every layer's requests (default for a file; root)")
    cold.add_argument("--no-cold", dest="cold", action="store_false", help="facts and findings only, no read")
    p.add_argument("--read-size", metavar="SIZE", default="4 KiB",
                   help="bytes per read(2): the application's read size (default 4 KiB, a page: what mmap faults read)")
    p.add_argument("--size", metavar="SIZE", default="256 MiB", help="bytes read at most (default 256 MiB)")
    p.add_argument("--trace", action="store_true",
                   help="also trace the block events of the stack's devices: Q2C, D2C, Q2Q per layer (root, tracefs)")
    p.add_argument("--compare", metavar="OTHER",
                   help="the same cold read of another file (the same binary on ext4): the ratio and its largest contributor")
    p.add_argument("--try", dest="experiments", action="store_true",
                   help="rebuild the squashfs image on scratch copies (block sizes, xz; loop direct I/O on and off) "
                        "and measure each cold, through a scratch dm-verity when on verity (root; squashfs-tools)")
    compressors = p.add_argument("--try-compressors", metavar="LIST", default="xz",
                                 help="--try's compressors besides the image's own, comma-separated (default xz; '' "
                                      "for none)")
    compressors.empty_is_a_value = True  # '' is documented: none; the parser refuses other options' empty values


def run(ctx, args, out) -> int:
    from tunectl.errors import UsageError
    from tunectl.explain.investigate import Request, investigate
    from tunectl.explain.squashfs import COMPRESSORS
    from tunectl.units import MAX_READ_SIZE, size_option

    compressors = tuple(c for c in (x.strip() for x in args.try_compressors.split(",")) if c)
    unknown = [c for c in compressors if c not in COMPRESSORS.values()]
    if unknown:
        raise UsageError(f"--try-compressors: {unknown[0]!r} is not a squashfs compressor",
                         hint=f"one of {', '.join(COMPRESSORS.values())}")
    req = Request(args.target, args.cold, size_option(args.read_size, "--read-size", MAX_READ_SIZE),
                  size_option(args.size, "--size"),
                  args.trace, args.compare, args.experiments, compressors)
    bar = out.progress(0, "explain")
    try:
        report = investigate(ctx, req, on_step=lambda text: bar.advance(0, text))
    finally:
        bar.close()
    return out.show(report)
