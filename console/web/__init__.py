"""The console in a browser (``fleet-console web``) and the one set of HTTP rules every endpoint uses (auth.py)."""
