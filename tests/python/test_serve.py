"""`qnnx serve` on the emulated HTP, through the official `openai` client: chat, completions and
streaming give `qnnx generate`'s tokens for the same options, bad requests get OpenAI-style
4xx errors and the server keeps serving, and short versions of bench/serve_load.py's load,
soak, killed-client and SIGTERM runs (the long ones are the benchmark's). The artifact is the
tiny one of test_llm_artifact.py (tests/models/common/tiny_llm.py)."""

import http.client
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import serve_load  # noqa: E402
from test_llm_artifact import qnnx_binary  # noqa: E402

KEY = "test-key"
pytestmark = pytest.mark.htp


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    return serve_load.build_tiny_artifact(tmp_path_factory.mktemp("serve") / "tiny")


@pytest.fixture(scope="module")
def server(artifact):
    with serve_load.Server(qnnx_binary(), artifact, "--queue", "4", "--max-body", "100000", api_key=KEY) as s:
        yield s
        assert s.stop() == 0, "".join(s.log)
    assert "panicked" not in "".join(s.log)


def generate(artifact, *args) -> dict:
    r = subprocess.run([str(qnnx_binary()), "--json", "generate", str(artifact), *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


SAMPLED = {"temperature": 1.0, "top_p": 0.9, "seed": 7}


@pytest.mark.parametrize("options", [{"temperature": 0}, SAMPLED], ids=["greedy", "seeded"])
def test_chat_gives_the_tokens_of_qnnx_generate(server, artifact, options):
    client = server.client()
    r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello world"}], max_tokens=10, **options)
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
    want = generate(artifact, "--chat", "hello world", "--max-new-tokens", "10", *flags)
    assert r.model_extra["qnnx"]["tokens"] == want["tokens"]
    assert r.choices[0].message.content == want["text"] and r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason == ("length" if want["stop"] == "max_tokens" else "stop")
    assert r.usage.prompt_tokens == len(want["prompt_tokens"]) and r.usage.completion_tokens == len(want["tokens"])
    assert r.object == "chat.completion" and r.model == "tiny"


def test_completion_and_stop_string_give_the_tokens_of_qnnx_generate(server, artifact):
    client = server.client()
    r = client.completions.create(model="tiny", prompt="the quick brown fox", max_tokens=12, temperature=0)
    want = generate(artifact, "--prompt", "the quick brown fox", "--max-new-tokens", "12")
    assert r.model_extra["qnnx"]["tokens"] == want["tokens"] and r.choices[0].text == want["text"]
    # A stop string from inside that text ends it there, as `qnnx generate --stop` does.
    text = want["text"]
    stop = next(text[i : i + 2] for i in range(1, len(text) - 1) if "\ufffd" not in text[i : i + 2] and text[i : i + 2] not in text[:i])
    r = client.completions.create(model="tiny", prompt="the quick brown fox", max_tokens=12, temperature=0, stop=[stop])
    want = generate(artifact, "--prompt", "the quick brown fox", "--max-new-tokens", "12", "--stop", stop)
    assert r.choices[0].finish_reason == "stop" and want["stop"] == "stop_string"
    assert r.choices[0].text == want["text"] == text[: text.index(stop)]


def test_streaming_gives_the_text_of_the_plain_response(server):
    client = server.client()
    args = dict(model="tiny", messages=[{"role": "user", "content": "the lazy dog"}], max_tokens=12, temperature=0)
    plain = client.chat.completions.create(**args)
    chunks = list(client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    last = [c for c in chunks if c.choices][-1]
    assert last.choices[0].finish_reason == plain.choices[0].finish_reason
    assert last.model_extra["qnnx"]["tokens"] == plain.model_extra["qnnx"]["tokens"]
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == plain.usage.total_tokens
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    streamed = list(client.completions.create(model="tiny", prompt="hello", max_tokens=6, temperature=0, stream=True))
    plain = client.completions.create(model="tiny", prompt="hello", max_tokens=6, temperature=0)
    assert "".join(c.choices[0].text for c in streamed) == plain.choices[0].text


def test_models_and_health(server):
    assert [m.id for m in server.client().models.list()] == ["tiny"]
    status, _, body = server.request("GET", "/health")
    assert status == 200 and body["status"] == "ok" and body["queue"]["capacity"] == 4
    assert server.request("GET", "/v1/models/tiny")[0] == 200
    assert server.request("GET", "/v1/models/other")[2]["error"]["code"] == "model_not_found"


def error_of(server, method, path, body, headers=None):
    status, _, parsed = server.request(method, path, body, headers)
    assert isinstance(parsed, dict) and set(parsed["error"]) == {"message", "type", "param", "code"}, parsed
    return status, parsed["error"]


def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(server):
    client = server.client()
    chat = dict(model="tiny", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="empty"):
        client.chat.completions.create(model="tiny", messages=[])
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(**chat, max_tokens=1000)
    assert e.value.code == "context_length_exceeded" and "exceed the cache of 64" in str(e.value)
    with pytest.raises(openai.BadRequestError, match="'temperature' must be a number, not a string"):
        client.chat.completions.create(**chat, temperature="hot")
    with pytest.raises(openai.BadRequestError, match="'n' must be 1"):
        client.chat.completions.create(**chat, n=2)
    with pytest.raises(openai.BadRequestError, match="top_p"):
        client.completions.create(model="tiny", prompt="hi", top_p=0)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).models.list()
    for body, says in [
        (b'{"messages": [', "not valid JSON"),
        (b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', "not UTF-8"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": "5"}', "'max_tokens' must be a non-negative integer"),
    ]:
        status, err = error_of(server, "POST", "/v1/chat/completions", body)
        assert status == 400 and says in err["message"] and err["type"] == "invalid_request_error", (body, err)
    status, err = error_of(server, "POST", "/v1/completions", json.dumps({"prompt": "x" * 200_000}).encode())
    assert status == 413 and "100000 bytes" in err["message"]
    assert error_of(server, "GET", "/v1/chat/completions", None)[0] == 405
    assert error_of(server, "GET", "/v2/nothing", None)[0] == 404
    assert error_of(server, "GET", "/health", None, {"Authorization": "Bearer nope"})[0] == 401
    # Still serving.
    assert client.chat.completions.create(**chat, max_tokens=2, temperature=0).usage.completion_tokens >= 1
    assert server.proc.poll() is None


@pytest.fixture(scope="module")
def expected(server):
    return serve_load.reference(server, serve_load.prompts(6), 3)


def test_load_every_request_answered_none_lost_or_mixed_up(artifact, expected):
    """Short load: 6 clients, 24 requests, a queue of 1: some attempts must be refused with 429
    and a Retry-After (the clients wait it and ask again); every request ends answered with the
    tokens its prompt gives alone."""
    assert len({tuple(v) for v in expected.values()}) >= 4, "prompts must differ in their answers to see mix-ups"
    with serve_load.Server(qnnx_binary(), artifact, "--queue", "1", api_key=KEY) as s:
        r = serve_load.load(s, expected, clients=6, requests=24, max_tokens=3, time_limit_s=300)
        assert s.stop() == 0
    assert r.errors == [] and r.mixed_up == 0, r.summary()
    assert r.answered == 24 and r.gave_up == 0 and r.refusals >= 1, r.summary()
    assert all(x >= 1 for x in r.retry_after), r.retry_after


def test_soak_short_memory_and_answers(server, expected):
    out = serve_load.soak(server, expected, requests=60, max_tokens=3, clients=3)
    assert out["lost_or_failed"] == 0 and out["mixed_up"] == 0 and out["answered"] == 60, out
    # Loose on 60 requests (allocator noise); bench/serve_load.py measures 1,000.
    assert out["rss_end_mb"] - out["rss_start_mb"] < 20, out


def test_a_client_killed_mid_stream_frees_the_npu(server, expected):
    out = serve_load.kill_mid_stream(server, kills=2, max_tokens=48, expected=expected)
    assert out["cancelled"] == 2, out
    assert max(out["npu_free_after_kill_ms"]) < 5000, out


@pytest.mark.parametrize("grace, twice, ending", [(30.0, False, "done"), (0.3, False, "error"), (30.0, True, "error")])
def test_sigterm_mid_request_ends_requests_cleanly_and_exits(artifact, grace, twice, ending):
    out = serve_load.sigterm_mid_request(qnnx_binary(), artifact, grace_s=grace, max_tokens=55, waiting=2, twice=twice)
    assert out["exit_code"] == 0 and out["streaming_request"] == ending, out
    assert out["exit_s"] < 20, out
    assert out["waiting_statuses"] == [503, 503] and out["waiting_codes"] == ["shutting_down"] * 2, out


def test_a_plain_request_whose_client_goes_away_is_cancelled_waiting_or_running(server, expected):
    """Not streamed: a client that closes its connection before the answer cancels its request,
    whether it runs (stopped before its end) or waits (it leaves the queue at once)."""
    serve_load.wait_idle(server)
    before = server.health()["queue"]["requests"]
    body = json.dumps({"prompt": "the quick brown fox", "max_tokens": 55, "temperature": 0})
    conns = []
    for _ in range(2):
        c = http.client.HTTPConnection(*server.host_port, timeout=60)
        c.request("POST", "/v1/completions", body=body, headers={"Authorization": f"Bearer {KEY}"})
        conns.append(c)
    t0 = time.monotonic()
    while server.health()["queue"]["waiting"] < 1 and time.monotonic() - t0 < 30:
        time.sleep(0.01)
    q = server.health()["queue"]
    assert q["running"] and q["waiting"] == 1, q
    conns[1].close()  # the waiting one
    t0 = time.monotonic()
    while server.health()["queue"]["waiting"] and time.monotonic() - t0 < 5:
        time.sleep(0.01)
    q = server.health()["queue"]
    assert q["waiting"] == 0 and q["running"], q
    conns[0].close()  # the running one
    serve_load.wait_idle(server, timeout=10)
    after = server.health()["queue"]["requests"]
    assert after["cancelled"] - before["cancelled"] == 2, (before, after)
    assert after["tokens"] - before["tokens"] < 55 and after["completed"] == before["completed"], (before, after)
    text = next(iter(expected))
    assert serve_load.complete(server.client(), text, len(expected[text])) == expected[text]
