"""Pure claim logic: which of a ResourceClaim's allocation results are ours (requests, firstAvailable
subrequests, adminAccess), checked against the devices this node offers; what a prepared claim is
(the checkpoint's and the CDI spec's record, one CDI device per request)."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from rknnlaunch.settings import POD_CLAIM_NAME_ANNOTATION, base_request
from rknpu_node import cores_of, device_cores
from rknpu_serverkit import quote_ids

from ..slices import SHARES_CAPACITY


class ClaimError(ValueError):
    """One claim cannot be prepared; the message is the per-claim error the kubelet shows."""


@dataclass(frozen=True)
class ClaimRef:
    """A claim as the kubelet names it."""

    namespace: str
    name: str
    uid: str

    def describe(self) -> str:
        return f"ResourceClaim {self.namespace}/{self.name} (uid {self.uid})"


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_SHARE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,62}")
"""The allocator's shareID is random hex; it becomes part of a CDI device name, so nothing else passes."""


@dataclass(frozen=True)
class AllocatedDevice:
    """One allocation result of ours: the request it serves (``req`` or ``req/subrequest``), its
    pool and device, whether it was allocated with adminAccess (no exclusivity), and for a shared
    core (a device with allowMultipleAllocations) its ``shareID`` and the shares it consumed."""

    request: str
    pool: str
    device: str
    admin: bool = False
    share_id: str | None = None
    shares: int = 0
    """Consumed ``shares`` of a shared core (0: not a share, the core is held whole)."""

    @property
    def base_request(self) -> str:
        return base_request(self.request)

    @property
    def shared(self) -> bool:
        return self.share_id is not None

    def to_json(self) -> dict[str, object]:
        record: dict[str, object] = {"request": self.request, "pool": self.pool, "device": self.device}
        if self.admin:
            record["adminAccess"] = True
        if self.share_id is not None:
            record["shareID"] = self.share_id
            record["shares"] = self.shares
        return record

    @classmethod
    def from_json(cls, data: object) -> AllocatedDevice:
        share_id = data.get("shareID") if isinstance(data, Mapping) else None
        shares = data.get("shares", 0) if isinstance(data, Mapping) else 0
        if share_id is not None and (not isinstance(share_id, str) or not valid_share_id(share_id)):
            raise ValueError("shareID is not a share ID")
        if not isinstance(shares, int) or isinstance(shares, bool) or shares < 0:
            raise ValueError("shares is not a count")
        return cls(
            _text(data, "request"), _text(data, "pool"), _text(data, "device"), _admin(data), share_id, shares
        )


def valid_share_id(text: str) -> bool:
    return _SHARE_ID.fullmatch(text) is not None


