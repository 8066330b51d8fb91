"""``qnnx_backend.runtime``, 0.4's import path of the numpy-only deployment API: an ONNX
Runtime-shaped ``InferenceSession`` and ``load``. The code is ``deployment/session.py``."""

from .deployment.session import InferenceSession, NodeArg, SavedModel, SessionOptions, __all__, load

__all__ = list(__all__)
