"""Settings from the injected env, cross-checked against the discovered NPU (incl. hypothesis over values)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rknnlaunch import MaskError, RknnLaunchError, SettingsError
from rknnlaunch.npu import HostRoot, NpuInfo, discover, mask_to_cores
from rknnlaunch.settings._allocation import normalised_env, resolve_allocation, select_cores
from rknnlaunch.settings._env import load_settings

HostFactory = Callable[[str], HostRoot]


@pytest.fixture
def rk3588(host_factory: HostFactory) -> NpuInfo:
    return discover(host_factory("rk3588-drm"))


@pytest.fixture
def rk3568(host_factory: HostFactory) -> NpuInfo:
    return discover(host_factory("rk3568"))


@pytest.mark.parametrize("text", ["3", "0x3", "0b011", "0_1", "0,1", "NPU_CORE_0_1", " 3 "])
def test_masks_in_every_form(text: str, rk3588: NpuInfo) -> None:
    allocation = resolve_allocation(load_settings({"RKNN_NPU_CORE_MASK": text}), rk3588)
    assert allocation.cores == {0, 1} and allocation.mask == 3 and allocation.injected


def test_no_plugin_env_means_every_core(rk3588: NpuInfo) -> None:
    allocation = resolve_allocation(load_settings({}), rk3588)
    assert allocation.cores == {0, 1, 2} and not allocation.injected
    assert "no RKNN_NPU_CORE_MASK" in allocation.source


def test_plugin_env_is_read_and_normalised(rk3588: NpuInfo) -> None:
    env = {
        "RKNN_NPU_CORE_MASK": "0x6",
        "RKNN_NPU_CORES": "1,2",
        "RKNN_NPU_SOC": "RK3588S",
        "RKNN_NPU_DEVICE": "/dev/dri/renderD129",
        "RKNN_NPU_COMPATIBLE_FILE": "/run/rknpu/compatible",
        "RKNNLAUNCH_LOG_LEVEL": "INFO",
        "UNRELATED": "x",
    }
    settings = load_settings(env)
    assert settings.soc == "rk3588" and settings.log_level == "info"
    allocation = resolve_allocation(settings, rk3588)
    assert normalised_env(settings, allocation, rk3588) == {
        "RKNN_NPU_CORE_MASK": "6",
        "RKNN_NPU_CORES": "1,2",
        "RKNN_NPU_SOC": "rk3588",
        "RKNN_NPU_DEVICE": "/dev/dri/renderD129",
        "RKNN_NPU_COMPATIBLE_FILE": "/run/rknpu/compatible",
    }


def test_process_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RKNN_NPU_CORE_MASK", "NPU_CORE_2")
    monkeypatch.setenv("RKNN_NPU_CORES", "")  # empty counts as unset
    settings = load_settings()
    assert settings.core_mask == 4 and settings.cores is None


def test_mask_bits_beyond_the_cores_name_variable_value_and_fix(rk3568: NpuInfo) -> None:
    with pytest.raises(SettingsError) as caught:
        resolve_allocation(load_settings({"RKNN_NPU_CORE_MASK": "0x6"}), rk3568)
    message = str(caught.value)
    assert "RKNN_NPU_CORE_MASK=6 (0x6)" in message and "core(s) 1,2" in message
    assert "fix: use a mask within 0x1" in message


@pytest.mark.parametrize(
    ("variable", "value", "shown"),
    [
        ("RKNN_NPU_CORE_MASK", "8", "core mask '8'"),
        ("RKNN_NPU_CORE_MASK", "0x9", "core mask '0x9'"),
        ("RKNN_NPU_CORES", "3", "core list '3'"),
        ("RKNN_NPU_CORES", "0,5", "core list '0,5'"),
    ],
)
def test_cores_beyond_every_soc_are_refused_when_read_with_or_without_an_npu(
    variable: str, value: str, shown: str
) -> None:
    # Mask 8 is core 3: no SoC has it, so it is refused as -1 is, before any NPU is looked for.
    with pytest.raises(SettingsError) as caught:
        load_settings({variable: value})
    assert caught.value.problem.startswith(f"{variable}={value!r}: {shown} names core(s) ")
    assert "no supported SoC has more than 3 NPU cores (rk3588: cores 0..2)" in caught.value.problem
    assert caught.value.fix == f"{variable}: name cores within 0..2 (a mask of at most 0x7)"
    assert caught.value.variables == (variable,)
    assert load_settings({"RKNN_NPU_CORE_MASK": "NPU_CORE_ALL"}).core_mask == 0xFFFF  # a name, not cores


def test_cores_beyond_the_soc(rk3568: NpuInfo) -> None:
    with pytest.raises(
        SettingsError, match=r"RKNN_NPU_CORES='1' names core\(s\) 1, but this rk3568 has 1 NPU core"
    ):
        resolve_allocation(load_settings({"RKNN_NPU_CORES": "1"}), rk3568)


def test_mask_and_cores_must_agree(rk3588: NpuInfo) -> None:
    with pytest.raises(SettingsError, match=r"RKNN_NPU_CORE_MASK=3 means cores 0,1 but RKNN_NPU_CORES='1,2'"):
        resolve_allocation(load_settings({"RKNN_NPU_CORE_MASK": "3", "RKNN_NPU_CORES": "1,2"}), rk3588)


def test_mask_and_cores_that_disagree_are_refused_when_the_settings_are_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 32: one check, at settings build, so no NPU is needed to see the contradiction; both
    variables are named (a report skips what depends on them)."""
    with pytest.raises(
        SettingsError, match=r"RKNN_NPU_CORE_MASK=4 means cores 2 but RKNN_NPU_CORES='0'"
    ) as caught:
        load_settings({"RKNN_NPU_CORE_MASK": "4", "RKNN_NPU_CORES": "0"})
    assert caught.value.variables == ("RKNN_NPU_CORE_MASK", "RKNN_NPU_CORES")
    assert (
        caught.value.fix == "set both from the same allocation (the device plugin does), or unset one of them"
    )
    monkeypatch.setenv("RKNN_NPU_CORE_MASK", "0x3")
    monkeypatch.setenv("RKNN_NPU_CORES", "2")
    with pytest.raises(SettingsError, match="means cores 0,1"):
        load_settings()
    # The same cores in both spellings, or a mask that means "every core" (resolved with the NPU): fine.
    assert load_settings({"RKNN_NPU_CORE_MASK": "NPU_CORE_0_1", "RKNN_NPU_CORES": "1,0"}).cores == {0, 1}
    assert load_settings({"RKNN_NPU_CORE_MASK": "NPU_CORE_ALL", "RKNN_NPU_CORES": "0"}).cores == {0}


