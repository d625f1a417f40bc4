"""``python -m generaldomo`` runs the command line."""

import sys

from generaldomo.cli import main

__all__: list[str] = []

sys.exit(main())
