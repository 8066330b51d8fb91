"""LLM artifacts (``python -m qnnx_backend.llm build``) run by ``qnnx generate`` on the emulated
HTP: greedy tokens equal eager PyTorch's, the chat template renders as transformers does,
seeded sampling repeats, and damaged or foreign artifacts are refused with a message (exit 1 or
2, never a panic). The model and tokenizer are tests/models/common/tiny_llm.py's (no
downloads); building the artifact takes a few seconds. engine/tests/llm_htp.rs runs the same
artifact through the Rust API."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models" / "common"))
import decoders  # noqa: E402
import tiny_llm  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CACHE_LEN = 64
PREFILL = 16
NEW_TOKENS = 16


def qnnx_binary() -> Path:
    """The `qnnx` command of this tree: $QNNX_BIN, else the newer of target/{release,debug}/qnnx
    (``cargo test`` builds the debug one)."""
    if os.environ.get("QNNX_BIN"):
        return Path(os.environ["QNNX_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    found = [p for p in (target / "release" / "qnnx", target / "debug" / "qnnx") if p.exists()]
    if not found:
        pytest.skip("no qnnx binary: cargo build -p qnnx-cli (or set QNNX_BIN)")
    return max(found, key=lambda p: p.stat().st_mtime)


def qnnx(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(qnnx_binary()), *args], capture_output=True, text=True, timeout=300)


def generate_json(artifact: Path, *args: str) -> dict:
    r = qnnx("--json", "generate", str(artifact), *args)
    assert r.returncode == 0, r.stderr + r.stdout
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from qnnx_backend.llm import build

    model, tok = tiny_llm.model(), tiny_llm.tokenizer()
    out = tmp_path_factory.mktemp("llm") / "tiny"
    manifest = build.build_from(model, tok, out, soc_model=60, cache_len=CACHE_LEN, prefill=[PREFILL])
    return model, tok, out, manifest


def test_manifest_describes_the_artifact(built):
    _, _, out, m = built
    assert m["format"] == "qnnx-llm/1"
    assert m["model"]["layers"] == 2 and m["model"]["kv_heads"] == 2 and m["model"]["head_dim"] == 16
    assert m["cache"] == {**m["cache"], "length": CACHE_LEN, "dtype": "f32", "encoding": None}
    assert [g["name"] for g in m["graphs"]] == ["decode", f"prefill-{PREFILL}"]
    assert m["target"]["soc_model"] == 60 and m["target"]["qnn_build_id"].startswith("v")
    assert m["tokens"]["stop"] == [1]
    for name, f in m["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == f["sha256"]
    r = qnnx("inspect", str(out))
    assert r.returncode == 0 and "LLM artifact" in r.stdout and "graph prefill-16 (prefill, 16 tokens)" in r.stdout


@pytest.mark.htp
@pytest.mark.parametrize("prompt_len", [5, 21])  # one prefill chunk; two (16 + 5)
def test_greedy_tokens_equal_eager(built, prompt_len):
    model, tok, out, _ = built
    ids = torch.randint(2, 300, (prompt_len,), generator=torch.Generator().manual_seed(prompt_len)).tolist()
    text = tok.decode(ids)
    want_ids = tok(text)["input_ids"]
    got = generate_json(out, "--prompt", text, "--max-new-tokens", str(NEW_TOKENS))
    assert got["prompt_tokens"] == want_ids, "the Rust tokenizer disagrees with transformers'"
    want = tiny_llm.eager_greedy(model, want_ids, NEW_TOKENS)
    assert len(set(want)) > 3, f"degenerate reference {want}"
    # Stop token 1 may come first; up to it the tokens are eager's.
    assert got["tokens"] == want[: len(got["tokens"])]
    assert got["stop"] == "max_tokens" or want[len(got["tokens"])] == 1
    assert got["prefill_chunks"] == -(-len(want_ids) // PREFILL)
    assert (len(want_ids) > PREFILL) == (prompt_len > PREFILL), "the prompt should take the chunks named"


@pytest.mark.htp
def test_a_rotated_artifact_generates_the_models_tokens(tmp_path):
    """``rotate=True`` (``--rotate``): the artifact holds the rotated weights (``rotate_decoder``)
    and generates the unrotated model's greedy tokens; a family the rotation does not commute
    with is refused before anything is written or changed."""
    import copy

    from qnnx_backend.llm import build

    model, tok = tiny_llm.model(), tiny_llm.tokenizer()
    text = "the quick brown fox jumps over"
    ids = tok(text)["input_ids"]
    want = tiny_llm.eager_greedy(model, ids, NEW_TOKENS)
    assert len(set(want)) > 3, f"degenerate reference {want}"
    rotated = copy.deepcopy(model)
    m = build.build_from(rotated, tok, tmp_path / "rot", soc_model=60, cache_len=CACHE_LEN, prefill=[PREFILL], rotate=True)
    assert m["rotation"] == {"residual": "hadamard", "hidden": 64, "value_heads": "hadamard", "seed": 0}
    assert not torch.equal(rotated.model.embed_tokens.weight, model.model.embed_tokens.weight)
    got = generate_json(tmp_path / "rot", "--prompt", text, "--max-new-tokens", str(NEW_TOKENS))
    assert got["prompt_tokens"] == ids
    assert got["tokens"] == want[: len(got["tokens"])] and len(got["tokens"]) > 3

    gemma = decoders.build("gemma", hidden=64, layers=1, vocab=512, max_positions=64)
    before = {n: p.detach().clone() for n, p in gemma.named_parameters()}
    with pytest.raises(ValueError, match="'gemma' is not supported"):
        build.build_from(gemma, tok, tmp_path / "g", cache_len=32, prefill=[8], rotate=True)
    assert not (tmp_path / "g").exists() and not (tmp_path / "g.partial").exists()
    assert all(torch.equal(p, before[n]) for n, p in gemma.named_parameters())


@pytest.mark.htp
def test_chat_prompt_is_the_transformers_template(built):
    _, tok, out, _ = built
    got = generate_json(out, "--chat", " hello world ", "--system", "be brief", "--max-new-tokens", "2")
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": " hello world "}]
    want = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    want = want["input_ids"] if isinstance(want, dict) or hasattr(want, "keys") else want
    assert got["prompt_tokens"] == list(want)


@pytest.mark.htp
def test_seeded_sampling_repeats(built):
    _, _, out, _ = built
    args = ["--prompt", "the lazy dog", "--max-new-tokens", "12", "--temperature", "1.0", "--top-k", "50", "--top-p", "0.95"]
    a = generate_json(out, *args, "--seed", "7")
    b = generate_json(out, *args, "--seed", "7")
    c = generate_json(out, *args, "--seed", "8")
    greedy = generate_json(out, "--prompt", "the lazy dog", "--max-new-tokens", "12")
    assert a["tokens"] == b["tokens"]
    assert a["tokens"] != c["tokens"] or a["tokens"] != greedy["tokens"]


def copy(built, tmp_path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(built[2], dst)
    return dst


def refused(artifact: Path, *args: str, code: int = 1) -> str:
    r = qnnx("generate", str(artifact), *args)
    assert r.returncode == code, r.stdout + r.stderr
    assert "panicked" not in r.stderr
    return r.stderr


def test_a_flipped_byte_is_refused_before_qnn(built, tmp_path):
    a = copy(built, tmp_path)
    data = bytearray((a / "decode.qnnx").read_bytes())
    data[len(data) // 2] ^= 1
    (a / "decode.qnnx").write_bytes(bytes(data))
    assert "decode.qnnx: sha256" in refused(a, "--prompt", "hi")


@pytest.mark.parametrize("damage", ["truncated", "missing tokenizer", "missing manifest"])
def test_truncated_and_missing_files_are_refused(built, tmp_path, damage):
    a = copy(built, tmp_path)
    if damage == "truncated":
        with open(a / f"prefill-{PREFILL}.qnnx", "r+b") as f:
            f.truncate(1000)
        assert "truncated" in refused(a, "--prompt", "hi")
    elif damage == "missing tokenizer":
        (a / "tokenizer.json").unlink()
        assert "tokenizer.json: No such file" in refused(a, "--prompt", "hi")
    else:
        (a / "manifest.json").unlink()
        assert "cannot read manifest.json" in refused(a, "--prompt", "hi")


def test_another_soc_or_qnn_build_is_refused(built, tmp_path):
    assert "built for SoC" in refused(built[2], "--prompt", "hi", "--soc", "SM8650")
    a = copy(built, tmp_path)
    m = json.loads((a / "manifest.json").read_text())
    m["target"]["qnn_build_id"] = "v9.99.0.999999999999"
    (a / "manifest.json").write_text(json.dumps(m))
    err = refused(a, "--prompt", "hi")
    assert "built with QNN v9.99.0" in err and "newer" in err


def test_a_tokenizer_of_another_model_is_refused(built, tmp_path):
    a = copy(built, tmp_path)
    words = tokenizers.Tokenizer(tokenizers.models.WordLevel({f"w{i}": i for i in range(1000)}, unk_token="w0"))
    words.save(str(a / "tokenizer.json"))
    m = json.loads((a / "manifest.json").read_text())
    data = (a / "tokenizer.json").read_bytes()
    m["files"]["tokenizer.json"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (a / "manifest.json").write_text(json.dumps(m))
    assert "not this model's" in refused(a, "--prompt", "hi")


def test_bad_requests_are_refused(built):
    out = built[2]
    assert "exceed the cache of 64" in refused(out, "--prompt", "the quick brown fox", "--max-new-tokens", "80")
    assert "empty" in refused(out, "--prompt", "", code=2)
    assert "top_p" in refused(out, "--prompt", "hi", "--top-p", "0", code=2)
    assert "folder" in refused(out / "decode.qnnx", "--prompt", "hi")


def test_a_failed_build_keeps_the_artifact_there_and_leaves_no_work_folder(built, tmp_path, monkeypatch):
    """A build stopped midway (Ctrl-C while the first prefill graph is exported, after the decode
    graph compiled) raises; the artifact already at the output is untouched and the work folder
    is gone."""
    from qnnx_backend.llm import build

    model, tok, _, _ = built
    a = copy(built, tmp_path)
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in a.iterdir()}
    steps = []
    real = build.export.DecoderStep

    def interrupted(model, cache_len, tokens):
        steps.append(tokens)
        if tokens > 1:
            assert (tmp_path / "copy.partial" / "decode.qnnx").exists()  # midway: one graph written
            raise KeyboardInterrupt
        return real(model, cache_len, tokens)

    monkeypatch.setattr(build.export, "DecoderStep", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build.build_from(model, tok, a, cache_len=CACHE_LEN, prefill=[PREFILL])
    assert steps == [1, PREFILL]
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in a.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy"]  # no copy.partial


def test_refusals_come_before_any_folder_or_export(built, tmp_path):
    """Options that cannot build are refused at once, naming the fix, before a folder is made or
    a graph exported: an fp16 artifact for a v68 HTP (SoC 35, no float path), options that do not
    go together."""
    from qnnx_backend.llm import build

    model, tok, _, _ = built
    with pytest.raises(ValueError, match="no float path") as e:
        build.build_from(model, tok, tmp_path / "v68", soc_model=35, cache_len=CACHE_LEN, prefill=[PREFILL])
    assert "--quantize 16a8w --calibration" in str(e.value) and "QCS6490" in str(e.value), e.value
    with pytest.raises(ValueError, match="per-graph contexts, not 'one'"):
        build.build_from(model, tok, tmp_path / "s", cache_len=CACHE_LEN, prefill=[PREFILL], contexts="one", shards=2)
    assert list(tmp_path.iterdir()) == []


def test_the_command_builds_from_a_pretrained_folder(tmp_path):
    """``python -m qnnx_backend.llm build FOLDER`` (``load_source`` reads it offline), and its
    refusals: an unsupported family, prefill buckets that do not fit the cache, a folder that is
    not an artifact as the output."""
    from qnnx_backend.llm import build

    src = tmp_path / "hf"
    model, tok = tiny_llm.model(), tiny_llm.tokenizer()
    model.save_pretrained(src)
    tok.save_pretrained(src)
    out = tmp_path / "art"
    cmd = [sys.executable, "-m", "qnnx_backend.llm", "build", str(src), "-o", str(out), "--cache-len", "48", "--prefill", "8,16",
           "--opt-level", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["prefill_buckets"] == [8, 16] and m["cache"]["length"] == 48
    assert "shards" not in m  # --opt-level alone builds in this process, not in children
    assert m["source"] == str(src) and m["chat_template"] == "chat_template.jinja"
    with pytest.raises(ValueError, match="must exceed the longest prefill bucket"):
        build.build_from(model, tok, tmp_path / "x", cache_len=16, prefill=[16])
    with pytest.raises(ValueError, match="at least one length"):
        build.build_from(model, tok, tmp_path / "x", prefill=[])
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not an LLM artifact"):
        build.build_from(model, tok, tmp_path / "busy")
    gpt2 = decoders.build("gpt2", hidden=64, layers=1, vocab=512, max_positions=64)
    with pytest.raises(ValueError, match="model type 'gpt2' is not supported"):
        build.build_from(gpt2, tok, tmp_path / "x")
    r = subprocess.run([sys.executable, "-m", "qnnx_backend.llm", "build", str(tmp_path / "nothing"), "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 1 and "no such file or folder" in r.stderr


@pytest.mark.htp
def test_the_python_session_gives_the_tokens_of_qnnx_generate_without_torch(built, tmp_path):
    """``qnnx_backend.llm.session`` runs the Rust loop: the same options give `qnnx generate`'s
    tokens, pieces stream to a callback, errors are the package's exceptions; torch is never
    imported."""
    out = built[2]
    code = f"""
