"""What the tests share (plain modules, no fixtures: those are in ``tests/conftest.py``).

- ``wait``: ``until`` / ``until_sync``, the one wait-until-true-or-time-out loop, with a failure that says what
  was awaited.
- ``app``: the console app on a local fleet for Pilot tests (``make_app``, ``wait_until``, ``screen_text``...).
- ``frames``: agent frames (hello, gpu, procs, heartbeat, log) for tests that feed a ``FleetState`` by hand.
- ``sshd``: a real OpenSSH ``sshd`` on loopback (``Sshd``), ``ssh_instance`` records that reach it, a real
  ``ssh-agent``, ``keygen``.
- ``tmux``: a real terminal program driven through a private tmux server (``Tmux``).

Tests that start an sshd or a tmux are marked ``sshd`` / ``tmux`` by ``tests/conftest.py`` on their own;
``make test-quick`` runs the others.
"""
