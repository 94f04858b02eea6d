"""The one compiled part of tunectl: the clean case of `preload replay`'s data pass (tunectl/preload/_datapass.c).

Everything else is declared in setup.cfg. The extension is optional: without a compiler or Python's headers the
build goes on without it and the replay's Python loop reads every file. Built against the limited API (abi3), one
.so serves every CPython from 3.9 (the locked .venv and Debian's python3 alike).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tunectl.preload._datapass", ["tunectl/preload/_datapass.c"], optional=True,
                             py_limited_api=True,  # (the .c defines Py_LIMITED_API 0x03090000)
                             extra_compile_args=["-O2", "-Wall", "-Wextra", "-Werror=implicit-function-declaration"])])
