"""Type stubs of the native module (Rust, PyO3). Checked against the built module by
tests/python/test_stubs.py."""

from typing import Optional

class QnnxError(RuntimeError): ...
class LibraryLoadError(QnnxError): ...
class QnnApiError(QnnxError):
    code: Optional[int]
    call: Optional[str]
    node: Optional[str]
class UnsupportedOpError(QnnxError):
    nodes: list[tuple[str, str, str]]
    operators: set[str]
class LoweringError(QnnxError): ...
class CacheError(QnnxError): ...

IoDesc = tuple[str, str, list[int], str]

class Compiled:
    lower_ms: float
    finalize_ms: float
    load_ms: float
    from_cache: bool
    cache_key: Optional[str]
    @property
    def inputs(self) -> list[IoDesc]: ...
    @property
    def outputs(self) -> list[IoDesc]: ...
    def run(self, inputs: list[tuple[int, int]], outputs: list[tuple[int, int]], check_nan: bool = True) -> None: ...
    def binary(self) -> bytes: ...

def is_available(device: str) -> bool: ...
def unavailable_reason(device: str) -> Optional[str]: ...
def build_id(device: str) -> str: ...
def check(onnx: bytes, device: str) -> list[tuple[str, str, str]]: ...
def compile(
    onnx: bytes,
    *,
    device: str = "npu",
    soc_model: Optional[int] = None,
    htp_arch: Optional[int] = None,
    fp16: bool = False,
    opt_level: Optional[int] = None,
    name: str = "qnnx",
    cache_dir: Optional[str] = None,
) -> Compiled: ...
def compile_many(
    onnx_list: list[bytes],
    names: list[str],
    *,
    device: str = "npu",
    soc_model: Optional[int] = None,
    htp_arch: Optional[int] = None,
    fp16: bool = False,
    opt_level: Optional[int] = None,
    weight_sharing: bool = True,
    cache_dir: Optional[str] = None,
) -> list[Compiled]: ...
def load_cached(
    key: str,
    cache_dir: str,
    *,
    device: str = "npu",
    soc_model: Optional[int] = None,
    htp_arch: Optional[int] = None,
    name: str = "qnnx",
) -> Optional[Compiled]: ...
def default_cache_dir() -> Optional[str]: ...
def versions() -> dict[str, str]: ...
def set_log_level(level: str) -> None: ...
def soc_model(name: str) -> Optional[int]: ...
def known_socs() -> str: ...
