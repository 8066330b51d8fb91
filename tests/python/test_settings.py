"""Option parsing and availability: no QNN needed except where marked."""

import pytest

import qnnx_backend
from qnnx_backend.settings import VALID_OPTIONS, parse_options


def test_defaults_match_qnnx_backend_04():
    s = parse_options(None)
    assert (s.device, s.strict, s.fp16, s.cache, s.cache_dir, s.kv_cache) == ("auto", False, False, False, None, False)


def test_unknown_option_lists_valid_ones():
    with pytest.raises(ValueError) as info:
        parse_options({"devcie": "npu"})
    msg = str(info.value)
    assert "devcie" in msg
    for name in VALID_OPTIONS:
        assert name in msg


@pytest.mark.parametrize(
    "bad",
    [
        {"device": "tpu"},
        {"strict": "yes"},
        {"opt_level": 7},
        {"log_level": "loud"},
        {"soc_model": "SM9999"},
        {"htp_arch": 70},
        {"exporter": "magic"},
    ],
)
def test_bad_values_are_rejected(bad):
    with pytest.raises(ValueError):
        parse_options(bad)


def test_soc_by_name():
    assert parse_options({"soc_model": "SC8380XP"}).soc_model == 60
    assert parse_options({"soc_model": "sm8650"}).soc_model == 57
    assert parse_options({"soc_model": 43}).soc_model == 43


def test_bad_options_fail_at_compile_time():
    import torch

    m = torch.nn.Linear(2, 2)
    with pytest.raises(Exception, match="unknown qnn backend option"):
        torch.compile(m, backend="qnn", options={"nope": 1})(torch.randn(1, 2))


def test_is_available():
    assert qnnx_backend.is_available("cpu") is True
    assert isinstance(qnnx_backend.is_available("npu"), bool)
    assert qnnx_backend.is_available() == (qnnx_backend.is_available("npu") or qnnx_backend.is_available("gpu"))
    # "auto", the device option's default, asks the same as no argument (it raised ValueError).
    assert qnnx_backend.is_available("auto") == qnnx_backend.is_available()
    with pytest.raises(ValueError, match="'auto', 'npu', 'gpu' or 'cpu'"):
        qnnx_backend.is_available("tpu")


def test_gpu_is_unavailable_on_x86_with_a_reason():
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("x86_64 only: Qualcomm's x86 GPU library needs a remote tuning server")
    from qnnx_backend import _native

    assert qnnx_backend.is_available("gpu") is False
    assert _native.unavailable_reason("gpu")


def test_backend_is_registered():
    import torch._dynamo

    assert "qnn" in torch._dynamo.list_backends()



def test_fix_inputs_values_are_spelled_for_the_native_module():
    import torch

    from qnnx_backend.settings import fixed_value_text, fixed_values

    assert fixed_value_text("f", True) == "true"
    assert fixed_value_text("n", 16000) == "16000"
    assert fixed_value_text("s", 0.5) == "0.5"
    assert fixed_value_text("shape", [1, 3, 224]) == "[1,3,224]"
    assert fixed_value_text("one", (4,)) == "[4]"
    assert fixed_value_text("t", torch.tensor(0.25)) == "0.25"
    assert fixed_value_text("t", torch.tensor([1, 2])) == "[1,2]"
    assert fixed_values(None) == {}
    s = parse_options({"fix_inputs": {"flag": True, "size": [2, 3]}})
    # Sorted by name in the settings that enter the cache key.
    assert s.compile_settings()["fix_inputs"] == (("flag", "true"), ("size", "[2,3]"))
    assert parse_options({"fix_inputs": {"size": [2, 4]}}).compile_settings() != s.compile_settings()
    assert parse_options(None).compile_settings()["fix_inputs"] == ()


