"""A job that asks for more GPUs than MIG slices give a process (blind round 10).

A CUDA process sees one MIG instance at most: a launch that sets device 1 on a MIG-enabled GPU (torchrun's ranks on
two slices) fails with ``device >= 0 && device < num_gpus``, ``invalid device ordinal``, ``CUDA_ERROR_INVALID_DEVICE``.
On a host whose GPU sample lists MIG instances, that failure is ``mig_misconfigured``: the fix is the MIG layout or
one process per slice, not the code. Without MIG it stays a ``cuda_error``.
"""

from __future__ import annotations

from typing import Any, Dict, List

from .records import Item
from .sigrows import ORDINAL


def mig_layout(facts: Dict[str, Any], items: List[Item]) -> None:
    devices = (facts.get("gpu") or {}).get("devices") or []
    slices = sum(len(d.get("mig") or ()) for d in devices if isinstance(d, dict))
    if not slices:
        return
    for item in items:
        if item.code != "cuda_error" or not any(ORDINAL.pattern.search(str(e.get("text") or ""))
                                                for e in item.evidence):
            continue
        item.code = "mig_misconfigured"
        item.summary = "%s (the GPUs are split into %d MIG slices: a process sees one)" % (item.summary, slices)
