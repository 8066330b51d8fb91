"""One compile per graph when several threads make the first call of one compiled model at once
(a threaded server starting up): dynamo calls the backend once per such thread, and the
QnnCallables it makes share one compile (``SharedCompiles.compile_once``)."""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any, Sequence

from ..compat import strict
from ..exceptions import QnnxError
from ..partitioning.split import Partitioned
from .stats import STATS

logger = logging.getLogger("qnnx_backend")

# Graphs by what determines them (QnnCallable._share_key), while some QnnCallable holds them:
# dynamo calls the backend once per thread that makes the first call of a compiled model at
# once, and those QnnCallables share one compile. Per-key locks exist while a compile runs.
_SHARED: "weakref.WeakValueDictionary[tuple, Any]" = weakref.WeakValueDictionary()
_KEY_LOCKS: dict[tuple, threading.Lock] = {}
_SHARED_LOCK = threading.Lock()


def shared_outcome(graph: Any) -> dict:
    """The outcome (``QnnCallable.outcome``) of a graph another QnnCallable compiled."""
    if isinstance(graph, Partitioned):
        return {"device": graph.device, "whole": False, "plan": graph.plan, "reasons": []}
    return {"device": graph.device, "whole": True, "plan": None, "reasons": []}


class SharedCompiles:
    """The part of ``QnnCallable`` that shares its graphs between callables."""

    def compile_once(self, sig: tuple, args: Sequence[Any]) -> None:
        """Compiles the graph of signature ``sig`` unless another thread has meanwhile. Threads
        making the first call of one compiled model at once (a threaded server starting up) wait
        for one compile and use its graph: dynamo calls the backend once per such thread, so the
        graph is shared by what determines it (``_share_key``) between those QnnCallables too.
        A failed strict compile is not recorded, so each waiting thread raises it in turn."""
        key = self._share_key(sig)
        with _SHARED_LOCK:
            lock = _KEY_LOCKS.setdefault(key, threading.Lock())
        with lock, self.compile_lock:
            if sig in self.graphs:
                return
            shared = _SHARED.get(key)
            if shared is not None:
                self.graphs[sig] = shared
                self.outcome = shared_outcome(shared)
                STATS["shared_graphs"] += 1
                return
            if self.graphs and self.settings.strict:
                logger.warning(
                    "qnn backend: input signature %s differs from the compiled one(s); compiling a new graph",
                    sig,
                )
            failure = None
            try:
                graph = self.compile(args)
                self.graphs[sig] = graph
                if graph is not None:
                    _SHARED[key] = graph
            except QnnxError as e:
                if not self.settings.strict:
                    raise
                # Also a BackendCompilerFailed, as the 0.4 package's strict errors were; raised
                # outside the handler so that it carries no context.
                failure = strict.as_backend_failure(e)
            finally:
                with _SHARED_LOCK:
                    # Later arrivals find the graph in _SHARED; threads already waiting hold the lock.
                    _KEY_LOCKS.pop(key, None)
            if failure is not None:
                raise failure

    def _share_key(self, sig: tuple) -> tuple:
        """What makes two QnnCallables' graphs for ``sig`` the same: the graph's code, the very
        parameter and buffer tensors (by identity: alive as long as a callable holding the shared
        graph holds them, so an id cannot be reused meanwhile), the settings and the
        calibration data object."""
        return (
            self.gm.code,
            tuple(id(a) for a in self.statics),
            tuple((i, id(v)) for i, v in self.example_statics.items() if not isinstance(v, (bool, int, float, str, type(None)))),
            tuple((i, v) for i, v in self.example_statics.items() if isinstance(v, (bool, int, float, str, type(None)))),
            sig,
            repr(self.settings),
            id(self.settings.calibration),
            self.may_partition,
        )
