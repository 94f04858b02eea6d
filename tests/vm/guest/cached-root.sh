#!/bin/sh
# cached-root.sh MOUNT_TAG DIR... -- COMMAND...: mount the host's root again (9p tag MOUNT_TAG, exported by
# machine.cached_root_opts) with cache=loose, bind its DIRs over the same paths of the guest's root, run COMMAND.
# virtme-ng mounts the root without cache= (every stat/open/read a round trip to qemu's 9p server, slow under
# TCG); one 9p tag can be mounted only once, hence the second export. The cache lives in this guest kernel
# only (no fscache), so it starts empty each boot and holds the files as the host wrote them before the boot.
set -e
tag=$1
shift
mkdir -p /run/tunectl-root
mount -t 9p -o ro,trans=virtio,version=9p2000.L,access=any,msize=512000,cache=loose "$tag" /run/tunectl-root
while [ "$1" != "--" ]; do
  mount --bind "/run/tunectl-root$1" "$1"
  shift
done
shift
exec "$@"
