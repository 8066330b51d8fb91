"""Warnings that point at the user's line.

The backend's warnings are raised deep inside a torch.compile call: dynamo compiles a graph at
the first call of the compiled model, so a fixed ``stacklevel`` lands in torch's ``eval_frame.py``
(the wrapper torch.compile returns), which tells the user nothing. The line to show is the one
that called the compiled model: the first frame outside torch (and this package) beyond the
outermost torch.compile wrapper. Python 3.12's ``skip_file_prefixes`` does the same walk, but the
package supports 3.10.
"""

from __future__ import annotations

import os
import sys
import warnings

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_EVAL_FRAME = os.sep + os.path.join("torch", "_dynamo", "eval_frame.py")


def _internal(filename: str, torch_dir: str) -> bool:
    return filename.startswith(_PACKAGE) or (bool(torch_dir) and filename.startswith(torch_dir)) or filename.startswith("<frozen ")


def user_stacklevel() -> int:
    """The ``stacklevel`` of the user's line, for a ``warnings.warn`` called by the caller of
    this function's caller (``warn`` below)."""
    torch_mod = sys.modules.get("torch")
    torch_dir = os.path.dirname(os.path.abspath(torch_mod.__file__)) + os.sep if getattr(torch_mod, "__file__", None) else ""
    # frames[0] is the frame that called warn(): warnings.warn, called in warn(), counts warn()
    # as stacklevel 1 and so frames[i] as i + 2.
    frames = []
    f = sys._getframe(2)
    while f is not None:
        frames.append(os.path.abspath(f.f_code.co_filename))
        f = f.f_back
    start = 0
    for i, name in enumerate(frames):
        if name.endswith(_EVAL_FRAME):
            start = i + 1  # the outermost torch.compile wrapper seen so far
    for i in range(start, len(frames)):
        if not _internal(frames[i], torch_dir):
            return i + 2
    for i, name in enumerate(frames):  # no frame outside: the first one outside this package
        if not name.startswith(_PACKAGE):
            return i + 2
    return 2


def warn(message: str, category: type = RuntimeWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the user's line (``user_stacklevel``)."""
    warnings.warn(message, category, stacklevel=user_stacklevel())


_ONCE: set = set()


def once(key: str, message: str, category: type = UserWarning) -> None:
    """``warn`` the first time ``key`` is seen in this process (settings ported from ONNX Runtime
    that have no effect here are said once, not at every session)."""
    if key in _ONCE:
        return
    _ONCE.add(key)
    warnings.warn(message, category, stacklevel=user_stacklevel())
