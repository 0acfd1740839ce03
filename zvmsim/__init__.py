"""zvmsim: a ZVM 10.x REST simulator (the stand-in for real ZVMs in tests, benchmarks and the demo).

Run it with ``python -m zvmsim --help``.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "10.0.60"
