"""CPU time per thread of this process, from /proc (Linux): which of the watches, the view keeper and the verbs'
threads the extender's CPU goes to. Process totals (prometheus-client's process collector) cannot tell a verb
from a watch event; on a small control plane that CPU is taken from kube-scheduler and the API server."""

from __future__ import annotations

import os
import re
import threading

_POOL_SUFFIX = re.compile(r"_\d+$")  # ThreadPoolExecutor-0_3: the pool's threads are one row
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def stat_cpu_seconds(stat_path: str) -> float:
    """User + system seconds of one /proc/<pid>/stat or /proc/<pid>/task/<tid>/stat (utime and stime, fields 14
    and 15 of proc(5); the command name before them may hold spaces and parentheses)."""
    with open(stat_path, encoding="ascii", errors="replace") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def thread_cpu_seconds(task_dir: str = "/proc/self/task") -> dict[str, float]:
    """User + system seconds per thread name (threads of one pool summed), threads alive now; {} off Linux."""
    names = {thread.native_id: _POOL_SUFFIX.sub("", thread.name) for thread in threading.enumerate()}
    totals: dict[str, float] = {}
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return {}
    for tid in tids:
        try:
            seconds = stat_cpu_seconds(f"{task_dir}/{tid}/stat")
        except (OSError, IndexError):
            continue  # the thread ended meanwhile
        name = names.get(int(tid), "other")
        totals[name] = totals.get(name, 0.0) + seconds
    return totals
