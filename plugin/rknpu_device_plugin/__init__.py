"""rknpu_device_plugin: the Kubernetes device plugin that offers Rockchip NPU cores as rockchip.com/npu.

Lives in the repository's `plugin/` folder; installed under this self-explaining import name so no
generic top-level `plugin` package lands in site-packages.
"""

from rknnlaunch import __version__

# Shared with the DRA driver (rknpu_dra_driver): atomic file writes (CDI specs), bounded ID lists
# in error messages, the do-nothing event sink. Standard library only.
from ._bounded import quote_ids
from ._events import NullEvents
from ._files import write_atomic

__all__ = ["NullEvents", "__version__", "quote_ids", "write_atomic"]
