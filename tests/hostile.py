"""A hostile fake ``python3`` on a host: the instance's ``python`` option pointing at a script.

The script behaves as the real python for everything the link runs before the agent (the version probe, the
upload) and, where the agent would start, runs ``BEHAVIOUR`` (Python source given by the test) instead:
whatever a broken or malicious host may send.
"""

from __future__ import annotations

import sys
from pathlib import Path

_SCRIPT = '''#!{python}
import os, sys
starts_agent = len(sys.argv) > 2 and sys.argv[1] == "-c" and "fleet_agent.main" in sys.argv[2]
if starts_agent or sys.argv[1:2] and sys.argv[1].endswith(".pyz"):  # ours, or a zipapp run by path
    import json, time, threading
    def send(obj):
        sys.stdout.write(obj if isinstance(obj, str) else json.dumps(obj))
        sys.stdout.write("\\n")
        sys.stdout.flush()
    def hello(**extra):
        frame = {{"type": "hello", "ts": time.time(), "v": 1, "agent_version": "hostile", "host": "h",
                  "pid": os.getpid(), "python": "3.11", "features": {{"ops": []}}}}
        frame.update(extra)
        send(frame)
{behaviour}
    sys.exit(0)
os.execv({python!r}, [{python!r}] + sys.argv[1:])
'''


def fake_python(directory: Path, behaviour: str) -> str:
    """Write the fake python; ``behaviour`` is indented Python run in place of the agent."""
    body = "\n".join("    " + line for line in behaviour.strip("\n").splitlines())
    path = directory / "hostile-python3"
    path.write_text(_SCRIPT.format(python=sys.executable, behaviour=body))
    path.chmod(0o755)
    return str(path)
