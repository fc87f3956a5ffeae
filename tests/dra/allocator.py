"""A test rig playing the scheduler's side of DRA against the shipped DeviceClasses and claims.

It follows kubernetes/dynamic-resource-allocation's structured allocator (`allocator_stable.go`),
as read for issue 25: pools in (driver, pool) order, devices in slice order, first fit with
backtracking; a request's class selectors then its own, as CEL (cel-python, with the DRA
environment of `cel/compile.go`: ``device.driver``, ``device.attributes[domain]``,
``device.capacity[domain]``, ``semver()``/``quantity()`` and their ``compareTo``/``isGreaterThan``/
``isLessThan`` methods; a CEL runtime error stops the allocation, as upstream); devices in use by
other claims are skipped unless the request has ``adminAccess`` (admin results hold nothing);
``consumesCounters`` must fit the pool's ``sharedCounters`` minus what allocated devices consume;
``matchAttribute`` constraints (also by subrequest name); ``firstAvailable`` subrequests in order,
each tried through the rest of the claim; ``allocationMode: All``.

Consumable capacity (KEP-5075; gate DRAConsumableCapacity, beta and on from 1.36), as
`structured/internal/incubating/consumable_capacity.go` has it: a device with
``allowMultipleAllocations`` stays allocatable while in use; for each of its capacities a request
consumes its ``capacity.requests`` entry, or the ``requestPolicy.default`` (no policy: the whole
value); a request below ``validRange.min`` is rounded up to it, between steps up to the next
``min + n*step``, and to the next of ``validValues``; a result above ``max`` (or off the step, or
not a valid value) violates the policy and the device is skipped; the sum of what every
allocation consumes must not pass the capacity's value; each result gets a ``shareID`` (random
hex upstream, a counter here) and its ``consumedCapacity``. `Allocator.refusals` says why devices
were skipped, so an unsatisfiable claim shows its reason.

`Allocator.allocate` is the scheduler's first-fit answer; `Allocator.every_allocation` lists every
allocation the same rules allow (what a scheduler with other device orders or scoring could pick).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import total_ordering
from typing import Any

import celpy
from celpy import celtypes

DEFAULT_COUNT = 1


class AllocationError(Exception):
    """What upstream returns as an error (not "unschedulable"): a CEL runtime error, an All request
    its constraint refuses, an incomplete pool."""


# --- the DRA CEL environment ----------------------------------------------------------------------

_SEMVER = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?"
)


@total_ordering
class Semver:
    """A version attribute's CEL value (k8s apiserver/pkg/cel/library semver)."""

    def __init__(self, text: str) -> None:
        match = _SEMVER.fullmatch(text)
        if match is None:
            raise ValueError(f"{text!r} is not a semantic version")
        self.parts = tuple(int(match.group(i)) for i in (1, 2, 3))
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.parts == other.parts

    def __lt__(self, other: Semver) -> bool:
        return self.parts < other.parts

    def __hash__(self) -> int:
        return hash(self.parts)


_QUANTITY = re.compile(r"([+-]?[0-9.]+)([a-zA-Z]*)")
_SUFFIX = {
    "": 1, "m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
}  # fmt: skip


@total_ordering
class Quantity:
    """A capacity's CEL value (k8s quantity library), compared by its exact amount."""

    def __init__(self, text: str) -> None:
        match = _QUANTITY.fullmatch(text.strip())
        if match is None or match.group(2) not in _SUFFIX:
            raise ValueError(f"{text!r} is not a quantity")
        self.value = Fraction(match.group(1)) * _SUFFIX[match.group(2)]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.value

    def __hash__(self) -> int:
        return hash(self.value)


def _compare(a: Any, b: Any) -> celtypes.IntType:
    if type(a) is not type(b) or not isinstance(a, Semver | Quantity):
        raise celpy.CELEvalError(f"compareTo: cannot compare {type(a).__name__} with {type(b).__name__}")
    return celtypes.IntType(0 if a == b else (-1 if a < b else 1))


