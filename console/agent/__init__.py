"""The agent that runs on each instance.

Standard library only (plus psutil and pynvml when present); runs on python3 3.8+.
Every module here imports its siblings relatively, so the package also works when it travels
to an instance inside a zipapp under another name (see `console.link.bundle`).
"""

AGENT_VERSION = "0.1.0"
