"""Entry point: ``python3 -m console.agent`` (the zipapp has its own root ``__main__``)."""

import sys

from .main import main

sys.exit(main(sys.argv[1:]))