def test_unreadable_values_are_settings_errors() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(
            {"RKNN_NPU_CORE_MASK": "lots", "RKNN_NPU_SOC": "rk9999", "RKNNLAUNCH_LOG_LEVEL": "loud"}
        )
    message = str(caught.value)
    assert "RKNN_NPU_CORE_MASK='lots'" in message and "RKNN_NPU_SOC='rk9999'" in message
    assert "RKNNLAUNCH_LOG_LEVEL='loud'" in message and "fix:" in message
    assert caught.value.exit_code == 2


def test_soc_must_match_the_device_tree(rk3588: NpuInfo, rk3568: NpuInfo) -> None:
    with pytest.raises(SettingsError, match="RKNN_NPU_SOC='rk3576' but this board's device tree says rk3588"):
        resolve_allocation(load_settings({"RKNN_NPU_SOC": "rk3576"}), rk3588)
    # RK3566 and RK3568 carry the same NPU: not a mismatch.
    assert resolve_allocation(load_settings({"RKNN_NPU_SOC": "rk3566"}), rk3568).cores == {0}


def test_all_and_auto(rk3588: NpuInfo, rk3568: NpuInfo) -> None:
    assert resolve_allocation(load_settings({"RKNN_NPU_CORE_MASK": "ALL"}), rk3588).cores == {0, 1, 2}
    with pytest.raises(SettingsError, match="NPU_CORE_AUTO"):
        resolve_allocation(load_settings({"RKNN_NPU_CORE_MASK": "0"}), rk3588)
    assert resolve_allocation(load_settings({"RKNN_NPU_CORE_MASK": "0"}), rk3568).cores == {0}


