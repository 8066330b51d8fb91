"""torchao's PT2E machinery (imported here once, with the error that names the ``quantize``
extra when it is missing) and what the annotation builds from it: the weight observers fitted
to the bias, and the QuantizationSpecs of one scheme (``Specs``). torchao takes seconds to
import: only quantized compiles import this module (``pt2e`` imports it inside ``quantize``)."""

from __future__ import annotations

import logging
from typing import Any, Optional

import torch
from torch.fx import Node

# torchao 0.18 registers an Enum with torch's pytree at import, which torch 2.15 logs as deprecated
# (torch.utils._pytree's logger) in every process that quantizes: a warning the user did not cause
# and cannot act on, so that one logger is quietened for the import only.
_pytree_log = logging.getLogger("torch.utils._pytree")
_pytree_level = _pytree_log.level
_pytree_log.setLevel(logging.ERROR)
try:
    from torchao.quantization.pt2e import HistogramObserver, MinMaxObserver, PerChannelMinMaxObserver
    from torchao.quantization.pt2e.quantizer import (
        DerivedQuantizationSpec,
        FixedQParamsQuantizationSpec,
        QuantizationAnnotation,
        QuantizationSpec,
        Quantizer,
        SharedQuantizationSpec,
    )
except ImportError as e:
    raise ImportError(
        f"quantizing needs torchao's PT2E machinery ({e}); install it with: pip install 'qnnx[quantize]'"
    ) from e
finally:
    _pytree_log.setLevel(_pytree_level)

from .config import FIXED_U16, Scheme

# annotate takes torchao's classes from here, so that a missing torchao is always the error above.
__all__ = [
    "QuantizationAnnotation",
    "Quantizer",
    "SharedQuantizationSpec",
    "FittedPerChannelObserver",
    "FittedPerTensorObserver",
    "WEIGHT_OBSERVERS",
    "Specs",
]

_INT32 = (-(2**31), 2**31 - 1)
# A derived bias is fitted into 2**30 of int32's 2**31 levels.
_BIAS_LIMIT = 2.0**30


class _FittedWeights:
    """What the two weight observers below add to torchao's: scales that can be raised after
    calibration (``min_scale``) so that a derived int32 bias fits, and observing once. Weights
    are constants: they are observed at the first calibration call only (the per-channel
    minimum and maximum of every weight at every call took 0.23 s per resnet18 call, 30x the
    model itself)."""

    min_scale: Optional[torch.Tensor] = None
    observed = False

    def forward(self, x):
        if self.observed:
            return x
        self.observed = True
        return super().forward(x)  # type: ignore[misc]

    def calculate_qparams(self):
        scale, zero_point = super().calculate_qparams()  # type: ignore[misc]
        if self.min_scale is not None:
            scale = torch.maximum(scale, self.min_scale.to(scale.dtype).reshape(scale.shape))
        return scale, zero_point


class FittedPerChannelObserver(_FittedWeights, PerChannelMinMaxObserver):
    """Per-channel weight observer (``_FittedWeights``)."""


class FittedPerTensorObserver(_FittedWeights, MinMaxObserver):
    """Per-tensor weight observer (``_FittedWeights``)."""


#: The weight observers: constants, observed once, scales raised by ``fit_bias``.
WEIGHT_OBSERVERS = (FittedPerChannelObserver, FittedPerTensorObserver)


def _fixed(scale: float, zero_point: int) -> Any:
    """A uint16 output spec with QNN's fixed encoding."""
    return FixedQParamsQuantizationSpec(
        dtype=torch.uint16, scale=scale, zero_point=zero_point, quant_min=0, quant_max=65535,
        qscheme=torch.per_tensor_affine,
    )  # fmt: skip


class _Widened:
    """An activation observer whose encoding covers its calibrated range times ``headroom``
    (``QuantizeConfig.headroom``): both torchao observers derive their encoding from a minimum and a
    maximum through ``_calculate_qparams``, which this scales (zero stays where it is)."""

    def __init__(self, *args, headroom: float = 1.0, **kwargs):
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        self.headroom = headroom

    def _calculate_qparams(self, min_val, max_val):
        return super()._calculate_qparams(min_val * self.headroom, max_val * self.headroom)  # type: ignore[misc]


