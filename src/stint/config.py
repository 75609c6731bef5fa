"""The config file (TOML) that ``stint sim --config`` and ``stint serve --config`` read.

Today it holds the policy and its parameters, with the same keys as ``--policy-opt``:

```toml
[policy]
name = "tiresias"
[policy.options]
thresholds_gpu_s = [60.0, 600.0]
tick_s = 5
```

Flags given on the command line win over the file (``--policy``; a ``--policy-opt`` key). Errors
name the file and the key (and the line, for TOML syntax).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

_TOP = {"policy"}
_POLICY = {"name", "options"}


class ConfigError(ValueError):
    """A config file that cannot be read or holds a key or value it should not."""


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    name: str | None
    options: tuple[str, ...]  # KEY=VALUE, as --policy-opt takes them


def load_policy(path: Path) -> PolicyConfig:
    """The ``[policy]`` table of ``path``; unknown keys are errors, not ignored."""
    import tomllib  # only with --config: `stint sim` without one need not import it

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    _only(path, "", data, _TOP)
    table = data.get("policy", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: 'policy' must be a table ([policy])")
    _only(path, "policy.", table, _POLICY)
    name = table.get("name")
    if name is not None and not isinstance(name, str):
        raise ConfigError(f"{path}: policy.name must be a string (got {name!r})")
    opts = table.get("options", {})
    if not isinstance(opts, dict):
        raise ConfigError(f"{path}: policy.options must be a table ([policy.options])")
    return PolicyConfig(name, tuple(f"{k}={_text(path, k, v)}" for k, v in opts.items()))


def merged_options(from_file: tuple[str, ...], from_flags: tuple[str, ...]) -> tuple[str, ...]:
    """File options, then flag options; a key given twice keeps the flag's value."""
    flagged = {o.partition("=")[0].strip() for o in from_flags}
    return tuple(o for o in from_file if o.partition("=")[0] not in flagged) + from_flags


def _only(path: Path, prefix: str, table: dict[str, object], allowed: set[str]) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(f"{path}: unknown key {prefix}{key}; valid: "
                              f"{', '.join(prefix + k for k in sorted(allowed))}")


def _text(path: Path, key: str, value: object) -> str:
    """A TOML value as ``--policy-opt`` text (the policy's factory checks the type)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, int | float) and not isinstance(v, bool)
                                       for v in value):
        return ",".join(str(v) for v in value)
    raise ConfigError(f"{path}: policy.options.{key}: {value!r} is not a number, string, boolean "
                      "or list of numbers")
