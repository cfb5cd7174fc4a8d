"""What one worker knows about one lease, shared by the heartbeat thread and the tool.

Three states, never merged: *owned* until a conservative local deadline,
*unknown* when the database did not answer (the lease may still hold, but no
new irreversible step may start), *lost* when the database said zero rows or
the local deadline passed. The deadline is measured on this process's
monotonic clock from the moment the confirming statement was *sent*, using the
remaining time the database itself reported (``lease_until - db_now``), so
neither clock skew nor a slow reply can stretch it.
"""

from __future__ import annotations

import threading
import time

from .._errors import JobCancelled, LeaseLost, OwnershipUnknown
from .._states import OwnershipState as Status


class Ownership:
    """Thread-safe ownership record of one claimed job."""

    def __init__(self, sent_at: float, remaining: float) -> None:
        self._lock = threading.Lock()
        self._status: Status = "owned"
        self._deadline = sent_at + remaining
        self._reason = ""
        self.confirmed_at = sent_at
        # True once lost or cancelled. A plain flag, not a threading.Event: nobody waits on
        # it, and an Event (a Condition and a lock) per job was a tenth of a busy worker.
        self.ended = False
        # True from the moment the job's fenced commit is sent until the database refused
        # it (it stays True once accepted): a heartbeat that matches zero rows meanwhile
        # crossed our own commit, and is no sign of a lost lease.
        self.committing = False
        self.cancelled_at: float | None = None  # monotonic, once the owner learned of a cancel

    @property
    def status(self) -> Status:
        with self._lock:
            if self._status in ("owned", "unknown") and time.monotonic() >= self._deadline:
                self._lose("deadline_passed")
            return self._status

    @property
    def deadline(self) -> float:
        """The conservative local deadline (monotonic); a float read needs no lock."""
        return self._deadline

    @property
    def reason(self) -> str:
        return self._reason

    @property
    def refused(self) -> bool:
        """The database itself said so: the job was cancelled, or an extension matched
        zero rows. (A local deadline that passed is a conservative guess: there, the
        fenced commit is left to decide.)"""
        return self._status == "cancelled" or (
            self._status == "lost" and self._reason == "zero_rows"
        )

    def remaining(self) -> float:
        """Seconds of lease this worker may still count on (never negative)."""
        with self._lock:
            if self._status in ("lost", "cancelled"):
                return 0.0
            return max(0.0, self._deadline - time.monotonic())

    def confirm(self, sent_at: float, remaining: float) -> None:
        with self._lock:
            if self._status in ("lost", "cancelled"):
                return  # zero rows once means gone for good; never resurrect
            self._deadline = max(self._deadline, sent_at + remaining)
            self._status = "owned"
            self.confirmed_at = sent_at

    def mark_unknown(self) -> bool:
        """Record that the database did not answer; True if this is news."""
        with self._lock:
            if self._status != "owned":
                return False
            self._status = "unknown"
            return True

    def mark_lost(self, reason: str) -> bool:
        with self._lock:
            if self._status in ("lost", "cancelled"):
                return False
            self._lose(reason)
            return True

    def mark_cancelled(self) -> bool:
        with self._lock:
            if self._status in ("lost", "cancelled"):
                return False
            self._status = "cancelled"
            self._reason = "cancelled"
            self.ended = True
            self.cancelled_at = time.monotonic()
            return True

    def _lose(self, reason: str) -> None:
        self._status = "lost"
        self._reason = reason
        self.ended = True

    def ensure(self, margin: float) -> None:
        """Raise unless a new irreversible step may start now."""
        status = self.status
        if status == "cancelled":
            raise JobCancelled("the job was cancelled by an operator")
        if status == "lost":
            raise LeaseLost(f"the lease is lost ({self._reason})")
        if status == "unknown":
            raise OwnershipUnknown(
                "the database has not confirmed the lease; no new irreversible step may start"
            )
        left = self.remaining()
        if left < margin:
            raise OwnershipUnknown(
                f"only {left:.3f} s of confirmed lease remain, below the safety margin "
                f"of {margin:.3f} s"
            )
