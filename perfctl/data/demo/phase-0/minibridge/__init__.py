"""minibridge: call into a child process (the subject of perfctl's demo)."""

from minibridge.bridge import Bridge
from minibridge.graph import Graph

__all__ = ["Bridge", "Graph"]
