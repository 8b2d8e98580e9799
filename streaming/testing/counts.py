"""The stand-in's counts and the failures it has been told to inject.

Requests by route, rows answered and take requests since the last reset (what
``LanceDBStandIn.stats`` reports), the latency added to every answer, and the
pending faults: the next ``count`` requests of a route answer a status (with
``Retry-After`` if asked), stall, are dropped unanswered or are cut half way.
"""

from __future__ import annotations

import threading
from typing import Any

from .answers import TAKE

__all__ = ["Counts"]


class Counts:
    """Requests by route and rows answered, since the last reset; faults and latency to apply."""

    def __init__(self, latency_s: float) -> None:
        self.lock = threading.Condition()
        self.latency_s = latency_s
        self.stalled = 0
        self.faults: list[dict[str, Any]] = []
        self.reset()

    def reset(self) -> None:
        """Zero the counts (faults and latency stay)."""
        with self.lock:
            self.requests: dict[str, int] = {}
            self.rows = 0
            self.taken = 0
            self.takes = 0
            self.bodies: list[dict[str, Any]] = []

    def count(self, route: str, body: Any) -> dict[str, Any] | None:
        """Count one request; the fault it must suffer, if one is pending for its route."""
        with self.lock:
            self.requests[route] = self.requests.get(route, 0) + 1
            if isinstance(body, dict) and route == "query":
                kept = {key: value for key, value in body.items() if key != "filter"}
                take = TAKE.match(body.get("filter") or "")
                self.bodies.append(kept | {"take": take.group(0).split()[0] if take else None})
            for fault in self.faults:
                if fault["route"] in (route, "*") and fault["count"] > 0:
                    fault["count"] -= 1
                    return dict(fault)
        return None

    def report(self) -> dict[str, Any]:
        """What was served since the last reset."""
        with self.lock:
            return {
                "requests": dict(self.requests),
                "total": sum(self.requests.values()),
                "rows": self.rows,
                "takes": self.takes,
                "taken": self.taken,
                "faults_left": sum(int(fault["count"]) for fault in self.faults),
            }
