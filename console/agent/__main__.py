"""Entry point: `python3 -m console.agent` locally, or `python3 agent.pyz` on an instance."""

import sys

if __package__ in (None, ""):  # run as a zipapp's __main__: the package sits beside us
    from fleet_agent.main import main  # type: ignore[import-not-found]
else:
    from .main import main

sys.exit(main(sys.argv[1:]))
