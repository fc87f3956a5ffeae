"""The plugin's environment prefix (``RKNPU_PLUGIN_*``): its settings and its NPU discovery both name it."""

from rknpu_node import ENV_PREFIX

__all__ = ["ENV_PREFIX"]
