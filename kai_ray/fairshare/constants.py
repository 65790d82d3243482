"""Values shared by the division, the tree driver and the DRF helpers."""

from typing import Final

UNLIMITED: Final = -1.0
"""KAI's sentinel for "no bound" in both quota (deserved) and limit fields."""

FAIRNESS_RESOURCES: Final = ("cpu", "memory", "gpu")
"""The only resources queue fairness looks at; other extended resources matter for node fit alone."""