class WidenedMinMaxObserver(_Widened, MinMaxObserver):
    """MinMaxObserver with headroom (``_Widened``)."""


class WidenedHistogramObserver(_Widened, HistogramObserver):
    """HistogramObserver with headroom (``_Widened``)."""


class Specs:
    """The QuantizationSpecs of one scheme, made once: PT2E shares one observer between a
    producer's output and a consumer's input when their specs are equal, and observer
    constructors compare by identity."""

    def __init__(self, scheme: Scheme, observer: str, per_channel: bool, headroom: float = 1.0):
        act_dtype, act_max = (torch.uint8, 255) if scheme.act_bits == 8 else (torch.uint16, 65535)
        act_observer = MinMaxObserver if observer == "minmax" else HistogramObserver
        act_args: dict = {}
        if scheme.act_bits == 16 and headroom != 1.0:
            act_observer = WidenedMinMaxObserver if observer == "minmax" else WidenedHistogramObserver
            act_args = {"headroom": headroom}
        self.act = QuantizationSpec(
            dtype=act_dtype,
            quant_min=0,
            quant_max=act_max,
            qscheme=torch.per_tensor_affine,
            observer_or_fake_quant_ctr=act_observer.with_args(**act_args),
        )
        w_dtype, w_min, w_max = {
            8: (torch.int8, -127, 127),
            16: (torch.int16, -32767, 32767),
            # PT2E has no 4-bit dtype: int8 restricted to -7..7 (symmetric), stored as ONNX
            # INT4 after export (qdq.tidy_onnx), as ExecuTorch's QnnQuantizer does for its
            # 16a4w (int8, quant range of 4 bits).
            4: (torch.int8, -7, 7),
        }[scheme.weight_bits]
        self.per_channel = per_channel
        self.weight_channel = {
            axis: QuantizationSpec(
                dtype=w_dtype,
                quant_min=w_min,
                quant_max=w_max,
                qscheme=torch.per_channel_symmetric,
                ch_axis=axis,
                observer_or_fake_quant_ctr=FittedPerChannelObserver.with_args(),
            )
            for axis in (0, 1)
        }
        self.weight_tensor = QuantizationSpec(
            dtype=w_dtype,
            quant_min=w_min,
            quant_max=w_max,
            qscheme=torch.per_tensor_symmetric,
            observer_or_fake_quant_ctr=FittedPerTensorObserver.with_args(),
        )
        self.int32 = QuantizationSpec(
            dtype=torch.int32,
            quant_min=_INT32[0],
            quant_max=_INT32[1],
            qscheme=torch.per_tensor_symmetric,
            observer_or_fake_quant_ctr=MinMaxObserver.with_args(),
        )
        # QNN's fixed output encodings for 16-bit Sigmoid and Tanh.
        self.sigmoid: Any = self.act
        self.tanh: Any = self.act
        if scheme.act_bits == 16:
            self.sigmoid = _fixed(*FIXED_U16["Sigmoid"])
            self.tanh = _fixed(*FIXED_U16["Tanh"])

    def weight(self, axis: Optional[int]) -> QuantizationSpec:
        """Per channel on ``axis`` when per-channel weights are on and the op has an
        output-channel axis; else per tensor."""
        if self.per_channel and axis is not None:
            return self.weight_channel[axis]
        return self.weight_tensor

    @staticmethod
    def bias(node: Node, weight: QuantizationSpec) -> DerivedQuantizationSpec:
        """int32 with scale = input scale x weight scale, zero point 0."""

        def derive(observers):
            act, w = observers
            act_scale, _ = act.calculate_qparams()
            w_scale, _ = w.calculate_qparams()
            scale = (act_scale * w_scale).to(torch.float32)
            return scale, torch.zeros(scale.shape, dtype=torch.int32)

        per_channel = weight.qscheme == torch.per_channel_symmetric
        return DerivedQuantizationSpec(
            derived_from=[(node.args[0], node), (node.args[1], node)],
            derive_qparams_fn=derive,
            dtype=torch.int32,
            quant_min=_INT32[0],
            quant_max=_INT32[1],
            qscheme=torch.per_channel_symmetric if per_channel else torch.per_tensor_symmetric,
            ch_axis=0,
        )


# --- Where a node sits in the model -----------------------------------------------------------
