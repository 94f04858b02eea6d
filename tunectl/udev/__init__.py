"""udev rules for hot-plug and boot: render (pure), lint, install, and the event monitor."""
