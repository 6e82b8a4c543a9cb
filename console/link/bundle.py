"""The agent as one zipapp: the ``console.agent`` package (as ``fleet_agent``) plus pynvml.

Built in memory, byte-for-byte reproducible, so its hash names the uploaded copy on an instance.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import zipfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

AGENT_DIR = Path(__file__).resolve().parent.parent / "agent"
ZIP_DATE = (2020, 1, 1, 0, 0, 0)
ROOT_MAIN = b"import sys\nfrom fleet_agent.main import main\nsys.exit(main(sys.argv[1:]))\n"


@dataclass(frozen=True)
class AgentBundle:
    data: bytes
    sha256: str

    @property
    def remote_name(self) -> str:
        return f"agent-{self.sha256[:16]}.pyz"


def _add(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    zf.writestr(info, data)


def _pynvml_source() -> bytes | None:
    spec = importlib.util.find_spec("pynvml")
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin).read_bytes()


@cache
def agent_bundle() -> AgentBundle:
    """The zipapp bytes and their sha256."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        _add(zf, "__main__.py", ROOT_MAIN)
        for path in sorted(AGENT_DIR.rglob("*.py")):  # the package and its subpackages (wire, sample, ...)
            rel = path.relative_to(AGENT_DIR).as_posix()
            if rel == "__main__.py":
                continue
            _add(zf, f"fleet_agent/{rel}", path.read_bytes())
        nvml = _pynvml_source()
        if nvml is not None:
            _add(zf, "pynvml.py", nvml)
    data = buf.getvalue()
    return AgentBundle(data=data, sha256=hashlib.sha256(data).hexdigest())