_FUNCTIONS: dict[str, Any] = {
    "semver": lambda text: Semver(str(text)),
    "isSemver": lambda text: celtypes.BoolType(_SEMVER.fullmatch(str(text)) is not None),
    "quantity": lambda text: Quantity(str(text)),
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: celtypes.BoolType(_compare(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_compare(a, b) < 0),
    "major": lambda v: celtypes.IntType(v.parts[0]),
    "minor": lambda v: celtypes.IntType(v.parts[1]),
    "patch": lambda v: celtypes.IntType(v.parts[2]),
}


def _attribute_value(value: Mapping[str, Any]) -> Any:
    if "int" in value:
        return celtypes.IntType(value["int"])
    if "bool" in value:
        return celtypes.BoolType(value["bool"])
    if "string" in value:
        return celtypes.StringType(value["string"])
    if "version" in value:
        return Semver(value["version"])
    raise AllocationError(f"attribute value {value!r} has no known type")


def _by_domain(driver: str, entries: Mapping[str, Any], convert: Any) -> celtypes.MapType:
    """Unqualified names belong to the driver's domain; ``domain/name`` to that domain."""
    domains: dict[str, dict[celtypes.StringType, Any]] = {}
    for name, value in entries.items():
        domain, _, short = name.rpartition("/")
        domains.setdefault(domain or driver, {})[celtypes.StringType(short)] = convert(value)
    return celtypes.MapType(
        {celtypes.StringType(domain): celtypes.MapType(values) for domain, values in domains.items()}
    )


class _DomainMap(celtypes.MapType):
    """``device.attributes['other.domain']`` is an empty map, not an error (as upstream)."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType({})


class CelEngine:
    """Compiles each expression once and evaluates it on one device."""

    def __init__(self) -> None:
        self._env = celpy.Environment()
        self._programs: dict[str, Any] = {}

    def matches(self, expression: str, driver: str, device: Mapping[str, Any]) -> bool:
        program = self._programs.get(expression)
        if program is None:
            program = self._env.program(self._env.compile(expression), functions=_FUNCTIONS)
            self._programs[expression] = program
        activation = {
            "device": celtypes.MapType(
                {
                    celtypes.StringType("driver"): celtypes.StringType(driver),
                    celtypes.StringType("attributes"): _DomainMap(
                        _by_domain(driver, device.get("attributes") or {}, _attribute_value)
                    ),
                    celtypes.StringType("capacity"): _DomainMap(
                        _by_domain(driver, device.get("capacity") or {}, lambda c: Quantity(c["value"]))
                    ),
                    celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(
                        bool(device.get("allowMultipleAllocations", False))
                    ),
                }
            )
        }
        try:
            result = program.evaluate(activation)
        except celpy.CELEvalError as exc:
            raise AllocationError(f"CEL runtime error in {expression!r}: {exc}") from None
        if isinstance(result, celpy.CELEvalError):
            raise AllocationError(f"CEL runtime error in {expression!r}: {result}")
        if not isinstance(result, celtypes.BoolType):
            raise AllocationError(f"CEL expression {expression!r} gave {result!r}, not a bool")
        return bool(result)


# --- pools, requests, results ---------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceRef:
    driver: str
    pool: str
    name: str


@dataclass(frozen=True)
class Candidate:
    ref: DeviceRef
    device: Mapping[str, Any]


@dataclass(frozen=True)
class Result:
    """One allocation result, as ``status.allocation.devices.results`` has it."""

    request: str
    """``req`` or ``req/subrequest``."""
    ref: DeviceRef
    admin: bool = False
    share_id: str | None = None
    consumed: tuple[tuple[str, Fraction], ...] = ()
    """``consumedCapacity`` of a device allowing multiple allocations: (capacity name, amount)."""

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "request": self.request,
            "driver": self.ref.driver,
            "pool": self.ref.pool,
            "device": self.ref.name,
        }
        if self.admin:
            entry["adminAccess"] = True
        if self.share_id is not None:
            entry["shareID"] = self.share_id
            entry["consumedCapacity"] = {name: _quantity_text(value) for name, value in self.consumed}
        return entry


def _quantity_text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{int(value * 1000)}m"


@dataclass
class _Pool:
    driver: str
    name: str
    slices: list[Mapping[str, Any]]
    counters: dict[tuple[str, str], Fraction] = field(default_factory=dict)

    def devices(self) -> Iterator[Candidate]:
        for slice_ in self.slices:
            for device in slice_["spec"].get("devices") or ():
                yield Candidate(DeviceRef(self.driver, self.name, device["name"]), device)


@dataclass(frozen=True)
class _Request:
    name: str
    """The result's request name (``req`` or ``req/sub``)."""
    base: str
    spec: Mapping[str, Any]

    @property
    def admin(self) -> bool:
        return bool(self.spec.get("adminAccess", False)) and "/" not in self.name

    @property
    def all_mode(self) -> bool:
        return self.spec.get("allocationMode", "ExactCount") == "All"

    @property
    def count(self) -> int:
        return int(self.spec.get("count", DEFAULT_COUNT))

    @property
    def capacity_requests(self) -> dict[str, Fraction]:
        requests = (self.spec.get("capacity") or {}).get("requests") or {}
        return {name: Quantity(str(value)).value for name, value in requests.items()}


def _pools(slices: Sequence[Mapping[str, Any]]) -> list[_Pool]:
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for slice_ in slices:
        spec = slice_["spec"]
        grouped.setdefault((spec["driver"], spec["pool"]["name"]), []).append(slice_)
    pools = []
    for (driver, name), members in sorted(grouped.items()):
        newest = max(s["spec"]["pool"]["generation"] for s in members)
        current = [s for s in members if s["spec"]["pool"]["generation"] == newest]
        wanted = current[0]["spec"]["pool"]["resourceSliceCount"]
        if len(current) != wanted:
            raise AllocationError(f"pool {name} is incomplete: {len(current)} of {wanted} slices")
        pool = _Pool(driver, name, current)
        for slice_ in current:
            for counter_set in slice_["spec"].get("sharedCounters") or ():
                for counter, value in counter_set["counters"].items():
                    pool.counters[(counter_set["name"], counter)] = Quantity(value["value"]).value
        pools.append(pool)
    return pools


class Allocator:
    """The scheduler's allocation of claims over ``slices`` with the cluster's ``classes``.

    ``partitionable``: the DRAPartitionableDevices gate (counters are checked only with it on, as
    upstream; an API server without it never stores them anyway). ``consumable_capacity``: the
    DRAConsumableCapacity gate (off: ``allowMultipleAllocations`` is ignored, each device is one
    claim's, as on a server that dropped the field).
    """

    def __init__(
        self,
        classes: Sequence[Mapping[str, Any]],
        slices: Sequence[Mapping[str, Any]],
        *,
        partitionable: bool = True,
        consumable_capacity: bool = True,
        cel: CelEngine | None = None,
    ) -> None:
        self.classes = {c["metadata"]["name"]: c for c in classes}
        self.pools = _pools(slices)
        self.partitionable = partitionable
        self.consumable_capacity = consumable_capacity
        self.refusals: list[str] = []
        """Why devices were skipped in the last `allocate` (capacity and policy checks), each once."""
        self._share_ids = 0
        self.cel = cel or CelEngine()
        self.allocated: list[Result] = []
        """Results of claims allocated before (the cluster's in-use devices)."""

    # -- the cluster's state

    def commit(self, results: Sequence[Result]) -> None:
        self.allocated.extend(results)

    def _in_use(self) -> set[DeviceRef]:
        return {r.ref for r in self.allocated if not r.admin}

    def _multiple(self, candidate: Candidate) -> bool:
        return self.consumable_capacity and bool(candidate.device.get("allowMultipleAllocations"))

    def _refuse(self, reason: str) -> None:
        if reason not in self.refusals:
            self.refusals.append(reason)

    def _consumption(
        self, request: _Request, candidate: Candidate, taken: Sequence[Result]
    ) -> tuple[tuple[str, Fraction], ...] | None:
        """What ``request`` would consume of ``candidate`` (a device allowing multiple allocations),
        or None when a requested capacity is missing, the policy is violated or the capacity is
        spent (each recorded in `refusals`). A negative request is an error (upstream aborts)."""
        name = candidate.ref.name
        capacity = {
            key.rpartition("/")[2] if key.startswith(candidate.ref.driver + "/") else key: value
            for key, value in (candidate.device.get("capacity") or {}).items()
        }
        requested: dict[str, Fraction] = {}
        for key, amount in request.capacity_requests.items():
            short = key.rpartition("/")[2] if key.startswith(candidate.ref.driver + "/") else key
            if amount < 0:
                raise AllocationError(f"request {request.name}: capacity {key} {amount} is negative")
            if short not in capacity:
                self._refuse(f"device {name} has no capacity {key!r}")
                return None
            requested[short] = amount
        consumed = []
        for key, entry in capacity.items():
            total = Quantity(entry["value"]).value
            policy = entry.get("requestPolicy")
            amount = _consumed_amount(requested.get(key), total, policy)
            if _violates(amount, policy):
                self._refuse(
                    f"device {name}: request {request.name} for {_quantity_text(amount)} {key} "
                    f"violates its requestPolicy {_policy_text(policy)}"
                )
                return None
            used = sum(
                (
                    dict(r.consumed).get(key, Fraction(0))
                    for r in [*self.allocated, *taken]
                    if r.ref == candidate.ref
                ),
                Fraction(0),
            )
            if used + amount > total:
                self._refuse(
                    f"device {name}: {_quantity_text(used)} of its {_quantity_text(total)} {key} are "
                    f"allocated, request {request.name} needs {_quantity_text(amount)}"
                )
                return None
            consumed.append((key, amount))
        return tuple(consumed)

    def _share(self, request: _Request, candidate: Candidate, taken: Sequence[Result]) -> Result | None:
        """The result of ``request`` on ``candidate``: for a device allowing multiple allocations,
        with a new shareID and what it consumes (None: it does not fit)."""
        if not self._multiple(candidate):
            if request.capacity_requests:
                # A plain device: the requests are a filter (capacity >= request), as a CEL selector.
                for key, amount in request.capacity_requests.items():
                    entry = (candidate.device.get("capacity") or {}).get(key)
                    if entry is None or Quantity(entry["value"]).value < amount:
                        self._refuse(f"device {candidate.ref.name} has less {key} than requested")
                        return None
            return Result(request.name, candidate.ref, request.admin)
        consumed = self._consumption(request, candidate, taken)
        if consumed is None:
            return None
        self._share_ids += 1
        return Result(request.name, candidate.ref, request.admin, f"{self._share_ids:08x}", consumed)

    # -- requests

    def _requests(self, claim: Mapping[str, Any]) -> list[list[_Request]]:
        """Per request: its alternatives (one for ``exactly``, the subrequests for ``firstAvailable``)."""
        spec = claim["spec"]["devices"]
        out = []
        for request in spec.get("requests") or ():
            if "firstAvailable" in request:
                out.append(
                    [
                        _Request(f"{request['name']}/{sub['name']}", request["name"], sub)
                        for sub in request["firstAvailable"]
                    ]
                )
            else:
                out.append([_Request(request["name"], request["name"], request["exactly"])])
        return out

    def _selectable(self, request: _Request, candidate: Candidate) -> bool:
        class_name = request.spec["deviceClassName"]
        device_class = self.classes.get(class_name)
        if device_class is None:
            raise AllocationError(f"DeviceClass {class_name} does not exist")
        selectors = [*(device_class["spec"].get("selectors") or ()), *(request.spec.get("selectors") or ())]
        return all(
            self.cel.matches(s["cel"]["expression"], candidate.ref.driver, candidate.device)
            for s in selectors
        )

    def _counters_fit(self, candidate: Candidate, taken: Sequence[Result]) -> bool:
        consumes = candidate.device.get("consumesCounters") or ()
        if not self.partitionable or not consumes:
            return True
        pool = next(
            p for p in self.pools if p.name == candidate.ref.pool and p.driver == candidate.ref.driver
        )
        left = dict(pool.counters)
        by_name = {c.ref: c.device for c in pool.devices()}
        holders = {r.ref for r in self.allocated} | {r.ref for r in taken}
        for ref in holders:
            for entry in (by_name.get(ref) or {}).get("consumesCounters") or ():
                for counter, value in entry["counters"].items():
                    key = (entry["counterSet"], counter)
                    if key in left:
                        left[key] -= Quantity(value["value"]).value
        for entry in consumes:
            for counter, value in entry["counters"].items():
                key = (entry["counterSet"], counter)
                if key not in left or left[key] < Quantity(value["value"]).value:
                    return False
        return True

    @staticmethod
    def _constraints_ok(
        claim: Mapping[str, Any], results: Sequence[Result], devices: Mapping[DeviceRef, Any]
    ) -> bool:
        for constraint in claim["spec"]["devices"].get("constraints") or ():
            attribute = constraint.get("matchAttribute")
            if not attribute:
                continue
            names = set(constraint.get("requests") or ())
            seen: list[Any] = []
            for result in results:
                base = result.request.split("/", 1)[0]
                if names and base not in names and result.request not in names:
                    continue
                value = _lookup(devices[result.ref], result.ref.driver, attribute)
                if value is None:
                    return False
                seen.append(value)
            if any(value != seen[0] for value in seen):
                return False
        return True

    # -- the search

    def _search(self, claim: Mapping[str, Any], first_fit: bool) -> Iterator[list[Result]]:
        requests = self._requests(claim)
        in_use = self._in_use()
        devices = {c.ref: c.device for p in self.pools for c in p.devices()}
        order = [c for p in self.pools for c in p.devices()]

        def usable(request: _Request, candidate: Candidate, taken: list[Result]) -> bool:
            multiple = self._multiple(candidate)
            if not multiple and any(r.ref == candidate.ref for r in taken):
                return False  # never twice in one claim, admin or not
            if not multiple and not request.admin and candidate.ref in in_use:
                return False
            return self._selectable(request, candidate) and self._counters_fit(candidate, taken)

        def fill(index: int, taken: list[Result]) -> Iterator[list[Result]]:
            if index == len(requests):
                yield list(taken)
                return
            for alternative in requests[index]:
                found = False
                for done in pick(alternative, index, taken):
                    found = True
                    yield done
                if found and first_fit:
                    return  # the first subrequest that works wins

        def pick(request: _Request, index: int, taken: list[Result]) -> Iterator[list[Result]]:
            if request.all_mode:
                matching = [c for c in order if self._selectable(request, c)]
                if not matching:
                    return
                chosen: list[Result] = []
                for candidate in matching:
                    if not usable(request, candidate, taken + chosen):
                        return  # All needs every matching device
                    share = self._share(request, candidate, taken + chosen)
                    if share is None:
                        return
                    chosen.append(share)
                    if not self._constraints_ok(claim, taken + chosen, devices):
                        raise AllocationError(
                            f"request {request.name}: a constraint refuses device {candidate.ref.name}"
                        )
                yield from fill(index + 1, taken + chosen)
                return
            yield from choose(request, index, taken, request.count, 0)

        def choose(
            request: _Request, index: int, taken: list[Result], left: int, start: int
        ) -> Iterator[list[Result]]:
            if left == 0:
                yield from fill(index + 1, taken)
                return
            # First fit walks every device in slice order; the full enumeration takes each set of
            # devices once (in slice order), since results of one request are a set.
            for position in range(start if not first_fit else 0, len(order)):
                candidate = order[position]
                if not usable(request, candidate, taken):
                    continue
                share = self._share(request, candidate, taken)
                if share is None:
                    continue
                attempt = [*taken, share]
                if not self._constraints_ok(claim, attempt, devices):
                    continue
                # A generator: the first fit is the first complete allocation the caller takes;
                # asking for more backtracks, as upstream does when a later request fails.
                yield from choose(request, index, attempt, left - 1, position + 1)

        yield from fill(0, [])

    def allocate(self, claim: Mapping[str, Any]) -> list[Result] | None:
        """The scheduler's answer: the first allocation found, or None (the pod stays pending;
        `refusals` then says what the capacity checks refused)."""
        self.refusals = []
        return next(self._search(claim, first_fit=True), None)

    def every_allocation(self, claim: Mapping[str, Any]) -> list[list[Result]]:
        """Every allocation the rules allow, whatever order or scoring a scheduler used (each set
        of devices once; every firstAvailable alternative, not only the first that fits)."""
        seen: set[frozenset[tuple[str, DeviceRef]]] = set()
        out = []
        for results in self._search(claim, first_fit=False):
            key = frozenset((r.request, r.ref) for r in results)
            if key not in seen:
                seen.add(key)
                out.append(results)
        return out


def _consumed_amount(
    requested: Fraction | None, total: Fraction, policy: Mapping[str, Any] | None
) -> Fraction:
    """calculateConsumedQuantity: no request -> the policy's default, else the whole value; with a
    policy, rounded up to validRange.min, then to min + n*step, or to the next of validValues."""
    if requested is None:
        default = (policy or {}).get("default")
        return Quantity(str(default)).value if default is not None else total
    if not policy:
        return requested
    valid_range = policy.get("validRange")
    if valid_range and valid_range.get("min") is not None:
        low = Quantity(str(valid_range["min"])).value
        if requested < low:
            return low
        step = valid_range.get("step")
        if step is None:
            return requested
        size = Quantity(str(step)).value
        steps = -((low - requested) // size)  # ceil((requested - low) / size)
        return low + size * steps
    values = [Quantity(str(v)).value for v in policy.get("validValues") or ()]
    for value in values:
        if requested <= value:
            return value
    return requested


def _violates(amount: Fraction, policy: Mapping[str, Any] | None) -> bool:
    """violatesPolicy: the default is always valid; else above validRange.max, off its step, or
    not one of validValues."""
    if not policy:
        return False
    default = policy.get("default")
    if default is not None and amount == Quantity(str(default)).value:
        return False
    valid_range = policy.get("validRange")
    if valid_range:
        high = valid_range.get("max")
        if high is not None and amount > Quantity(str(high)).value:
            return True
        step = valid_range.get("step")
        low = Quantity(str(valid_range.get("min", "0"))).value
        return step is not None and (amount - low) % Quantity(str(step)).value != 0
    values = policy.get("validValues")
    if values:
        return all(amount != Quantity(str(v)).value for v in values)
    return False


def _policy_text(policy: Mapping[str, Any] | None) -> str:
    if not policy:
        return "(none)"
    parts = [f"default {policy['default']}"] if "default" in policy else []
    valid_range = policy.get("validRange")
    if valid_range:
        parts.append("validRange " + ", ".join(f"{k} {v}" for k, v in valid_range.items()))
    if policy.get("validValues"):
        parts.append(f"validValues {policy['validValues']}")
    return "(" + "; ".join(parts) + ")"


def _lookup(device: Mapping[str, Any], driver: str, attribute: str) -> Any:
    """``matchAttribute``'s lookup: the fully qualified name, else the short name when the domain
    is the driver's."""
    attributes = device.get("attributes") or {}
    if attribute in attributes:
        return attributes[attribute]
    domain, _, short = attribute.partition("/")
    if domain == driver and short in attributes:
        return attributes[short]
    return None
