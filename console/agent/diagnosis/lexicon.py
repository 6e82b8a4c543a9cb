"""The classes' own words: what a failure line in a wording no signature knows is about (pure).

The signature table (sigtables.py, sigrows.py) knows programs' exact sentences; a program it has never seen still
says what went wrong in the words of the class: "out of memory", "403", "connection failed", "mismatch of
architecture", "cannot open shared object file". When the verdict is only a wrapper or a symptom
(``python_traceback``, ``child_failed``, ``benchmark_not_running``), these words on the failure lines around the
end pick the class (refine.py); the wrapper stays the alternative. Order matters: the more specific class first (a
``malloc`` that ran out of memory is the host's, a 403 on a download is a refused credential).
"""

from __future__ import annotations

import re
from typing import List, Optional, Pattern, Tuple

_I = re.IGNORECASE
LEXICON: List[Tuple[str, Pattern[str]]] = [(code, re.compile(p, _I)) for code, p in (
    ("disk_full", r"\bno space left\b|\bENOSPC\b|\bdisk quota exceeded\b|\b(?:disk|filesystem|volume) (?:is )?full\b"),
    ("host_memory_exhausted", r"\b(?:malloc|calloc|realloc|posix_memalign|mmap)\b.{0,60}\b(?:fail|refus|null|out of)"
                              r"|\bbad_alloc\b|\bcannot allocate memory\b|\bENOMEM\b"
                              r"|\bout of (?:host|system|cpu|main) memory\b"
                              r"|\b(?:host|system|cpu|pinned) memory\b.{0,40}\b(?:exhausted|insufficient|failed)"),
    ("cuda_oom", r"\bout of (?:device |gpu |cuda |video )?memory\b|\bOOM\b"
                 r"|\b(?:memory )?allocation (?:error|fail(?:ed|ure)?)\b"
                 r"|\b(?:insufficient|not enough) (?:free )?(?:gpu |device |cuda |video )?memory\b"
                 r"|\bfailed to allocate\b"),
    ("address_in_use", r"\baddress already in use\b|\bEADDRINUSE\b"),
    ("resource_limit", r"\btoo many open files\b|\bEMFILE\b|\bresource temporarily unavailable\b"
                       r"|\bpids\.max\b|\bRLIMIT_\w+"),
    ("credentials_refused", r"\b(?:401|403)\b(?!\s*(?:bytes|ms|s)\b)|\bunauthori[sz]ed\b|\bforbidden\b"
                            r"|\baccess denied\b|\bauthentication (?:failed|required)\b"
                            r"|\binvalid (?:credentials|token|api[ _-]?key|access key)\b|\bexpired ?token\b"
                            r"|\btoken (?:has )?expired\b|\bSignatureDoesNotMatch\b|\bnot authori[sz]ed\b"),
    ("no_gpu_driver", r"\b(?:cuda |nvidia |gpu )?driver (?:library )?(?:cannot be found|not found|is not installed"
                      r"|not loaded|could not be loaded)\b|\blibcuda\.so[.\d]*:? cannot open\b"
                      r"|\bno (?:nvidia |cuda )?(?:gpu )?driver\b"),
    ("driver_mismatch", r"\bdriver (?:version )?(?:is )?(?:too old|insufficient)\b"
                        r"|\binsufficient (?:cuda )?driver\b|\bdriver/library version mismatch\b"),
    ("version_mismatch", r"\bmismatch\b|\bincompatible\b|\bnot compatible\b|\bno kernel image\b"
                         r"|\bunsupported (?:gpu |cuda )?(?:architecture|arch|compute capability|sm_\d+)"
                         r"|\bundefined symbol\b|\bcompiled (?:for|against) (?:a )?(?:different|another)\b"),
    ("library_missing", r"\bcannot open shared object file\b|\b=> not found\b|\blib[\w+-]+\.so[.\d]* (?:not found"
                        r"|is missing)\b|\bcould not load (?:dynamic )?library\b"),
    ("permission_denied", r"\bpermission denied\b|\bEACCES\b|\boperation not permitted\b"),
    ("command_not_found", r"\bcommand not found\b|\bexecutable file not found\b|\bnot found in \$?PATH\b"),
    ("download_failed", r"\bHTTP(?: error)? (?:000|4\d\d|5\d\d)\b"
                        r"|\bconnection (?:failed|refused|reset|aborted|timed out|closed)\b"
                        r"|\bcould not resolve\b|\bname resolution\b|\bnetwork is unreachable\b"
                        r"|\bRPC failed\b|\bearly EOF\b|\bunexpected EOF\b|\bread timed out\b|\bcurl:? \(?\d+\)?"
                        r"|\bSSL(?:Error| error)\b|\bcertificate verify failed\b|\b(?:download|fetch|clone|pull)"
                        r"(?:ing)? (?:failed|error|aborted)\b"),
    ("segfault", r"\bsegmentation fault\b|\bSIGSEGV\b|\bsignal 11\b"),
    ("cuda_error", r"\bCUDA error\b|\bcudaError\w+|\bCUDA_ERROR_\w+|\billegal memory access\b"
                   r"|\bunspecified launch failure\b|\bdevice-side assert\b"),
)]


def class_of(text: str) -> Optional[str]:
    """The failure class a line's own words name (None: none of them)."""
    for code, pattern in LEXICON:
        if pattern.search(text):
            return code
    return None
