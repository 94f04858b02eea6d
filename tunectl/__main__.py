import sys

from tunectl.cli import main

sys.exit(main(sys.argv[1:]))
