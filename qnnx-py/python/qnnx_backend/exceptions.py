"""Exceptions of qnnx_backend. They are declared in the native module; this module re-exports
them so ``from qnnx_backend.exceptions import UnsupportedOpError`` works."""

from ._native import (
    CacheError,
    InputError,
    LibraryLoadError,
    LoweringError,
    QnnApiError,
    QnnxError,
    SavedModelError,
    UnsupportedOpError,
)

__all__ = [
    "QnnxError",
    "LibraryLoadError",
    "QnnApiError",
    "UnsupportedOpError",
    "LoweringError",
    "CacheError",
    "InputError",
    "SavedModelError",
]
