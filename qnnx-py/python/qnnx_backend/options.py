"""``qnnx_backend.options``: 0.4's option TypedDicts (the code is ``compat/options.py``)."""

from .compat.options import QNNCompileOptions, QNNRouterCompileOptions

__all__ = ["QNNCompileOptions", "QNNRouterCompileOptions"]