@dataclass(frozen=True)
class PreparedClaim:
    """What prepare did for one claim: its devices and their cores. ``cdi_device_id`` is the
    claim's CDI name; each request is one CDI device, `request_cdi_id` (``<cdi_device_id>-<request>``),
    so a container gets only the cores of the requests it names."""

    ref: ClaimRef
    devices: tuple[AllocatedDevice, ...]
    cdi_device_id: str
    pod_claim_name: str | None = None
    """A claim made from a template: the pod's own name for it (annotation
    ``resource.kubernetes.io/pod-claim-name``), which keys its metadata file in the container."""

    @property
    def cores(self) -> frozenset[int]:
        return cores_of(device.device for device in self.devices)

    @property
    def requests(self) -> tuple[str, ...]:
        """The base request names, in result order, each once."""
        return tuple(dict.fromkeys(device.base_request for device in self.devices))

    def request_devices(self, request: str) -> tuple[AllocatedDevice, ...]:
        return tuple(device for device in self.devices if device.base_request == request)

    def request_cdi_id(self, request: str) -> str:
        """``<claim cdi id>-<request>``; a request given shares of a core names them:
        ``...-<request>-share-<shareID>`` (one name per share, in result order)."""
        shares = "".join(
            f"-share-{d.share_id}" for d in self.request_devices(base_request(request)) if d.share_id
        )
        return f"{self.cdi_device_id}-{base_request(request)}{shares}"

    def request_cdi_name(self, request: str) -> str:
        """The CDI device's own name (the part after ``=``)."""
        return self.request_cdi_id(request).split("=", 1)[1]

    @property
    def exclusive_cores(self) -> frozenset[int]:
        """The cores this claim holds exclusively (adminAccess results hold none)."""
        return cores_of(device.device for device in self.devices if not device.admin and not device.shared)

    @property
    def shares(self) -> dict[int, int]:
        """Core -> the shares of it this claim consumes (shared results only)."""
        booked: dict[int, int] = {}
        for device in self.devices:
            if device.shared and not device.admin:
                for core in device_cores(device.device):
                    booked[core] = booked.get(core, 0) + device.shares
        return booked

    def to_json(self) -> dict[str, object]:
        record: dict[str, object] = {
            "namespace": self.ref.namespace,
            "name": self.ref.name,
            "uid": self.ref.uid,
            "cdiDeviceID": self.cdi_device_id,
            "devices": [device.to_json() for device in self.devices],
        }
        if self.pod_claim_name:
            record["podClaimName"] = self.pod_claim_name
        return record

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> PreparedClaim:
        """Raises ValueError (KeyError/TypeError included) on a malformed record."""
        devices = data["devices"]
        if not isinstance(devices, list):
            raise ValueError("devices is not a list")
        ref = ClaimRef(_text(data, "namespace"), _text(data, "name"), _text(data, "uid"))
        pod_claim_name = data.get("podClaimName")
        if pod_claim_name is not None and not isinstance(pod_claim_name, str):
            raise ValueError("podClaimName is not a string")
        return cls(
            ref,
            tuple(AllocatedDevice.from_json(d) for d in devices),
            _text(data, "cdiDeviceID"),
            pod_claim_name or None,
        )


def _admin(data: object) -> bool:
    value = data.get("adminAccess", False) if isinstance(data, Mapping) else False
    if not isinstance(value, bool):
        raise ValueError("adminAccess is not a boolean")
    return value


def _text(data: object, key: str) -> str:
    if not isinstance(data, Mapping) or not isinstance(data.get(key), str):
        raise ValueError(f"{key} is missing or not a string")
    value: str = data[key]
    return value


def our_devices(
    ref: ClaimRef,
    claim: Mapping[str, object],
    driver_name: str,
    pool_name: str,
    offered: Collection[str],
) -> tuple[AllocatedDevice, ...]:
    """The claim's allocation results for ``driver_name``, each checked: the claim's UID is the
    request's, it is allocated, every result of ours names this node's pool and a device offered
    now. Raises ClaimError saying what is wrong (a few names and a count, whatever the size)."""
    metadata = _mapping(claim.get("metadata"))
    uid = metadata.get("uid")
    if uid != ref.uid:
        raise ClaimError(
            f"{ref.describe()}: the API server's claim of that name has uid {uid!r}; it was deleted "
            "and re-created since the kubelet asked, so the kubelet retries with the new claim"
        )
    allocation = _mapping(_mapping(claim.get("status")).get("allocation"))
    results = _mapping(allocation.get("devices")).get("results")
    if not allocation or not isinstance(results, list):
        raise ClaimError(
            f"{ref.describe()} is not allocated (it was deallocated after scheduling?); the scheduler "
            "allocates it again and the kubelet retries"
        )
    ours: list[AllocatedDevice] = []
    for result in results:
        entry = _mapping(result)
        if entry.get("driver") != driver_name:
            continue
        share_id, shares = _share(ref, entry, driver_name)
        ours.append(
            AllocatedDevice(
                str(entry.get("request", "")),
                str(entry.get("pool", "")),
                str(entry.get("device", "")),
                entry.get("adminAccess") is True,
                share_id,
                shares,
            )
        )
    if not ours:
        drivers = sorted({str(_mapping(r).get("driver")) for r in results})
        raise ClaimError(
            f"{ref.describe()} has no device of driver {driver_name} (allocated to "
            f"{quote_ids(drivers) if drivers else 'no driver'}); the kubelet asked the wrong driver"
        )
    other_pools = sorted({d.pool for d in ours if d.pool != pool_name})
    if other_pools:
        raise ClaimError(
            f"{ref.describe()} is allocated devices of pool {quote_ids(other_pools)}, not of this node's "
            f"pool {pool_name!r}; the claim belongs to another node"
        )
    names = [d.device for d in ours]
    unknown = [name for name in dict.fromkeys(names) if name not in offered]
    if unknown:
        listed = quote_ids(sorted(offered)) if offered else "none (no healthy NPU core)"
        raise ClaimError(
            f"{ref.describe()} names device {quote_ids(unknown)} ({len(names):,} device(s) in all) that "
            f"this node does not offer (it offers {listed}); reallocate the claim"
        )
    return tuple(ours)


