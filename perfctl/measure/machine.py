"""Machine fingerprint: what a measurement ran on (for provenance and warnings)."""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import socket
import subprocess
from collections.abc import Collection, Iterable
from pathlib import Path

from perfctl.caveats import Caveat, WarningKind
from perfctl.model import Machine


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (or platform's guess)."""
    for line in _read("/proc/cpuinfo").splitlines():
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


def memory_bytes() -> int:
    """Total physical memory in bytes (0 when unreadable)."""
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def governor() -> str:
    """The CPU frequency governor of cpu0, or 'unknown' where not readable."""
    return _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor") or "unknown"


@functools.cache  # every fingerprint asks; nvidia-smi takes ~0.1 s and GPUs stay put
def gpus() -> tuple[str, ...]:
    """One line per NVIDIA device: name, driver and memory (empty without nvidia-smi)."""
    query = "name,driver_version,memory.total"
    return gpu_lines(_nvidia_smi(f"--query-gpu={query}", "--format=csv,noheader,nounits"))


def gpu_lines(lines: Iterable[str]) -> tuple[str, ...]:
    """nvidia-smi's CSV rows (name, driver, MiB) as the fingerprint's lines."""
    out = []
    for line in lines:
        name, driver, mib = (part.strip() for part in (line.split(",") + ["", ""])[:3])
        out.append(f"{name}, driver {driver}, {mib} MiB")
    return tuple(out)


def _nvidia_smi(*args: str) -> list[str]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    return [ln for ln in done.stdout.splitlines() if ln.strip()] if done.returncode == 0 else []


def fingerprint() -> Machine:
    """The current machine; ``id`` hashes the fields that affect timings."""
    model, cores, mem = cpu_model(), os.cpu_count() or 0, memory_bytes()
    kernel, gov = platform.release(), governor()
    python = platform.python_version()
    devices = gpus()
    # The hostname is kept for display but not hashed: CI runners rename hosts.
    # GPUs join the key only where there are any, so CPU-only ids stay as they were.
    key = f"{model}|{cores}|{mem // 2**30}|{kernel}|{gov}|{python}"
    key += "".join(f"|{g}" for g in devices)
    return Machine(
        id=hashlib.sha256(key.encode()).hexdigest()[:12],
        cpu_model=model,
        cores=cores,
        memory_bytes=mem,
        kernel=kernel,
        governor=gov,
        python=python,
        hostname=socket.gethostname(),
        gpus=devices,
    )


def load_average() -> float | None:
    """The 1-minute load average (None where the platform has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _cpu_ticks(cpus: Collection[int]) -> tuple[int, int, int] | None:
    """(busy, total) jiffies from /proc/stat summed over the ``cpuN`` lines of ``cpus``
    that are there, and how many those are; None where there are none."""
    wanted = {f"cpu{n}" for n in cpus}
    lines = _read("/proc/stat").splitlines()
    rows = [parts for ln in lines if (parts := ln.split()) and parts[0] in wanted]
    busy = total = 0
    for row in rows:
        if len(row) < 6:
            return None
        ticks = [int(x) for x in row[1:9]]  # user nice system idle iowait irq softirq steal
        idle = ticks[3] + ticks[4]
        busy, total = busy + sum(ticks) - idle, total + sum(ticks)
    return (busy, total, len(rows)) if rows else None


def allowed_cpus() -> frozenset[int]:
    """The CPUs this process may run on (its affinity mask; all where there is none)."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return frozenset(range(os.cpu_count() or 1))


def cpus_busy(cpus: Collection[int], window: float = 0.2) -> float | None:
    """How many of ``cpus`` were busy over the next ``window`` seconds (steal time
    counts); None at once where /proc/stat shows none of them.

    Sampled while perfctl itself sleeps, so it is other work's share. Only the CPUs
    that the workers can run on count: a busy CPU outside ``taskset`` or ``--affinity``
    takes nothing from them.
    """
    import time

    before = _cpu_ticks(cpus)
    if before is None:
        return None
    time.sleep(window)
    after = _cpu_ticks(cpus)
    if after is None:
        return None
    if after[1] <= before[1] or after[2] != before[2]:
        return 0.0  # nothing counted in the window (or a CPU went away): nothing seen busy
    return (after[0] - before[0]) / (after[1] - before[1]) * after[2]


MAX_CPU = 8191  # the kernel's largest CPU number (NR_CPUS is at most 8192)


def parse_cpus(text: str) -> tuple[int, ...]:
    """``"0-2,5"`` → (0, 1, 2, 5): a CPU list as ``taskset -c`` and pyperf's ``--affinity``
    read it; ValueError says what is wrong."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"`{part}` is not a CPU number or range (e.g. 0-1,3)")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ValueError(f"`{part}` runs backwards")
        if last > MAX_CPU:
            raise ValueError(f"`{part}`: no CPU is numbered above {MAX_CPU}")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def cpus_refused(cpus: Collection[int]) -> tuple[int, ...]:
    """The CPUs of ``cpus`` a process here cannot be pinned to (offline, outside the
    container's cpuset); tried on perfctl itself, its own mask restored. Isolated CPUs
    (``isolcpus``) are outside the default mask but can be pinned to: not refused.
    Linux only (the caller checks for ``sched_setaffinity``)."""
    own = os.sched_getaffinity(0)
    refused = []
    try:
        for n in sorted(cpus):
            try:
                os.sched_setaffinity(0, {n})
            except OSError:
                refused.append(n)
    finally:
        os.sched_setaffinity(0, own)
    return tuple(refused)


# Where Linux lists the CPUs that `isolcpus=` keeps from the scheduler.
ISOLATED = Path("/sys/devices/system/cpu/isolated")


def isolated_cpus() -> tuple[int, ...]:
    """The CPUs the kernel isolates (``isolcpus``); () where none are or it cannot tell."""
    try:
        return parse_cpus(ISOLATED.read_text(encoding="ascii").strip())
    except (OSError, ValueError, UnicodeDecodeError):
        return ()  # no such file (not Linux, Linux < 4.2), or empty: none isolated


def common_cpus(placements: Iterable[Collection[int]]) -> tuple[int, ...]:
    """The CPU list every one of ``placements`` names (stored ``affinity`` values), or
    ``()`` when they differ: workers pinned differently were not pinned as one."""
    found = {tuple(cpus) for cpus in placements}
    return found.pop() if len(found) == 1 else ()


def format_cpus(cpus: Collection[int]) -> str:
    """(0, 1, 2, 5) → ``"0-2,5"``."""
    runs: list[list[int]] = []
    for n in sorted(set(cpus)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(f"{lo}-{hi}" if hi > lo else f"{lo}" for lo, hi in runs)


def busy_warning(loads: list[float | None], cpus: int | None) -> Caveat | None:
    """A warning when the machine was busier than its CPUs while measuring.

    The benchmark process itself adds about 1 to the load, so a load above the
    CPU count means other work competed with it for a core.
    """
    seen = [x for x in loads if x is not None]
    if not seen or not cpus or max(seen) <= cpus:
        return None
    return Caveat(
        f"the machine was busy while measuring (load average up to {max(seen):.1f} on "
        f"{cpus} CPUs): expect wider intervals and inconclusive verdicts; "
        "measure on a quiet machine",
        WarningKind.BUSY_MACHINE,
    )
