"""The embedded demo fleet: `fleet-console demo` (see ``fleet.py``)."""

from console.demo.fleet import DemoFleet, run_demo, start_demo

__all__ = ["DemoFleet", "run_demo", "start_demo"]
