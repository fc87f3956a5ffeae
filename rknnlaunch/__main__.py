"""`python -m rknnlaunch` runs the CLI."""

import sys

from ._cli import main

sys.exit(main())
