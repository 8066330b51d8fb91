"""``qnnx_backend.compatibility``: 0.4's ``QNNDevice`` and ``QNNRuntime`` (the code is
``compat/devices.py``)."""

from .compat.devices import *  # noqa: F403
from .compat.devices import __all__  # noqa: F401
