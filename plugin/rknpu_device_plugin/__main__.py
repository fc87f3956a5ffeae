"""`python -m rknpu_device_plugin` runs the device plugin."""

import sys

from ._cli import main

sys.exit(main())
