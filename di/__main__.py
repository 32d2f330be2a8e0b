"""``python -m di`` (console script ``di``): the command line, in :mod:`di.cli`."""

from __future__ import annotations

import sys

from di.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
