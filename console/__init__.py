"""fleet-console: a terminal console for fleets of rented GPU instances."""

import warnings

__version__ = "0.1.0"

# Recent cryptography releases (51 here) warn about DSA when asyncssh imports its key types. The warning is
# about asyncssh's code, not the operator's setup, and printed on stderr it broke the one-line errors every
# command promises (and the last stderr line a link worker reports). Only this warning from asyncssh is silenced.
warnings.filterwarnings("ignore", message=r"DSA is deprecated", module=r"asyncssh(\.|$)")
