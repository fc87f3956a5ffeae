"""``python -m rknpu_device_plugin.exporter``: rknpu-exporter."""

from ._exporter import main

main()
