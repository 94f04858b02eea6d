import sys

try:
    from tunectl.cli import main_entry
except KeyboardInterrupt:  # a Ctrl-C while Python loads tunectl's first modules: no traceback (main says the rest)
    sys.stderr.write("tunectl: interrupted\n")
    sys.exit(130)

main_entry()
