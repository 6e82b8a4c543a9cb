"""Receive cost of each SSH cipher through a real OpenSSH sshd: console CPU seconds per 100 MB.

Why: a profile at 500 hosts put ~17 % of the UI thread in asyncssh's chacha20-poly1305 (several Python-level
calls per packet); AES-GCM is one OpenSSL AEAD call per packet. This starts ``tests/sshd.py``'s sshd on
127.0.0.1, and for each cipher connects with asyncssh (compression off), reads ``--mb`` MB of
``head -c`` output over one exec channel (large packets), and ``--lines`` 300-byte lines that a remote
python flushes one by one (small packets, as an agent's frames are), and reports this process's CPU time
(user + system) per 100 MB of each. Last, without SSH: the CPU per line of a read guarded by
``asyncio.wait_for`` (the link's old per-line timer) against a plain read that stamps the time (the watchdog's
per-line cost), over lines already buffered.

    .venv/bin/python bench/cipher_bench.py [--mb 50] [--lines 100000] [--rounds 3] [--ciphers a,b,...]
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import asyncssh  # noqa: E402

from tests.sshd import Sshd  # noqa: E402

SMALL_LINES = (
    "import sys\n"
    "line = b'x' * 299 + b'\\n'\n"
    "out = sys.stdout.buffer\n"
    "for _ in range({n}):\n"
    "    out.write(line)\n"
    "    out.flush()\n"
)
DEFAULT_CIPHERS = ("chacha20-poly1305@openssh.com", "aes128-gcm@openssh.com", "aes256-gcm@openssh.com",
                   "aes128-ctr")


async def one_round(sshd: Sshd, cipher: str, command: str) -> tuple[float, float, int]:
    """(CPU s, wall s, bytes) for reading what ``command`` writes, with ``cipher``."""
    async with asyncssh.connect(
        "127.0.0.1", port=sshd.port, username=sshd.user, client_keys=[str(sshd.client_key_path)],
        known_hosts=str(sshd.known_hosts), encryption_algs=[cipher], compression_algs=None, config=[],
    ) as conn:
        assert conn.get_extra_info("recv_cipher") == cipher
        process = await conn.create_process(command, encoding=None)
        cpu0, wall0, got = time.process_time(), time.monotonic(), 0
        while True:
            chunk = await process.stdout.read(1 << 20)
            if not chunk:
                break
            got += len(chunk)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        await process.wait()
    return cpu, wall, got


async def read_overhead(n: int = 200_000) -> None:
    """CPU microseconds per line: ``wait_for(readline(), 30)`` against ``readline()`` plus a timestamp."""
    for mode in ("wait_for per line", "watchdog stamp"):
        reader = asyncio.StreamReader()
        for _ in range(n):
            reader.feed_data(b"x" * 299 + b"\n")
        reader.feed_eof()
        cpu0, stamps = time.process_time(), [0.0]
        for _ in range(n):
            if mode == "wait_for per line":
                await asyncio.wait_for(reader.readline(), 30)
            else:
                await reader.readline()
                stamps[0] = time.monotonic()
        per_line = (time.process_time() - cpu0) / n * 1e6
        print(f"read overhead: {mode:18s} {per_line:6.1f} CPU us per line")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=50, help="MB read per round")
    parser.add_argument("--lines", type=int, default=100_000, help="300-byte lines read per round (0: none)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per cipher (the best one is reported)")
    parser.add_argument("--ciphers", default=",".join(DEFAULT_CIPHERS))
    args = parser.parse_args()
    bulk = f"head -c {args.mb * 1024 * 1024} /dev/zero"
    lines = "python3 -c " + shlex.quote(SMALL_LINES.format(n=args.lines))
    modes = [("bulk", bulk)] + ([("300 B lines", lines)] if args.lines else [])
    with tempfile.TemporaryDirectory(prefix="cipher-bench-") as tmp:
        sshd = Sshd(Path(tmp) / "sshd")
        sshd.start()
        try:
            print(f"asyncssh {asyncssh.__version__}; bulk {args.mb} MB, {args.lines} lines of 300 B per round; "
                  f"best of {args.rounds}")
            for cipher in args.ciphers.split(","):
                for mode, command in modes:
                    runs = [await one_round(sshd, cipher, command) for _ in range(args.rounds)]
                    cpu, wall, got = min(runs)
                    per100 = cpu * (100 * 1024 * 1024) / got
                    print(f"{cipher:32s} {mode:12s} {per100:6.2f} CPU s per 100 MB  "
                          f"({got / wall / 1e6:6.1f} MB/s wall)")
        finally:
            sshd.stop()
    await read_overhead()


if __name__ == "__main__":
    asyncio.run(main())
