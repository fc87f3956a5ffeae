"""Settings from flags and environment: one ``--flag`` per pydantic-settings field, its env twin named
in ``--help``, and bad values as one `SettingsError` naming both (`add_setting_flags`,
`settings_from_flags`), plus the log-level / log-format / SoC validators the servers share.

pydantic loads only when a model is built or `LogLevel` is first used.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar, get_args

from rknnlaunch import SettingsError

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError
    from pydantic.fields import FieldInfo

_LogLevelName = Literal["debug", "info", "warning", "error"]
LOG_LEVELS: list[str] = list(get_args(_LogLevelName))
if TYPE_CHECKING:
    LogLevel = _LogLevelName
    """A log level setting; ``INFO`` from the environment counts as ``info``."""


def __getattr__(name: str) -> Any:
    # LogLevel carries a pydantic validator: built on first use (by a settings model).
    if name == "LogLevel":
        from pydantic import BeforeValidator

        value = Annotated[_LogLevelName, BeforeValidator(_lower_level)]
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _lower_level(value: object) -> object:
    return value.strip().lower() if isinstance(value, str) else value


LOG_FORMATS: list[str] = ["text", "json"]
LogFormat = Literal["text", "json"]


def check_soc_name(value: str | None) -> str | None:
    """A ``--soc`` validator: the names come from the shared SoC table."""
    from rknnlaunch.npu import SOCS, soc_by_name

    if value is not None and soc_by_name(value) is None:
        raise ValueError(f"unknown SoC {value!r}; use {', '.join(soc.name for soc in SOCS)}")
    return value


def split_device_list(value: object) -> object:
    """An ``--extra-device`` validator (before): a comma-separated string becomes a tuple of paths."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def check_device_paths(value: tuple[str, ...]) -> tuple[str, ...]:
    """An ``--extra-device`` validator: device node paths under /dev, each once, in order."""
    for path in value:
        if not path.startswith("/dev/") or "/../" in path + "/" or path.endswith("/"):
            raise ValueError(f"{path!r} is not a device node path under /dev (e.g. /dev/rga)")
    return tuple(dict.fromkeys(value))


def check_host_file(value: str | None) -> str | None:
    """A ``--host-librknnrt`` validator: the absolute host path of a file (None: not given)."""
    if value is not None and (not value.startswith("/") or "/../" in value + "/" or value.endswith("/")):
        raise ValueError(f"{value!r} must be the absolute host path of a file, e.g. /usr/lib/librknnrt.so")
    return value


_M = TypeVar("_M", bound="BaseModel")


def add_setting_flags(
    parser: argparse.ArgumentParser,
    model: type[BaseModel],
    env_prefix: str,
    types: Mapping[str, Any] | None = None,
    choices: Mapping[str, list[str]] | None = None,
) -> None:
    """One ``--flag`` per settings field (booleans get ``--no-flag``), its help naming the env twin.

    The model's own fields come first, in their order, then those it inherits (the settings two
    programs share, declared once in a base class), so each program's --help leads with its own.
    Use with ``argument_default=argparse.SUPPRESS`` so only flags given reach `settings_from_flags`.
    """
    types = types or {}
    choices = choices or {}
    for name, field in _own_fields_first(model):
        flag = "--" + name.replace("_", "-")
        help_text = f"{field.description} ({_default_text(field)}env {env_prefix}{name.upper()})"
        if field.annotation is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, help=help_text)
        elif name in choices:
            parser.add_argument(flag, choices=choices[name], type=str.lower, help=help_text)
        else:
            parser.add_argument(flag, metavar=name.upper(), type=types.get(name, str), help=help_text)


def _own_fields_first(model: type[BaseModel]) -> list[tuple[str, FieldInfo]]:
    inherited = {name for base in model.__mro__[1:] for name in getattr(base, "model_fields", {})}
    return sorted(model.model_fields.items(), key=lambda item: item[0] in inherited)


def _default_text(field: Any) -> str:
    """``default: X; `` for the help line; nothing when the description says it already or the
    default is computed (a ``default_factory``: pydantic's own ``PydanticUndefined`` is no value)."""
    if "(default:" in (field.description or "") or field.default_factory is not None:
        return ""
    if field.default is None:
        return "default: unset; "
    if isinstance(field.default, tuple):
        return f"default: {','.join(map(str, field.default)) or 'none'}; "
    return f"default: {field.default}; "


def server_settings_config(env_prefix: str) -> Any:
    """The servers' pydantic-settings config: ``env_prefix`` variables, unknown ones refused,
    frozen, and no nan/inf for a number (``--health-interval nan`` must not pass as a value)."""
    from pydantic_settings import SettingsConfigDict

    return SettingsConfigDict(env_prefix=env_prefix, extra="forbid", frozen=True, allow_inf_nan=False)


