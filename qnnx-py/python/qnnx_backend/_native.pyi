"""Type stubs of the native module (Rust, PyO3). Checked against the built module by
tests/python/test_native.py: the names, and mypy's stubtest (signatures, properties, classes)."""

import os
from typing import Callable, Optional, Union, final

__all__ = [
    "QnnxError",
    "LibraryLoadError",
    "QnnApiError",
    "UnsupportedOpError",
    "LoweringError",
    "CacheError",
    "InputError",
    "SavedModelError",
    "Compiled",
    "Spec",
    "is_available",
    "unavailable_reason",
    "build_id",
    "check",
    "op_table",
    "compile",
    "compile_many",
    "compare",
    "load_cached",
    "load_cached_many",
    "alias_get",
    "alias_put",
    "alias_get_split",
    "alias_put_split",
    "Reference",
    "LlmArtifact",
    "versions",
    "save",
    "save_many",
    "load_saved",
    "read_manifest",
    "saved_bytes",
    "load_saved_bytes",
    "load_context_binary",
    "set_log_level",
    "default_cache_dir",
    "resolve_target",
    "soc_model",
    "target_arch",
    "known_socs",
    "htp_archs",
    "dtype_names",
    "performance_modes",
    "quant_schemes",
    "fixed_encodings",
]

class QnnxError(RuntimeError):
    """Base of every qnnx_backend error. Every instance has all of these attributes, None where
    they do not apply."""

    node: Optional[str]
    nodes: Optional[list[tuple[str, str, str]]]
    operators: Optional[set[str]]
    code: Optional[int]
    call: Optional[str]
    device: Optional[str]
    graph: Optional[str]

class LibraryLoadError(QnnxError): ...
class QnnApiError(QnnxError): ...
class UnsupportedOpError(QnnxError): ...
class LoweringError(QnnxError): ...
class CacheError(QnnxError): ...
class InputError(QnnxError): ...
class SavedModelError(QnnxError): ...

# (name, graph dtype, graph shape, model dtype)
_IoDesc = tuple[str, str, list[int], str]

@final
class Compiled:
    @property
    def lower_ms(self) -> float: ...
    @property
    def finalize_ms(self) -> float: ...
    @property
    def load_ms(self) -> float: ...
    @property
    def from_cache(self) -> bool: ...
    @property
    def cache_key(self) -> Optional[str]: ...
    @property
    def inputs(self) -> list[_IoDesc]: ...
    @property
    def outputs(self) -> list[_IoDesc]: ...
    @property
    def timings(self) -> list[tuple[str, float]]: ...
    def run(self, inputs: list[tuple[int, int]], outputs: list[tuple[int, int]], check_nan: bool = True) -> None: ...
    def run_profiled(
        self,
        inputs: list[tuple[int, int]],
        outputs: list[tuple[int, int]],
        level: str = "detailed",
        check_nan: bool = True,
    ) -> tuple[str, str]: ...
    def binary(self) -> bytes: ...
    def set_performance_mode(self, mode: str) -> bool: ...
    @property
    def performance_mode(self) -> Optional[str]: ...

def is_available(device: str) -> bool: ...
def unavailable_reason(device: str) -> Optional[str]: ...
def build_id(device: str) -> str: ...
def check(
    onnx: bytes,
    device: str,
    *,
    input_shapes: Optional[dict[str, list[int]]] = None,
    fix_inputs: Optional[dict[str, str]] = None,
) -> list[tuple[str, str, str]]: ...
def op_table(device: str) -> dict[str, dict[str, object]]: ...
@final
class Spec:
    """One target and its compile options (``QnnSettings.spec``), given to compiles and loads."""

    def __new__(
        cls,
        device: str = "npu",
        soc_model: Union[int, str, None] = None,
        htp_arch: Optional[int] = None,
        fp16: bool = False,
        opt_level: Optional[int] = None,
        cache_dir: Union[str, os.PathLike[str], None] = None,
    ) -> "Spec": ...
    @property
    def device(self) -> str: ...
    @property
    def soc_model(self) -> Optional[int]: ...
    @property
    def htp_arch(self) -> Optional[int]: ...
    @property
    def arch(self) -> Optional[int]: ...
    @property
    def float_path(self) -> bool: ...
    def describe(self) -> str: ...
    @property
    def fp16(self) -> bool: ...
    @property
    def opt_level(self) -> Optional[int]: ...
    @property
    def cache_dir(self) -> Optional[str]: ...

