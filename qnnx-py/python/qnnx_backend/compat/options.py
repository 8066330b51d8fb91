"""The option types of ``qnnx-backend`` 0.4 (``qnnx_backend.options``), for code that annotates
with them. ``QNNCompileOptions`` lists 0.4's keys; every key qnnx takes (``QnnSettings``) is in
``QNNRouterCompileOptions`` too, with ``dynamic`` for ``qnnx_backend.compile``."""

from __future__ import annotations

from typing import Any, Literal, Mapping, Optional, TypedDict, Union


class QNNCompileOptions(TypedDict, total=False):
    device: Literal["cpu", "npu", "gpu", "auto"]
    strict: bool
    fp16: bool
    cache: bool
    cache_dir: str
    kv_cache: bool


class QNNRouterCompileOptions(QNNCompileOptions, total=False):
    dynamic: bool
    soc_model: Union[int, str]
    htp_arch: int
    opt_level: int
    log_level: str
    exporter: str
    dry_run: bool
    min_partition_size: int
    partition_cost: Union[Literal["measure"], float]
    check_nan: bool
    fix_inputs: Mapping[str, Any]
    quantize: Optional[str]
    calibration: Any
    observer: str
    per_channel: bool
    weight_rounding: Literal["nearest", "gptq"]
    weight_block_size: Optional[int]
    activation_headroom: Optional[float]
    quantize_modules: Mapping[str, Optional[str]]
    quantize_ops: Mapping[str, Optional[str]]
    quantize_values: Mapping[str, Optional[str]]
    target_sqnr_db: float
    tokenizer: Any
    kv_cache_bits: Literal[8, 16]
    kv_cache_rotation: Optional[bool]
    kv_cache_observer: Literal["minmax", "histogram"]


__all__ = ["QNNCompileOptions", "QNNRouterCompileOptions"]
