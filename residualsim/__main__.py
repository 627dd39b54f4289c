"""``python -m residualsim`` runs the command line."""

import sys

from residualsim.cli import main

sys.exit(main())
