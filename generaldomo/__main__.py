"""``python -m generaldomo`` runs the command line."""

import sys

from generaldomo.cli import main

sys.exit(main())
