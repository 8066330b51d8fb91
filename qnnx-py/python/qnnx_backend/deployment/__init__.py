"""Models saved and run without torch.compile: ``save`` (``qnnx_backend.export``, needs torch)
and ``session`` (``load`` and ``InferenceSession``, numpy only; public as
``qnnx_backend.runtime``)."""
