"""The scheduling class of a real-time session's station processes (Linux).

Theory of operation
-------------------
A real-time session (``pianode mesh --rate``) must deliver every frame within
50 ms.  Under the OS's normal class a station process that shares its core
with another busy program gets half of that core, whatever the session
needs: 32 stations of Pia 5.18 at 60 Hz need about 65 % of each of two
cores, so with one core kept busy by another program the process on it falls
behind for seconds at a time (93-96 % of frames on time, ``LATE``), although
the machine as a whole has the CPU to spare.  Consoles run their game and
network threads at a fixed high priority for the same reason.

So while the frame clock runs, each station process asks for the round-robin
real-time class (``SCHED_RR``) at a low real-time priority (:data:`PRIORITY`):
it then runs whenever it has work, before any program of the normal class,
and takes only what the session needs; the busy program gets the rest.
Measured with one core kept busy: 100.00 % of frames within 50 ms at 115 %
CPU, against 0.38 % without it while other work also ran.

Two bounds keep a real-time process from starving the machine:

* the kernel's own real-time throttling (``sched_rt_runtime_us``, 95 % of
  each second by default) leaves the normal class a share in any case;
* a process that used more than :data:`GIVE_BACK_LOAD` of its core in each
  of :data:`GIVE_BACK_SECONDS` seconds in a row cannot keep real time with any
  priority: it gives the class back and the report says when.  (One such
  second alone is a process catching up after a hiccup, which is what the
  class is for.)

The OS grants the class to root, to a process with ``CAP_SYS_NICE``, or up to
the ``RLIMIT_RTPRIO`` limit (``ulimit -r``).  Where it refuses, the session
runs in the normal class and the report says why; ``--scheduling normal``
never asks.  A process already in a real-time class (started under ``chrt``)
keeps what it was given.

This module only talks to the OS; the frame clock
(:meth:`pianode.sim.mesh_run.MeshRun._frame_clock`) calls it with the time.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import attrs

__all__ = ["GIVE_BACK_LOAD", "GIVE_BACK_SECONDS", "MODES", "PRIORITY", "RealtimeClass", "describe"]

#: The ``SCHED_RR`` priority asked for (1-99): above every normal program and
#: below the kernel's interrupt threads and audio servers (50 and up).
PRIORITY = 10
#: A process that used more than this share of its core in each of GIVE_BACK_SECONDS seconds in a row
#: gives the class back.
GIVE_BACK_LOAD = 0.9
GIVE_BACK_SECONDS = 3
#: What ``--scheduling`` takes: ask for the real-time class during the frame clock, or never.
MODES = ("auto", "normal")

_CHECK_EVERY = 1.0  # seconds of the session between two looks at the process's CPU use


@attrs.define
class RealtimeClass:
    """One station process's real-time class during a frame clock: what it asked for and what it got.

    ``enter()`` before the first frame, ``check(now, cpu)`` as frames go out
    (cheap: a comparison until a second has passed), ``leave()`` after the
    last.  *setter*/*getter* are ``os.sched_setscheduler``/``os.sched_getscheduler``
    (tests give others).
    """

    mode: str = "auto"
    setter: Callable[[int, int, Any], None] | None = attrs.field(default=getattr(os, "sched_setscheduler", None))
    getter: Callable[[int], int] | None = attrs.field(default=getattr(os, "sched_getscheduler", None))
    granted: bool = False
    #: Why the process ran in the normal class (None: it did not, or nobody asked).
    refusal: str | None = None
    #: Already in a real-time class before the session (e.g. under ``chrt``): kept as it was.
    inherited: bool = False
    #: Seconds into the session when the class was given back (None: kept to the end).
    given_back_after: float | None = None
    _previous: int | None = None
    _start: float = 0.0
    _next: float = float("inf")
    _mark: tuple[float, float] = (0.0, 0.0)
    _over: int = 0  # seconds in a row above GIVE_BACK_LOAD

    def enter(self, now: float, cpu: float) -> None:
        """Ask for the class (mode ``auto``); *now* and *cpu* start the give-back watch."""
        if self.mode != "auto":
            return
        if self.setter is None or self.getter is None or not hasattr(os, "SCHED_RR"):
            self.refusal = "this OS has no real-time scheduling class that Python can ask for"
            return
        try:
            current = self.getter(0)
        except OSError as exc:
            self.refusal = f"the OS did not say the process's class ({exc.strerror or exc})"
            return
        if current in (getattr(os, "SCHED_RR", -1), getattr(os, "SCHED_FIFO", -1)):
            self.granted = self.inherited = True  # someone (chrt) chose it: theirs to keep
            return
        try:
            self.setter(0, os.SCHED_RR, os.sched_param(PRIORITY))
        except OSError as exc:
            self.refusal = (
                f"the OS refused the real-time class ({exc.strerror or exc}): run as root, with CAP_SYS_NICE or "
                f"with 'ulimit -r {PRIORITY}' to keep frames on time beside busy programs"
            )
            return
        self.granted, self._previous = True, current
        self._start, self._next, self._mark = now, now + _CHECK_EVERY, (now, cpu)

    def check(self, now: float, cpu: float) -> None:
        """Give the class back once the process used more than GIVE_BACK_LOAD of its core in each of
        GIVE_BACK_SECONDS looks in a row (a look a second)."""
        if now < self._next:
            return
        then, cpu_then = self._mark
        self._next, self._mark = now + _CHECK_EVERY, (now, cpu)
        self._over = self._over + 1 if cpu - cpu_then > GIVE_BACK_LOAD * (now - then) else 0
        if self._over >= GIVE_BACK_SECONDS:
            self._restore()
            self.given_back_after = now - self._start

    def leave(self) -> None:
        """Back to the class the process had before (no-op if it never changed)."""
        self._restore()

    def _restore(self) -> None:
        previous, self._previous, self._next = self._previous, None, float("inf")
        if previous is not None and self.setter is not None:
            try:
                self.setter(0, previous, os.sched_param(0))
            except OSError:  # pragma: no cover - leaving the real-time class is always permitted
                pass

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "real_time": self.granted,
            "policy": "SCHED_RR" if self.granted and not self.inherited else "inherited" if self.inherited else "normal",
            "priority": PRIORITY if self.granted and not self.inherited else None,
            "refusal": self.refusal,
            "given_back_after_s": self.given_back_after,
        }


def describe(processes: list[dict[str, Any]]) -> str:
    """One line for the report from each station process's :meth:`RealtimeClass.as_dict`."""
    if not processes:
        return "normal class"
    first = processes[0]
    if first["mode"] != "auto":
        return "normal class (--scheduling normal)"
    parts = []
    for k, p in enumerate(processes):
        if p["policy"] == "inherited":
            text = "a real-time class it was started in, kept"
        elif p["real_time"]:
            text = f"real-time class (round-robin, priority {p['priority']}) while frames were sent"
            if p["given_back_after_s"] is not None:
                text += (f", given back after {p['given_back_after_s']:.0f} s: the process needed more than "
                         f"{GIVE_BACK_LOAD:.0%} of its core for {GIVE_BACK_SECONDS} s in a row")  # fmt: skip
        else:
            text = f"normal class: {p['refusal']}"
        parts.append(text)
    if len(set(parts)) == 1:
        return parts[0] + (f" (each of {len(processes)} processes)" if len(processes) > 1 else "")
    return "; ".join(f"process {k + 1}: {t}" for k, t in enumerate(parts))
