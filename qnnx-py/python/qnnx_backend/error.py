"""``qnnx_backend.error``: 0.4's exception names (the code is ``compat/error.py``)."""

from .compat.error import *  # noqa: F403
from .compat.error import __all__  # noqa: F401
