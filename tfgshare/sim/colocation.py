"""The simulator's ground truth for co-location: how sharing a GPU slows a job.

For a job on a GPU shared by ``n`` tenants whose single-tenant utilisations sum
to ``U``::

    slowdown = (1 + overhead * (n - 1)) * max(1, U) ** exponent

The first factor is the cost of context switching between processes (paid even
when the GPU has idle cycles to spare); the second is time-sharing once the
tenants together ask for more than the whole GPU. A job alone on a GPU has
slowdown 1. The GPU's effective (useful) utilisation is
``min(1, sum(util_i / slowdown_i))`` (``tfgshare.metrics.kernel_share``). The defaults are estimates to be
calibrated from live co-location runs (sampling records carry ``co_tenants``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tfgshare.metrics import kernel_share


@dataclass(frozen=True)
class Colocation:
    """Parameters of the co-location slowdown model (see the module doc)."""

    overhead: float = 0.08     # extra step time per co-tenant
    exponent: float = 1.0      # how hard time-sharing bites past a full GPU

    def __post_init__(self) -> None:
        if self.overhead < 0 or self.exponent < 0:
            raise ValueError(f"co-location parameters must be >= 0, got {self}")

    def slowdown(self, tenants: int, total_util: float) -> float:
        """Step-time factor for each job on a GPU with these tenants (1 when alone)."""
        if tenants <= 1:
            return 1.0
        factor = 1.0 + self.overhead * (tenants - 1)
        if total_util > 1.0:
            factor *= total_util ** self.exponent
        return factor

    def effective(self, utils: list[float]) -> float:
        """Useful utilisation of a GPU whose tenants have these single-tenant utilisations."""
        speed = 1.0 / self.slowdown(len(utils), sum(utils))
        return kernel_share((u, speed) for u in utils)
