"""Block devices: the model, the class table, discovery, the stacking graph and the one name resolver.

Every command group (tuning, udev, align, mounts, bench, explain, preload) asks
this package which devices a name means, what class a device is and what lies
above and below it: `resolve.Resolver` for names, paths and stacks (`stack`),
`devnum` for the cheap MAJ:MIN walk preload replay makes at boot.
"""
