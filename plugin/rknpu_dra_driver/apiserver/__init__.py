"""The API server side: one kubeconfig reader, the transports (a light HTTP one, the official
client's), and the calls and watches the driver makes (`KubeApi`)."""

from typing import TYPE_CHECKING

from rknnlaunch import lazy_attributes

if TYPE_CHECKING:
    from ._api import ApiError, KubeApi
    from ._kubeconfig import Kubeconfig, KubeconfigError, kubeconfig_paths, read_kubeconfig
    from ._transports import HttpError, light_endpoint

# What other rooms use, by defining module; imported on first use (PEP 562).
_LAZY = {
    "ApiError": "._api",
    "KubeApi": "._api",
    "HttpError": "._transports",
    "Kubeconfig": "._kubeconfig",
    "KubeconfigError": "._kubeconfig",
    "kubeconfig_paths": "._kubeconfig",
    "read_kubeconfig": "._kubeconfig",
    "light_endpoint": "._transports",
}

__getattr__ = lazy_attributes(__name__, _LAZY)

__all__ = [
    "ApiError",
    "KubeApi",
    "HttpError",
    "Kubeconfig",
    "KubeconfigError",
    "kubeconfig_paths",
    "read_kubeconfig",
    "light_endpoint",
]
