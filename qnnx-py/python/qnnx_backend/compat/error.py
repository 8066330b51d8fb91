"""Exception names of the ``qnnx-backend`` 0.4 package, for code that catches them.

``QNNCompilationError`` is the base of every qnnx_backend error; ``QNNUnsupportedOperatorError``
is ``UnsupportedOpError`` (it carries ``.operators`` and ``.device`` as before, plus ``.nodes``).
"""

from ..exceptions import (
    CacheError,
    LibraryLoadError,
    LoweringError,
    QnnApiError,
    QnnxError,
    UnsupportedOpError,
)

QNNCompilationError = QnnxError
QNNExportError = LoweringError
QNNCacheContractError = LoweringError
QNNUnsupportedOperatorError = UnsupportedOpError
QNNSessionCreationError = QnnApiError

__all__ = [
    "QNNCompilationError",
    "QNNExportError",
    "QNNCacheContractError",
    "QNNUnsupportedOperatorError",
    "QNNSessionCreationError",
    "CacheError",
    "LibraryLoadError",
]
