"""fleet-goodput: ML Productivity Goodput for accelerator fleets (see shared MPG.md)."""

__version__ = "0.1.0"
