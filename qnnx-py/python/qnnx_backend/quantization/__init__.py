"""Post-training quantization of FX graphs for the HTP: ``config`` (the leaf: schemes, op
kinds, options), ``pt2e`` (the flow), ``annotate`` and ``specs`` (the PT2E quantizer),
``rewrites`` and ``qdq`` (the converted graph and its ONNX made plain), ``gptq``,
``calibrate`` (calibration data), ``mixed`` (``target_sqnr_db``). Only ``config`` is imported
by float compiles; torchao is imported by ``specs``."""
