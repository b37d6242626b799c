"""A run's status as `viewmill lake runs` shows it: the `runs` row's, except that a `running`
row whose process is gone (killed, the machine restarted) is `crashed`.

A run writes its row as `running` when it starts and its end when it ends; a SIGKILL leaves the
row `running`, with the host and pid it ran as. Only a process on this host can be checked: a
run on another host shows as `running` until it ends there."""

from __future__ import annotations

import os
import socket
from datetime import datetime
from typing import Any

RUNNING, CRASHED = "running", "crashed"


def process_gone(pid: int, started_at: datetime | None) -> bool:
    """Whether process `pid` on this host is not the run that started at `started_at`: no such
    process, or (where psutil is installed) one created after the run started, a reused pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: it exists
        pass
    try:
        import psutil
    except ImportError:  # psutil comes with the prefect extra; without it a reused pid reads as running
        return False
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:  # dead, not yet reaped by its parent
            return True
        created = process.create_time()
    except psutil.NoSuchProcess:
        return True
    return started_at is not None and created > started_at.timestamp() + 1  # a second's slack for clocks


def shown_status(row: dict[str, Any]) -> str:
    """The row's status, `crashed` for a `running` row of this host whose process is gone."""
    status = row.get("status")
    pid, host = row.get("pid"), row.get("host")
    if status != RUNNING or pid is None or host != socket.gethostname():
        return str(status)
    return CRASHED if process_gone(int(pid), row.get("started_at")) else RUNNING