def settings_parser(
    model: type[BaseModel],
    prog: str,
    description: str,
    env_prefix: str,
    flag_types: Mapping[str, Any],
    flag_choices: Mapping[str, list[str]],
) -> argparse.ArgumentParser:
    """A server program's parser: one flag per field of ``model`` (`add_setting_flags`) and
    ``--version``; unset flags fall back to their ``env_prefix`` twins, then the defaults."""
    from rknnlaunch import UsageParser

    parser = UsageParser(
        prog=prog,
        description=f"{description} Every flag can also be set as {env_prefix}<FLAG> (upper case, "
        "dashes as underscores); flags win.",
        argument_default=argparse.SUPPRESS,
    )
    add_setting_flags(parser, model, env_prefix, dict(flag_types), dict(flag_choices))
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    return parser


def settings_from_flags(model: type[_M], args: argparse.Namespace, env_prefix: str, prog: str) -> _M:
    """``model`` built from the flags given (a pydantic-settings model reads the rest from its
    environment variables); `SettingsError` naming the flag and its variable when a value is bad."""
    from pydantic import ValidationError

    given = {key: value for key, value in vars(args).items() if key in model.model_fields}
    try:
        return model(**given)
    except ValidationError as exc:
        raise settings_error(exc, env_prefix, prog, model) from None


def settings_error(
    exc: ValidationError, env_prefix: str, prog: str, model: type[BaseModel] | None = None
) -> SettingsError:
    """A pydantic ValidationError as one `SettingsError`: each bad field as ``--flag (env VAR)``.

    With ``model``, a value out of a field's bounds gets a fix naming the valid range
    (``use --replicas between 1 and 64``) and the reason for the bound when the field's description
    states one: a clause starting "at most"/"at least" that says "because" (see `_bound_fix`).
    """
    errors = exc.errors()
    problems = "; ".join(
        _describe(error["loc"], _MESSAGES.get(error["type"], error["msg"]), env_prefix) for error in errors
    )
    fixes: list[str] = []
    generic = False
    for error in errors:
        loc = error["loc"]
        fix = None
        if model is not None and error["type"] in _BOUND_ERRORS and loc and str(loc[0]) in model.model_fields:
            fix = _bound_fix(str(loc[0]), model.model_fields[str(loc[0])])
        if fix is None:
            generic = True
        elif fix not in fixes:
            fixes.append(fix)
    if generic:
        fixes.append(f"fix the flag or its {env_prefix}* environment variable (see {prog} --help)")
    return SettingsError(f"invalid {prog} settings: {problems}", "; ".join(fixes))


# pydantic's error types for a number outside a field's ge/gt/le/lt bounds.
_BOUND_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})
# A description's clause giving the reason for a bound: "at most 366 days because ...".
_BOUND_REASON = re.compile(r"(?:^|[(;,]\s*)((?:at most|at least) [^;()]*?\bbecause\b[^;()]*)")


def _bound_fix(name: str, field: FieldInfo) -> str | None:
    """``use --flag between 1 and 64`` from ``field``'s bounds (None: it has none), then the
    description's reason for them if it states one (``at most 366 days because ...``)."""
    lower = upper = ""
    low_value = high_value = None
    for item in field.metadata:
        for attr, word in (("ge", "at least"), ("gt", "above")):
            if getattr(item, attr, None) is not None:
                low_value, lower = getattr(item, attr), f"{word} {_number(getattr(item, attr))}"
        for attr, word in (("le", "at most"), ("lt", "below")):
            if getattr(item, attr, None) is not None:
                high_value, upper = getattr(item, attr), f"{word} {_number(getattr(item, attr))}"
    if not (lower or upper):
        return None
    if lower.startswith("at least") and upper.startswith("at most"):
        valid = f"between {_number(low_value)} and {_number(high_value)}"
    else:
        valid = " and ".join(part for part in (lower, upper) if part)
    fix = f"use --{name.replace('_', '-')} {valid}"
    reason = _BOUND_REASON.search(field.description or "")
    return f"{fix} ({reason.group(1).strip()})" if reason else fix


def _number(value: object) -> str:
    """300.0 as 300; other numbers as they are."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# pydantic's wording where it misleads: "Input should be a finite number" for nan reads as a range.
_MESSAGES = {
    "finite_number": "must be a finite number (not nan or inf)",
    "float_parsing": "must be a number, e.g. 0.5",
    "int_parsing": "must be a whole number, e.g. 2",
    "int_from_float": "must be a whole number, e.g. 2",
    "bool_parsing": "must be true or false",
}


def _describe(loc: tuple[int | str, ...], message: str, env_prefix: str) -> str:
    message = message.removeprefix("Value error, ")
    if not loc:
        return message
    name = str(loc[0])
    return f"--{name.replace('_', '-')} (env {env_prefix}{name.upper()}): {message}"
