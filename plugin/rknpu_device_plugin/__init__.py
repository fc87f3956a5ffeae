"""rknpu_device_plugin: the Kubernetes device plugin that offers Rockchip NPU cores as rockchip.com/npu.

Lives in the repository's `plugin/` folder; installed under this self-explaining import name so no
generic top-level `plugin` package lands in site-packages. It builds on the node's NPU
(`rknpu_node`) and the servers' kit (`rknpu_serverkit`), as the DRA driver does.
"""

from rknnlaunch import __version__

__all__ = ["__version__"]
