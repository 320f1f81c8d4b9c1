"""Whether the machine was busier than its cores while the timings were taken: a ratio
measured then says as much about the other processes as about the code timed."""

from __future__ import annotations

import os


def busy_note() -> str:
    """A note to print beside measured ratios where the load (the last minute's average
    of runnable processes) is above the machine's cores; else ""."""
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load <= cores:
        return ""
    return (
        f"note: the machine's load was {load:.1f} on {cores} cores while this ran: other "
        "processes took time from these runs, so the ratios may mislead; run again on an "
        "idle machine to compare"
    )
