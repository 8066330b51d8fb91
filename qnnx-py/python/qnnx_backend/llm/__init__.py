"""LLM artifacts for ``qnnx generate`` (docs/llm.md, "Deploying without Python"): a Hugging Face
decoder (a ``from_pretrained`` folder or a GGUF file) exported as prefill and decode graphs with
the KV cache as explicit graph inputs (``export``), compiled for the HTP and written with its
tokenizer, chat template and manifest (``build``); ``python -m qnnx_backend.llm build`` is the
command (``__main__``). ``session`` runs an artifact without torch (the Rust loop of
``qnnx generate``)."""
