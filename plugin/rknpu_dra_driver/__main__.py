"""`python -m rknpu_dra_driver`."""

from ._cli import main

main()
