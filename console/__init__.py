"""fleet-console: a terminal console for fleets of rented GPU instances."""

__version__ = "0.1.0"
