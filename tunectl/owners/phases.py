"""When each other writer runs: at boot, at hot-plug (a udev add/change event), or both.

Shared by the pure model (who wins in each phase) and the file parsers (what each file's writer does); a module
of its own so the model loads without the parsers (a verify that finds every value journalled by tunectl).
"""

BOOT, HOTPLUG, BOTH = "boot", "hotplug", "boot+hotplug"
