"""Mount options from the profile: check live mounts and fstab, fix fstab losslessly, remount."""
