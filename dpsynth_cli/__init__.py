"""dpsynth: differentially private synthetic data with W1 guarantees.

The Python API (docs/api.md): `synthesize`, `principal_components`, `online_replay` and
`evaluate_synthetic` on pandas
DataFrames, Arrow tables or files, `load_schema`, `budget_status`, and the warnings and errors
they raise. They are imported on first use, so that `import dpsynth_cli` (and the command's
start-up) stays light.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = [
    "DataError",
    "DpsynthError",
    "DpsynthNotice",
    "NotForRelease",
    "PrivacyRefusal",
    "UsageError",
    "budget_status",
    "evaluate_synthetic",
    "load_schema",
    "online_replay",
    "principal_components",
    "synthesize",
]

_ERRORS = ("DataError", "DpsynthError", "PrivacyRefusal", "UsageError")


def __getattr__(name: str) -> Any:
    """The API's names, imported when first used (PEP 562)."""
    if name in _ERRORS:
        from dpsynth_cli import errors

        return getattr(errors, name)
    if name in __all__:
        from dpsynth_cli import api

        return getattr(api, name)
    raise AttributeError(f"module 'dpsynth_cli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