def _share(ref: ClaimRef, entry: Mapping[str, object], driver_name: str) -> tuple[str | None, int]:
    """A result's ``shareID`` and consumed ``shares`` (the allocator always records what a share
    consumed, its policy's default included; a share without the record counts the default, 1)."""
    share_id = entry.get("shareID")
    if share_id is None:
        return None, 0
    if not isinstance(share_id, str) or not valid_share_id(share_id):
        raise ClaimError(
            f"{ref.describe()}: device {entry.get('device')} has shareID {share_id!r}, not a share ID "
            "the scheduler writes (hex); reallocate the claim"
        )
    consumed = _mapping(entry.get("consumedCapacity"))
    amount = consumed.get(SHARES_CAPACITY, consumed.get(f"{driver_name}/{SHARES_CAPACITY}", "1"))
    text = str(amount).strip()
    if not text.isdigit() or int(text) < 1:
        raise ClaimError(
            f"{ref.describe()}: device {entry.get('device')} consumed {SHARES_CAPACITY}={amount!r}, not a "
            "whole number of shares of at least 1; reallocate the claim"
        )
    return share_id, int(text)


def pod_claim_name(ref: ClaimRef, claim: Mapping[str, object]) -> str | None:
    """The pod's own name of a claim made from a template (its metadata file is keyed by it: a
    folder in the container's path, so only a DNS label, as the pod spec has it, passes)."""
    annotations = _mapping(_mapping(claim.get("metadata")).get("annotations"))
    name = annotations.get(POD_CLAIM_NAME_ANNOTATION)
    if name is None:
        return None
    if not isinstance(name, str) or not _DNS_LABEL.fullmatch(name):
        raise ClaimError(
            f"{ref.describe()}: annotation {POD_CLAIM_NAME_ANNOTATION}={name!r} is not a pod's claim "
            "name (a DNS label); the claim was edited by hand: delete it so its pod makes it again"
        )
    return name


def stale_reason(
    ref: ClaimRef, claim: Mapping[str, object] | None, driver_name: str, pool_name: str
) -> str | None:
    """Why a claim prepared here in an earlier boot no longer holds its cores, given the API
    server's claim of that name (None: there is none), or None while it still does. Such a claim
    the kubelet never unprepares: it is deleted, re-created under a new uid, or deallocated or
    reallocated elsewhere (no result of ``driver_name`` in this node's pool any more)."""
    if claim is None:
        return "deleted from the API server"
    if _mapping(claim.get("metadata")).get("uid") != ref.uid:
        return "deleted and re-created under another uid"
    allocation = _mapping(_mapping(claim.get("status")).get("allocation"))
    results = _mapping(allocation.get("devices")).get("results")
    for result in results if isinstance(results, list) else ():
        entry = _mapping(result)
        if entry.get("driver") == driver_name and entry.get("pool") == pool_name:
            return None
    return f"no longer allocated a device of {driver_name} on this node"


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}
