"""`python -m console` runs the command line."""

from console.cli import main

raise SystemExit(main())
