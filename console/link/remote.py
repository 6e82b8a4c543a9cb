"""What runs on the host before the agent: a safe upload, and a start that checks what it runs.

The agent lives in ``~/.cache/fleet-console`` (``$HOME`` of the login). That directory is trusted only when
it is a real directory (not a symlink), owned by the login user, and mode 0700 (fixed when it is ours);
its parent must be ours or root's and not writable by others. The zipapp is written to a fresh temp name
(``O_CREAT|O_EXCL|O_NOFOLLOW``, 0600), fsynced, its hash checked, then renamed over the final name. Every
start checks the directory again and the file's sha256 against the one the console knows, and runs the bytes
it checked from memory — a file swapped after the check is never run. The agent's config comes on stdin
(``--config-stdin``), never in argv where any user on the host reads it (``/proc/PID/cmdline``).

Both snippets are Python 3.8 and run under the instance's ``python`` with ``-c``; they exit 3 with one line
starting ``fleet-console:`` on stderr when they refuse (``NEEDS_UPLOAD`` when the file is missing or differs).
"""

from __future__ import annotations

import shlex

REMOTE_DIR = ".cache/fleet-console"  # under the login's $HOME
NEEDS_UPLOAD = "fleet-console: upload needed"

_CHECK_DIR = r'''
import hashlib, os, stat, sys
def die(msg):
    sys.stderr.write("fleet-console: " + msg + "\n"); sys.exit(3)
def safe_dir(create):
    home = os.path.expanduser("~")
    d = os.path.join(home, ".cache", "fleet-console")
    if create:
        os.makedirs(os.path.dirname(d), mode=0o700, exist_ok=True)
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        return d
    if stat.S_ISLNK(st.st_mode):
        die("refusing %s: it is a symlink" % d)
    if not stat.S_ISDIR(st.st_mode):
        die("refusing %s: not a directory" % d)
    if st.st_uid != os.getuid():
        die("refusing %s: owned by uid %d, not by this user (uid %d)" % (d, st.st_uid, os.getuid()))
    if st.st_mode & 0o077:
        os.chmod(d, 0o700)
    pst = os.stat(os.path.dirname(d))
    if pst.st_uid not in (0, os.getuid()) or pst.st_mode & 0o022:
        die("refusing %s: its parent is writable by others or owned by uid %d" % (d, pst.st_uid))
    return d
'''

_UPLOAD = _CHECK_DIR + r'''
name, want = sys.argv[1], sys.argv[2]
d = safe_dir(True)
data = sys.stdin.buffer.read()
if hashlib.sha256(data).hexdigest() != want:
    die("upload damaged: %d bytes, hash differs" % len(data))
tmp = os.path.join(d, "%s.%d.%s.tmp" % (name, os.getpid(), os.urandom(4).hex()))
fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
try:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)
finally:
    os.close(fd)
os.rename(tmp, os.path.join(d, name))
print("uploaded")
'''

_START = _CHECK_DIR + r'''
name, want = sys.argv[1], sys.argv[2]
d = safe_dir(False)
p = os.path.join(d, name)
try:
    fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW)
except OSError as exc:
    die("upload needed: %s: %s" % (p, exc.strerror))
with os.fdopen(fd, "rb") as fh:
    data = fh.read()
if hashlib.sha256(data).hexdigest() != want:
    die("upload needed: %s does not match its hash" % p)
import importlib.abc, importlib.util, io, zipfile
zf = zipfile.ZipFile(io.BytesIO(data))
files = {n: zf.read(n) for n in zf.namelist()}
class Loader(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        base = fullname.replace(".", "/")
        if base + "/__init__.py" in files:
            return importlib.util.spec_from_loader(fullname, self, origin=p + "/" + base + "/__init__.py",
                                                   is_package=True)
        if base + ".py" in files:
            return importlib.util.spec_from_loader(fullname, self, origin=p + "/" + base + ".py")
        return None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        name = module.__spec__.origin[len(p) + 1:]
        module.__file__ = module.__spec__.origin
        if module.__spec__.submodule_search_locations is not None:
            module.__path__ = []
        exec(compile(files[name], module.__file__, "exec"), module.__dict__)
sys.meta_path.insert(0, Loader())
sys.argv = [p] + sys.argv[3:]
from fleet_agent.main import main
sys.exit(main(sys.argv[1:]))
'''


def upload_command(python: str, name: str, sha256: str) -> str:
    """Reads the zipapp on stdin, checks it, writes it safely; prints "uploaded" (exit 3: refused)."""
    return " ".join(shlex.quote(x) for x in (python, "-c", _UPLOAD, name, sha256))


def start_command(python: str, name: str, sha256: str, agent_args: list[str]) -> str:
    """Checks the directory and the zipapp's hash, then runs the agent from the checked bytes."""
    return " ".join(shlex.quote(x) for x in (python, "-c", _START, name, sha256, *agent_args))
