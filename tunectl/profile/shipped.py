"""The checker's verdicts on the profiles shipped with tunectl, found when it is built (scripts/shipped-verdicts).

A shipped profile is loaded by every run that names none (status, verify, the udev rule's apply on hot-plug),
and checking it costs more than the rest of such a run: jsonschema's import alone takes ~0.2 s on a host and
~4 s in an emulated guest. A verdict is the checker's on a text, so a text whose SHA-256 is listed here is
parsed (`library.check_file`) but not checked again, while the checker's own files are the ones CHECKER
names; any other text (a shipped file changed by one byte too), or a changed checker, is checked as before.
Unlike the validation cache's entries, a verdict here does not name jsonschema's version: the tests check
every entry under each jsonschema tunectl supports (tests/unit/profile/test_shipped_verdicts.py, run under
the venv's and Debian's Python). Generated: do not edit.
"""

# SHA-256 of the checker's files (library.CHECKER_SOURCES, in their order)
CHECKER = 'df718d992aa7d877b7cebaf17861de2e226b1c13aea9cf1be3a8e8b48c933ce1'

# SHA-256 of a shipped profile's bytes -> the checker's verdict on them (Document.verdict(): its warnings)
VERDICTS: dict[str, dict] = {
    'e2c026e1fc17f0fbaee1edd70a1e485805545b94e6405eb845eed73e8c8e777f': {'warnings': []},  # balanced.yaml
    'd7128146b52f518a242ae13b19d19e55b5220f606b5d7aca7da219f8ad25628c': {'warnings': []},  # database.yaml
    '7fc379877d87062ff27a61fd628e3647e20116edad7c1c564136d521133a669d': {'warnings': []},  # default.yaml
    '3f3c209ade471c0a8c14ff6c0c275b8586a82920452c444c0f1b3ba820b1b9e9': {'warnings': []},  # desktop.yaml
    '35e9955899bb264f7e52c301da093f65be06c5f525b1ea2993f9d56f4fb70123': {'warnings': []},  # hdd-sequential.yaml
    '9f22667d52b6ca7439aee248c19c211e1472b5c76c31beffe128917d54cf9cbe': {'warnings': []},  # latency-performance.yaml
    'c512dede9ee588217ce6f734e1de689c058881b5d8541a02e8246e16e06aab25': {'warnings': []},  # powersave.yaml
    'edc6a790d13c5c7f03df8af08937ebd2573ed5d78057bfa677b9286b732515b7': {'warnings': []},  # throughput-performance.yaml
    '2ecb578cde823fc0894672627a373380effe953621c513014bf3c267fa8c893f': {'warnings': []},  # verity-readonly.yaml
    '6fc2861606b0c06f184e38f8a3362d7f48e3d623a12804b7f67f22ddb2ebaa92': {'warnings': []},  # virtual-guest.yaml
}