import json, sys
from qnnx_backend.exceptions import InputError, SavedModelError
from qnnx_backend.llm.session import LlmSession
s = LlmSession({str(out)!r})
pieces = []
raw = s.generate("the quick brown fox", max_new_tokens=12, on_text=pieces.append)
assert "".join(pieces) == raw["text"], (pieces, raw["text"])
chat = s.generate(messages=[{{"role": "user", "content": "hello"}}], max_new_tokens=4, temperature=1.0, seed=3)
try:
    s.generate("the quick brown fox", max_new_tokens=80)
    raise AssertionError("no InputError")
except InputError as e:
    assert "exceed the cache" in str(e)
try:
    LlmSession({str(out)!r}, soc_model=57)
    raise AssertionError("no SavedModelError")
except SavedModelError as e:
    assert "built for SoC" in str(e)
stopped = s.generate("the quick brown fox", max_new_tokens=12, on_text=lambda p: False)
print(json.dumps([raw["tokens"], chat["tokens"], stopped["stop"], "torch" in sys.modules]))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    raw, chat, stopped, torch_imported = json.loads(r.stdout.splitlines()[-1])
    assert not torch_imported
    assert raw == generate_json(out, "--prompt", "the quick brown fox", "--max-new-tokens", "12")["tokens"]
    want = generate_json(out, "--chat", "hello", "--max-new-tokens", "4", "--temperature", "1.0", "--seed", "3")
    assert chat == want["tokens"]
    assert stopped == "cancelled"


@pytest.mark.htp
def test_graphs_in_one_context_and_with_shared_weights(built, tmp_path):
    """``contexts="one"`` puts every graph in one context (``model.qnnx``) and gives the same
    tokens; ``shared`` stores the weights once, which the x86_64 emulator refuses to load with a
    hint (a device library loads it)."""
    from qnnx_backend.llm import build

    model, tok, per_graph, _ = built
    args = ["--prompt", "the quick brown fox", "--max-new-tokens", "12"]
    want = generate_json(per_graph, *args)["tokens"]
    sizes = {}
    for contexts in ("one", "shared"):
        out = tmp_path / contexts
        m = build.build_from(model, tok, out, cache_len=CACHE_LEN, prefill=[PREFILL], contexts=contexts)
        assert {g["file"] for g in m["graphs"]} == {"model.qnnx"} and m["contexts"] == contexts
        sizes[contexts] = m["files"]["model.qnnx"]["size"]
    assert generate_json(tmp_path / "one", *args)["tokens"] == want
    assert sizes["shared"] < 0.8 * sizes["one"], sizes
    assert "--contexts one or per-graph" in refused(tmp_path / "shared", *args)
