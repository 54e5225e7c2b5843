"""Did the kernel's OOM killer end a rank? Ask the kernel log, when we are allowed to read it.

A rank that dies of SIGKILL (torchrun: ``exitcode: -9``) was killed from outside,
and on a training machine that is almost always the out-of-memory killer. The
kernel logs each kill with the victim's pid::

    Out of memory: Killed process 4806 (python) total-vm:..., anon-rss:...
    Memory cgroup out of memory: Killed process 4806 (python) ...
    oom-kill:constraint=CONSTRAINT_NONE,...,task=python,pid=4806,uid=1000

Reading it needs ``/dev/kmsg`` or ``dmesg``, which many systems restrict
(``kernel.dmesg_restrict``) or containers hide. Every reader here returns None
when it cannot read, never raises, and is bounded in time.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
from collections.abc import Iterable

DMESG_TIMEOUT_SECONDS = 2.0
MAX_KMSG_RECORDS = 20_000

OOM_PATTERNS = (
    re.compile(r"[Kk]illed process (\d+)\b"),
    re.compile(r"oom-kill:.*\bpid=(\d+)\b"),
    re.compile(r"[Oo]ut of memory.*\bprocess (\d+)\b"),
)


def read_kernel_log() -> list[str] | None:
    """The kernel's recent messages (oldest first), or None when not readable here."""
    lines = _read_kmsg()
    if lines is None:
        lines = _read_dmesg()
    return lines


def _read_kmsg() -> list[str] | None:
    """``/dev/kmsg`` without blocking: one record per read, ``EAGAIN`` at the end."""
    try:
        descriptor = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    lines: list[str] = []
    try:
        for _ in range(MAX_KMSG_RECORDS):
            try:
                record = os.read(descriptor, 8192)
            except BlockingIOError:
                break
            except OSError as error:
                if error.errno == errno.EPIPE:  # the ring buffer overwrote a record: go on
                    continue
                return lines or None
            if not record:
                break
            text = record.decode("utf-8", errors="replace")
            lines.append(text.split(";", 1)[1].rstrip("\n") if ";" in text else text.rstrip("\n"))
    finally:
        os.close(descriptor)
    return lines


def _read_dmesg() -> list[str] | None:
    try:
        result = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=DMESG_TIMEOUT_SECONDS)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0:
        return None
    return result.stdout.splitlines()


def find_oom_kill(lines: Iterable[str], pid: int) -> str | None:
    """The kernel's line saying the OOM killer killed ``pid``, if there is one."""
    for line in lines:
        for pattern in OOM_PATTERNS:
            match = pattern.search(line)
            if match and int(match.group(1)) == pid:
                return line.strip()
    return None
