"""rknpu-exporter, a program of its own: the NPU's metrics, NFD labels and node-exporter textfile
on a node without the device plugin (or beside it). Its entry point is `_exporter.main`
(``rknpu-exporter``, ``python -m rknpu_device_plugin.exporter``)."""
