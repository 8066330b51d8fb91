"""Strict mode's failures as the ``qnnx-backend`` 0.4 package's users catch them.

0.4 compiled inside dynamo's backend call, so with ``strict=True`` its errors reached the caller
wrapped by dynamo as ``torch._dynamo.exc.BackendCompilerFailed``. We compile at the first call
of each input signature instead (so that a strict error can also be caught by its own class;
see ``compiling.qnn_callable.compile_graph``), and raise an error that is both: for each of our exception
classes, a subclass of it and of ``BackendCompilerFailed``, with the same message and attributes
(``.nodes``, ``.device``, ...) and dynamo's (``.backend_name``, ``.inner_exception``: the
error as our native module made it). The classes live at module level so that they pickle by
name, like the native ones.
"""

from __future__ import annotations

from torch._dynamo.exc import BackendCompilerFailed

from .. import exceptions

_BY_BASE: dict[type, type] = {}


def _init(self, *args: object) -> None:
    # BackendCompilerFailed.__init__ wants (backend_fn, inner_exception, frame) and rewrites the
    # message; ours is kept as it is, and dynamo's attributes are set as its __init__ would.
    BaseException.__init__(self, *args)
    self._torch_dynamo_tracer_output = None
    self.frame_exec_strategy = None
    self.apply_to_code = True
    self.first_useful_frame = None
    self.backend_name = "qnn"
    self.inner_exception = None


for _name in exceptions.__all__:
    _base = getattr(exceptions, _name)
    _cls = type(
        f"Strict{_name}",
        (_base, BackendCompilerFailed),
        {
            "__init__": _init,
            "__module__": __name__,
            "__qualname__": f"Strict{_name}",
            "__doc__": f"{_name} raised in strict mode, also a torch._dynamo.exc.BackendCompilerFailed.",
        },
    )
    globals()[_cls.__name__] = _cls
    _BY_BASE[_base] = _cls


def as_backend_failure(e: exceptions.QnnxError) -> exceptions.QnnxError:
    """``e`` as an instance of its class's strict twin (same message and attributes, its
    ``inner_exception`` the original), or ``e`` itself for a class without one."""
    cls = _BY_BASE.get(type(e))
    if cls is None:
        return e
    out = cls(*e.args)
    for k, v in vars(e).items():
        setattr(out, k, v)
    out.inner_exception = e
    return out.with_traceback(e.__traceback__)
