"""Receive cost of each SSH cipher through a real OpenSSH sshd: console CPU seconds per 100 MB.

Why: a profile at 500 hosts put ~17 % of the UI thread in asyncssh's chacha20-poly1305 (several Python-level
calls per packet); AES-GCM is one OpenSSL AEAD call per packet. This starts ``tests/support/sshd.py``'s sshd on
127.0.0.1, and for each cipher connects with asyncssh (compression off), reads ``--mb`` MB of
``head -c`` output over one exec channel (large packets), and ``--lines`` 300-byte lines that a remote
python flushes one by one (small packets, as an agent's frames are), and reports this process's CPU time
(user + system) per 100 MB of each. Last, without SSH: the CPU per line of a read guarded by
``asyncio.wait_for`` (the link's old per-line timer) against a plain read that stamps the time (the watchdog's
per-line cost), over lines already buffered.

    .venv/bin/python bench/cipher_bench.py [--mb 50] [--lines 100000] [--rounds 3] [--ciphers a,b,...]

``--links N --recording FILE`` measures the links alone instead (no UI): N links from this process to
``bench/scale.py``'s replay host (N instances replaying FILE, a recording of the real agent), and reports the
time until all are connected, the CPU that took, the event loop's lag meanwhile (a 50 ms ticker: what a key
press would wait), the most handshakes in flight, and the steady CPU over ``--steady`` s. ``--root DIR``
measures another checkout's ``console`` (a before/after on the same box).
"""

from __future__ import annotations

import asyncio
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (  # first: it puts this checkout on sys.path
    Stopwatch,
    bench_parser,
    console_env,
    cpu_seconds,
    names,
    raise_nofile,
    rank,
    replay_fleet,
    ssh_connect,
    sshd_server,
)

if "--root" in sys.argv[1:-1]:  # before any import of console: the checkout to measure, before this one
    sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--root") + 1]).resolve()))

import console  # noqa: F401,I001  (first: its filter keeps asyncssh's import quiet on recent cryptography)
import asyncssh

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


async def one_round(sshd: Any, cipher: str, command: str) -> tuple[float, float, int]:
    """(CPU s, wall s, bytes) for reading what ``command`` writes, with ``cipher``."""
    async with ssh_connect(sshd, encryption_algs=[cipher], compression_algs=None) as conn:
        assert conn.get_extra_info("recv_cipher") == cipher
        process = await conn.create_process(command, encoding=None)
        clock, got = Stopwatch(), 0
        while True:
            chunk = await process.stdout.read(1 << 20)
            if not chunk:
                break
            got += len(chunk)
        cpu, wall = clock.cpu(), clock.wall()
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


async def links_only(hosts: int, recording: Path, steady: float) -> None:
    """N links (no UI) against the replay host: connect storm and steady receive cost of this process."""
    import os

    import psutil

    import console.link
    from console.inventory import load_fleet
    from console.link import make_link

    raise_nofile()
    console_env()
    print(f"links only: {hosts} hosts, console from {Path(console.link.__file__).parent}; "
          f"{os.environ.get('FLEET_CONSOLE_CONNECT_SLOTS', 'default')} connect slots")
    with tempfile.TemporaryDirectory(prefix="cipher-bench-links-") as tmp, \
            replay_fleet(hosts, recording, Path(tmp)) as fleet_host:
        frames = [0]

        def on_frame(_name: str, _frame: dict[str, object]) -> None:
            frames[0] += 1

        fleet = load_fleet(fleet_host.fleet_path)
        links = [make_link(inst, on_frame, lambda *_: None) for inst in fleet.instances]
        me = psutil.Process()
        cpu0, t0 = me.cpu_times(), time.monotonic()
        for link in links:
            link.start()
        lags: list[float] = []
        while sum(link.status == "connected" for link in links) < hosts and time.monotonic() - t0 < 600:
            tick = time.monotonic()
            await asyncio.sleep(0.05)
            lags.append(time.monotonic() - tick - 0.05)
        connected = sum(link.status == "connected" for link in links)
        cpu1, t1 = me.cpu_times(), time.monotonic()
        print(f"all {connected}/{hosts} connected in {t1 - t0:.1f} s, {cpu_seconds(cpu0, cpu1):.1f} CPU s; loop lag "
              f"meanwhile p50 {1000 * rank(lags, 50):.0f} ms, p90 {1000 * rank(lags, 90):.0f} ms, "
              f"max {1000 * max(lags):.0f} ms")
        try:
            from console.link import pace  # the limiter, where this checkout has one

            limiter = pace.connect_limiter()
            print(f"connect limiter: {limiter.slots} slots, peak {limiter.peak} in flight")
        except ImportError:
            print("connect limiter: none in this checkout")
        print(f"cipher: {getattr(links[0], 'cipher', None) or 'asyncssh default (chacha20-poly1305)'}")
        await asyncio.sleep(2.0)
        cpu2, t2, f2 = me.cpu_times(), time.monotonic(), frames[0]
        await asyncio.sleep(steady)
        cpu3, t3 = me.cpu_times(), time.monotonic()
        busy = cpu_seconds(cpu2, cpu3)
        print(f"steady: {100 * busy / (t3 - t2):.1f} % of a core for {(frames[0] - f2) / (t3 - t2):.0f} "
              f"frames/s ({1e6 * busy / max(1, frames[0] - f2):.0f} CPU us per frame)")
        await asyncio.gather(*(link.stop() for link in links))


async def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--mb", type=int, default=50, help="MB read per round")
    parser.add_argument("--lines", type=int, default=100_000, help="300-byte lines read per round (0: none)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per cipher (the best one is reported)")
    parser.add_argument("--ciphers", type=names, default=",".join(DEFAULT_CIPHERS))
    parser.add_argument("--links", type=int, default=0, help="measure N links to the replay host instead")
    parser.add_argument("--recording", help="with --links: the recording to replay (bench/scale.py's format)")
    parser.add_argument("--steady", type=float, default=20.0, help="with --links: seconds of steady CPU")
    parser.add_argument("--root", help="with --links: the checkout whose console is measured")
    args = parser.parse_args()
    if args.links:
        if not args.recording:
            parser.error("--links needs --recording")
        await links_only(args.links, Path(args.recording), args.steady)
        return
    bulk = f"head -c {args.mb * 1024 * 1024} /dev/zero"
    lines = "python3 -c " + shlex.quote(SMALL_LINES.format(n=args.lines))
    modes = [("bulk", bulk)] + ([("300 B lines", lines)] if args.lines else [])
    with tempfile.TemporaryDirectory(prefix="cipher-bench-") as tmp, sshd_server(Path(tmp) / "sshd") as sshd:
        print(f"asyncssh {asyncssh.__version__}; bulk {args.mb} MB, {args.lines} lines of 300 B per round; "
              f"best of {args.rounds}")
        for cipher in args.ciphers:
            for mode, command in modes:
                runs = [await one_round(sshd, cipher, command) for _ in range(args.rounds)]
                cpu, wall, got = min(runs)
                per100 = cpu * (100 * 1024 * 1024) / got
                print(f"{cipher:32s} {mode:12s} {per100:6.2f} CPU s per 100 MB  "
                      f"({got / wall / 1e6:6.1f} MB/s wall)")
    await read_overhead()


if __name__ == "__main__":
    asyncio.run(main())
