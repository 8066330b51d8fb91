"""The HTP target every benchmark gives both engines: SoC 60 (SC8380XP, HTP v73), whose emulator
computes floats in fp16 like the NPU (with no SoC set it picks a v68 part and computes exact fp32),
and fp16 precision for float graphs. The provider options are spelled as ONNX Runtime's QNN EP
takes them, which `qnnx_backend.runtime.InferenceSession` also accepts.

No imports: processes of either engine read it (bench/ort_session.py under bench/.venv-ort,
bench/quant.py's qnnx session runner, which must not load onnxruntime or torch).
"""

PROVIDER_OPTIONS = {"soc_model": "60", "htp_arch": "73", "enable_htp_fp16_precision": "1"}