def test_select_cores_within_the_allocation(rk3588: NpuInfo) -> None:
    allocation = resolve_allocation(load_settings({"RKNN_NPU_CORES": "0,1"}), rk3588)
    assert select_cores(allocation, None) == {0, 1}
    assert select_cores(allocation, [1]) == {1}
    assert select_cores(allocation, "1") == {1}  # a string without mask syntax is a core list
    assert select_cores(allocation, "0x1") == {0}
    assert select_cores(allocation, "0,1") == {0, 1}
    assert select_cores(allocation, "NPU_CORE_ALL") == {0, 1}
    with pytest.raises(MaskError, match="ambiguous"):
        select_cores(allocation, 1)  # type: ignore[arg-type]
    with pytest.raises(MaskError, match=r"core\(s\) 2 are not available"):
        select_cores(allocation, "2")


_ENV_TEXT = st.one_of(
    st.text(max_size=12),
    st.integers(min_value=-2, max_value=0x1FFFF).map(str),
    st.integers(min_value=0, max_value=0xFFFF).map(hex),
    st.lists(st.integers(min_value=0, max_value=20), max_size=4).map(lambda cores: ",".join(map(str, cores))),
    st.sampled_from(["NPU_CORE_0_1_2", "NPU_CORE_AUTO", "ALL", "0_2", "rk3588", "rk3566", ""]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mask=st.none() | _ENV_TEXT, cores=st.none() | _ENV_TEXT, soc=st.none() | _ENV_TEXT)
def test_any_env_gives_an_allocation_or_an_actionable_error(
    mask: str | None, cores: str | None, soc: str | None, rk3588: NpuInfo
) -> None:
    env = {
        key: value
        for key, value in (("RKNN_NPU_CORE_MASK", mask), ("RKNN_NPU_CORES", cores), ("RKNN_NPU_SOC", soc))
        if value is not None
    }
    try:
        allocation = resolve_allocation(load_settings(env), rk3588)
    except RknnLaunchError as exc:
        assert isinstance(exc, SettingsError)
        assert exc.fix, exc
        assert any(name in str(exc) for name in env), exc
        return
    assert allocation.cores and allocation.cores <= {0, 1, 2}
    parsed = load_settings(env).core_mask
    if parsed is not None and parsed not in (0, 0xFFFF):  # ALL = every core, AUTO only on single-core
        assert allocation.cores == mask_to_cores(parsed)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mask=st.integers(min_value=1, max_value=7), form=st.sampled_from(["{}", "{:#x}", "{:#b}", "cores"]))
def test_valid_masks_round_trip(mask: int, form: str, rk3588: NpuInfo) -> None:
    # A core list is only mask syntax with two or more cores ("0" alone is the mask 0 = AUTO).
    listed = len(mask_to_cores(mask)) > 1 and form == "cores"
    text = (
        ",".join(str(c) for c in sorted(mask_to_cores(mask)))
        if listed
        else form.replace("cores", "{}").format(mask)
    )
    allocation = resolve_allocation(
        load_settings(
            {"RKNN_NPU_CORE_MASK": text, "RKNN_NPU_CORES": ",".join(map(str, sorted(mask_to_cores(mask))))}
        ),
        rk3588,
    )
    assert allocation.mask == mask


@contextlib.contextmanager
def process_env(values: dict[str, str]) -> Iterator[None]:
    names = ("RKNN_NPU_CORE_MASK", "RKNN_NPU_CORES", "RKNN_NPU_SOC")
    saved = {name: os.environ.get(name) for name in names}
    try:
        for name in names:
            os.environ.pop(name, None)
        os.environ.update(values)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _outcome(load: Callable[[], object]) -> object:
    try:
        return load()
    except SettingsError as exc:
        return ("error", exc.problem)


@settings(max_examples=200, deadline=None)
@given(mask=st.none() | _ENV_TEXT, cores=st.none() | _ENV_TEXT, soc=st.none() | _ENV_TEXT)
def test_process_env_and_mapping_read_values_alike(
    mask: str | None, cores: str | None, soc: str | None
) -> None:
    """The env source must not JSON-decode values ("1" is core 1, not the number 1)."""
    env = {
        k: v
        for k, v in (("RKNN_NPU_CORE_MASK", mask), ("RKNN_NPU_CORES", cores), ("RKNN_NPU_SOC", soc))
        if v is not None and "\0" not in v
    }
    with process_env(env):
        from_process = _outcome(lambda: load_settings().model_dump(exclude={"root", "log_level"}))
    from_mapping = _outcome(lambda: load_settings(env).model_dump(exclude={"root", "log_level"}))
    assert from_process == from_mapping


def test_single_core_list_from_the_process_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RKNN_NPU_CORES", "1")
    assert load_settings().cores == {1}
