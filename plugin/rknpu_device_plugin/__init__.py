"""rknpu_device_plugin: the Kubernetes device plugin that offers Rockchip NPU cores as rockchip.com/npu.

Lives in the repository's `plugin/` folder; installed under this self-explaining import name so no
generic top-level `plugin` package lands in site-packages.
"""

from rknnlaunch import __version__

__all__ = ["__version__"]