def compile(
    onnx: bytes,
    spec: Optional[Spec] = None,
    *,
    name: str = "qnnx",
    input_shapes: Optional[dict[str, list[int]]] = None,
    fix_inputs: Optional[dict[str, str]] = None,
    quantized_io: bool = False,
    base_dir: Optional[str] = None,
) -> Compiled: ...
def compare(
    test: bytes,
    inputs: list[tuple[str, list[int], bytes]],
    spec: Optional[Spec] = None,
    *,
    reference: Optional[bytes] = None,
    jump_db: float = 10.0,
    input_shapes: Optional[dict[str, list[int]]] = None,
) -> str: ...
@final
class Reference:
    """A float model run once, exactly, with every value observed; compared with test builds."""

    def __new__(
        cls,
        onnx: bytes,
        inputs: list[tuple[str, list[int], bytes]],
        input_shapes: Optional[dict[str, list[int]]] = None,
    ) -> "Reference": ...
    def compare(
        self,
        test: bytes,
        spec: Spec,
        jump_db: float = 10.0,
    ) -> str: ...

@final
class LlmArtifact:
    """An LLM artifact folder, checked and opened; the Rust generation loop of `qnnx generate`."""

    def __new__(cls, path: Union[str, os.PathLike[str]], soc_model: Optional[int] = None) -> "LlmArtifact": ...
    @property
    def manifest(self) -> str: ...
    @property
    def open_ms(self) -> float: ...
    def encode(self, text: str, special: bool) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...
    def chat_prompt(self, messages: list[tuple[str, str]]) -> str: ...
    def generate(
        self,
        prompt: list[int],
        max_new_tokens: int,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        stop: list[str] = ...,
        on_text: Optional[Callable[[str], object]] = None,
    ) -> str: ...

def compile_many(
    onnx_list: list[bytes],
    names: list[str],
    spec: Optional[Spec] = None,
    *,
    weight_sharing: bool = True,
    fix_inputs: Optional[list[dict[str, str]]] = None,
) -> list[Compiled]: ...
def load_cached(key: str, spec: Spec, *, name: str = "qnnx") -> Optional[Compiled]: ...
def alias_get_split(cache_dir: str, fingerprint: str) -> Optional[tuple[str, str]]: ...
def alias_put_split(cache_dir: str, fingerprint: str, key: str, plan: str) -> None: ...
def load_cached_many(key: str, names: list[str], spec: Spec) -> Optional[list[Compiled]]: ...
def alias_get(cache_dir: str, fingerprint: str) -> Optional[str]: ...
def alias_put(cache_dir: str, fingerprint: str, key: str) -> None: ...
def default_cache_dir() -> Optional[str]: ...
def versions() -> dict[str, str]: ...
def save(compiled: Compiled, path: Union[str, os.PathLike[str]], options: dict[str, str], extra: dict[str, str]) -> str: ...
def save_many(
    graphs: list[Compiled], path: Union[str, os.PathLike[str]], options: dict[str, str], extra: dict[str, str]
) -> str: ...
def load_saved(path: Union[str, os.PathLike[str]]) -> tuple[list[Compiled], str]: ...
def read_manifest(path: Union[str, os.PathLike[str]]) -> str: ...
def saved_bytes(compiled: Compiled, options: dict[str, str], extra: dict[str, str]) -> bytes: ...
def load_saved_bytes(what: str, data: bytes) -> tuple[list[Compiled], str]: ...
def load_context_binary(path: Union[str, os.PathLike[str]], graph: Optional[str] = None) -> Compiled: ...
def set_log_level(level: str) -> None: ...
def resolve_target(
    device: str, soc_model: Union[int, str, None] = None, htp_arch: Optional[int] = None
) -> tuple[Optional[int], Optional[int]]: ...
def target_arch(
    device: str, soc_model: Union[int, str, None] = None, htp_arch: Optional[int] = None
) -> Optional[int]: ...
def soc_model(name: str) -> Optional[int]: ...
def known_socs() -> str: ...
def htp_archs() -> list[int]: ...
def dtype_names() -> list[str]: ...
def performance_modes() -> list[str]: ...
def quant_schemes() -> list[tuple[str, int, int]]: ...
def fixed_encodings() -> dict[str, dict[str, tuple[float, int]]]: ...
