"""The embedded demo fleet: the hosts (``fleet.py``: a loopback SSH server, scenario processes) and the
command `fleet-console demo` (``run.py``)."""

from console.demo.fleet import DemoFleet, start_demo

__all__ = ["DemoFleet", "start_demo"]