@pytest.mark.parametrize(
    "bad",
    [{"fix_inputs": [("x", 1)]}, {"fix_inputs": {"x": "1"}}, {"fix_inputs": {"x": [[1, 2]]}}, {"fix_inputs": {"": 1}}],
)
def test_bad_fix_inputs_are_rejected(bad):
    with pytest.raises(ValueError, match="fix_inputs"):
        parse_options(bad)


def test_quantize_options():
    import torch

    s = parse_options(
        {
            "quantize": "16a8w",
            "calibration": [torch.zeros(1)],
            "observer": "histogram",
            "per_channel": False,
            "quantize_modules": {"encoder.*": "16a16w", "head": "float"},
            "quantize_ops": {"softmax": None},
        }
    )
    cfg = s.quantize_config()
    assert (cfg.scheme.name, cfg.observer, cfg.per_channel) == ("16a8w", "histogram", False)
    assert [(p, x.name if x else None) for p, x in cfg.modules] == [("encoder.*", "16a16w"), ("head", None)]
    assert [(k, x) for k, x in cfg.ops] == [("softmax", None)]
    assert parse_options(None).quantize is None


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"quantize": "8a4w", "calibration": [0]}, r"quantize='8a4w': use one of 8a8w, 16a8w, 16a16w"),
        ({"quantize": "8a8w"}, r"quantize='8a8w' needs calibration data"),
        ({"quantize": "8a8w", "calibration": []}, r"calibration is empty"),
        ({"quantize": "8a8w", "calibration": 5}, r"calibration=int: give an iterable"),
        ({"quantize": "8a8w", "calibration": "images/"}, r"calibration=str"),
        ({"quantize": "8a8w", "calibration": [0], "observer": "mse"}, r"observer='mse': use one of minmax, histogram"),
        ({"quantize": "8a8w", "calibration": [0], "per_channel": 1}, r"per_channel=1: must be True or False"),
        ({"quantize": "8a8w", "calibration": [0], "quantize_ops": {"sofmax": "float"}}, r"unknown op kind 'sofmax'; use one of conv,"),
        ({"quantize": "8a8w", "calibration": [0], "quantize_ops": ["softmax"]}, r"quantize_ops=\['softmax'\]: give a dict"),
        ({"quantize": "8a8w", "calibration": [0], "quantize_modules": {"fc": "8bit"}}, r"quantize_modules\['fc'\]='8bit'"),
        ({"quantize": "8a8w", "calibration": [0], "device": "gpu"}, r"compiles for the NPU"),
        ({"quantize": "8a8w", "calibration": lambda forward: None, "kv_cache": True}, r"calibrates on text"),
        ({"quantize": "8a8w", "calibration": [0], "kv_cache": True, "kv_cache_bits": 4}, r"kv_cache_bits=4: use 8 or 16"),
        ({"quantize": "8a8w", "calibration": [0], "kv_cache": True, "kv_cache_bits": 16, "kv_cache_rotation": True},
         r"kv_cache_rotation rotates the 8-bit KV cache"),
        ({"quantize": "8a8w", "calibration": [0], "kv_cache_rotation": True}, r"use it with kv_cache=True"),
        ({"quantize": "8a8w", "calibration": [0], "kv_cache": True, "kv_cache_rotation": 1}, r"kv_cache_rotation=1: use True, False or None"),
        ({"quantize": "8a8w", "calibration": [0], "tokenizer": str}, r"tokenizer: .* also pass kv_cache=True"),
        ({"calibration": [0], "observer": "histogram"}, r"calibration, observer: used only for a quantized graph"),
    ],
)
def test_bad_quantize_options_say_what_to_change(bad, message):
    with pytest.raises(ValueError, match=message):
        parse_options(bad)


@pytest.mark.parametrize(
    "target, scheme, matmul_16x8",
    [
        ({"soc_model": "QCS6490"}, "16a8w", True),
        ({"htp_arch": 68}, "16a16w", True),
        ({"soc_model": "QCS6490"}, "8a8w", False),
        ({"soc_model": 60}, "16a8w", False),
        ({}, "16a8w", False),
    ],
)
def test_the_target_arch_reaches_the_quantizer(target, scheme, matmul_16x8):
    s = parse_options({"quantize": scheme, "calibration": [0], **target})
    cfg = s.quantize_config()
    assert cfg.matmul_16x8(cfg.scheme) is matmul_16x8


