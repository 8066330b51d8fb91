"""From an FX graph to a callable that runs it on QNN: ``qnn_callable`` (the callable dynamo
gets: per-signature graphs and the device loop), ``shared`` (one compile for threads racing to
the first call), ``warm`` (warm starts from the cache), ``aot`` (torch's AOT path),
``to_onnx`` (FX -> ONNX), ``fix_inputs``, ``fingerprint``, ``decompose``, ``kvcache``,
``buckets`` (``qnnx_backend.compile``'s prefill buckets), ``call`` (the per-call checks and
conversion of torch tensors) and ``stats`` (``STATS``, the fallback errors)."""
