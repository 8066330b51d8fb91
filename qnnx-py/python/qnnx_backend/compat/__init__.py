"""What ``qnnx-backend`` 0.4's users import and catch, in one place: ``error`` (its exception
names), ``options`` (its option TypedDicts), ``devices`` (``QNNDevice``, ``QNNRuntime``) and
``strict`` (strict failures as ``BackendCompilerFailed``). Their 0.4 import paths
(``qnnx_backend.error``, ``.options``, ``.compatibility``) re-export them."""