def test_the_0_4_option_types_name_every_option():
    # qnnx_backend.options held 0.4's TypedDicts; QNNRouterCompileOptions lists every option
    # qnnx takes (so annotated code type-checks), and nothing parse_options refuses.
    from qnnx_backend.options import QNNCompileOptions, QNNRouterCompileOptions
    from qnnx_backend.settings import VALID_OPTIONS

    assert set(QNNCompileOptions.__annotations__) == {"device", "strict", "fp16", "cache", "cache_dir", "kv_cache"}
    keys = set(QNNRouterCompileOptions.__annotations__) | set(QNNCompileOptions.__annotations__)
    assert keys - {"dynamic"} == set(VALID_OPTIONS), keys ^ set(VALID_OPTIONS)


def test_the_native_spec_is_built_from_the_settings(tmp_path):
    s = parse_options({"device": "auto", "soc_model": "QCS6490", "fp16": True, "opt_level": 2})
    npu, gpu = s.spec("npu"), s.spec("gpu")
    assert (npu.device, npu.soc_model, npu.htp_arch, npu.arch) == ("npu", 35, None, 68)
    assert (npu.fp16, npu.opt_level, npu.cache_dir) == (True, 2, None)
    # The SoC and arch configure the HTP; the GPU after it is opened with its defaults.
    assert (gpu.device, gpu.soc_model, gpu.htp_arch, gpu.fp16) == ("gpu", None, None, True)
    cached = parse_options({"cache": True, "cache_dir": tmp_path})
    assert cached.spec("npu").cache_dir == str(tmp_path) and cached.spec("npu", cached=False).cache_dir is None
    # No SoC asked for: none is reported, though the target compiles for the host's default.
    default = parse_options(None).spec("npu")
    assert default.soc_model is None and default.arch is not None
    with pytest.raises(ValueError, match="SM9999"):
        qnnx_backend._native.Spec("npu", "SM9999")


def test_quantization_schemes_and_fixed_encodings_are_the_engines():
    from qnnx_backend import _native
    from qnnx_backend.quantization import config

    assert [(s.name, s.act_bits, s.weight_bits) for s in config.SCHEMES.values()] == _native.quant_schemes()
    assert list(config.SCHEMES) == ["8a8w", "16a8w", "16a16w", "16a4w"]
    # QNN's fixed 16-bit output encodings: Sigmoid [0, 1), Tanh [-1, 1) over the uint16 range.
    assert config.FIXED_U16 == {"Sigmoid": (1 / 65536, 0), "Tanh": (1 / 32768, 32768)}


@pytest.mark.parametrize(
    "options, headroom",
    [
        ({}, 1.0),
        ({"kv_cache": True}, 2.0),
        ({"kv_cache": True, "activation_headroom": 1}, 1.0),
        ({"activation_headroom": 3}, 3.0),
    ],
)
def test_16_bit_headroom_defaults_to_2_for_kv_cache_graphs_only(options, headroom):
    """KV-cache graphs meet activations their calibration text never reached (2: one bit spent);
    elsewhere the bit costs accuracy (docs/quantization.md, "Headroom")."""
    s = parse_options({"quantize": "16a8w", "calibration": [0], **options})
    assert s.quantize_config().headroom == headroom
    # The warm-start fingerprint tells them apart; without headroom it is what it was before.
    assert ("headroom" in s.quantize_config().describe()) == (headroom != 1.0)


def test_a_bad_headroom_names_the_option():
    with pytest.raises(ValueError, match="activation_headroom=0.5"):
        parse_options({"quantize": "16a8w", "calibration": [0], "activation_headroom": 0.5})
