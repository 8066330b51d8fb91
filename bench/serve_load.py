"""`qnnx serve` under load and faults, with the official `openai` client on the loopback
interface: a bounded load test (concurrent clients, every request answered or refused with 429,
none lost or mixed up, p50/p95 latency, throughput), a soak (resident memory of the server at
start and end), clients killed mid-stream (the NPU freed at once), and SIGTERM mid-request (the
running request finishes or fails cleanly, the waiting ones get 503, the process exits 0).

    python3 bench/serve_load.py                       # the tiny test artifact, about 10 min
    python3 bench/serve_load.py --clients 16 --requests 320 --soak 1000 --kills 5

writes bench/results/serve_load.{json,md}. The model is tests/models/common/tiny_llm.py's
(built into an artifact here, nothing downloaded) unless --artifact names one; requests are
short (--max-tokens 4) so that the emulator gets through hundreds in minutes.
tests/python/test_serve.py runs each part at a small size with the functions of this file.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import openai

import common
from common import qnnx_binary

ROOT = Path(__file__).resolve().parents[1]
PROMPT_WORDS = "the quick brown fox jumps over lazy dog hello world this is a tiny tokenizer for tests".split()


def build_tiny_artifact(out: Path, cache_len: int = 64, prefill: int = 16) -> Path:
    """The artifact of the artifact tests (tests/python/test_llm_artifact.py): the tiny random
    Llama-style decoder and tokenizer of tests/models/common/tiny_llm.py, fp16 on SoC 60."""
    sys.path.insert(0, str(ROOT / "tests" / "models" / "common"))
    import tiny_llm
    from qnnx_backend.llm import build

    if not (out / "manifest.json").exists():
        build.build_from(tiny_llm.model(), tiny_llm.tokenizer(), out, soc_model=60, cache_len=cache_len, prefill=[prefill])
    return out


class Server:
    """A `qnnx serve` process on a free port; its stderr is collected in `log`."""

    def __init__(self, qnnx: Path, artifact: Path, *args: str, api_key: str | None = None):
        env = dict(os.environ)
        env.pop("QNNX_API_KEY", None)
        if api_key:
            env["QNNX_API_KEY"] = api_key
        self.api_key = api_key or "none"
        self.proc = subprocess.Popen(
            [str(qnnx), "serve", str(artifact), "--port", "0", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.log: list[str] = []
        self._up = threading.Event()
        self.url = ""
        threading.Thread(target=self._read, daemon=True).start()
        if not self._up.wait(120) or not self.url:
            self.proc.kill()
            raise RuntimeError("qnnx serve did not start:\n" + "".join(self.log))

    def _read(self):
        for line in self.proc.stderr:
            self.log.append(line)
            if not self.url and " on http://" in line:
                self.url = line.split(" on ")[1].split()[0].removesuffix("/v1")
                self._up.set()
        self._up.set()

    @property
    def host_port(self) -> tuple[str, int]:
        host, port = self.url.removeprefix("http://").split(":")
        return host, int(port)

    def client(self, timeout: float = 120) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=self.api_key, max_retries=0, timeout=timeout)

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
        """A raw request: (status, headers, parsed JSON or text)."""
        c = http.client.HTTPConnection(*self.host_port, timeout=60)
        h = {"Authorization": f"Bearer {self.api_key}", "Content-Type": "application/json", **(headers or {})}
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = data.decode(errors="replace")
        return r.status, dict(r.getheaders()), parsed

    def health(self) -> dict:
        return self.request("GET", "/health")[2]

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def stop(self, sig=signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def prompts(n: int) -> list[str]:
    """n distinct short prompts (two or three words)."""
    w = PROMPT_WORDS
    out = []
    for i in range(n):
        out.append(f"{w[i % len(w)]} {w[(3 * i + 1) % len(w)]}" + (f" {w[(7 * i + 2) % len(w)]}" if i >= len(w) else ""))
    return out


def complete(client: openai.OpenAI, prompt: str, max_tokens: int) -> list[int]:
    r = client.completions.create(model="m", prompt=prompt, max_tokens=max_tokens, temperature=0)
    return r.model_extra["qnnx"]["tokens"]


def reference(server: Server, texts: list[str], max_tokens: int) -> dict[str, list[int]]:
    """Each prompt's greedy tokens, asked alone (no other request in flight)."""
    c = server.client()
    return {t: complete(c, t, max_tokens) for t in texts}


def percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


@dataclass
class LoadResult:
    clients: int
    requests: int
    answered: int = 0
    refusals: int = 0
    gave_up: int = 0
    errors: list[str] = field(default_factory=list)
    mixed_up: int = 0
    retry_after: list[int] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    end_to_end_ms: list[float] = field(default_factory=list)
    tokens: int = 0
    wall_s: float = 0.0

    def add(self, o: "LoadResult"):
        for k in ("requests", "answered", "refusals", "gave_up", "mixed_up", "tokens", "wall_s"):
            setattr(self, k, getattr(self, k) + getattr(o, k))
        for k in ("errors", "retry_after", "latencies_ms", "end_to_end_ms"):
            getattr(self, k).extend(getattr(o, k))

    def summary(self) -> dict:
        lat, e2e = self.latencies_ms, self.end_to_end_ms
        return {
            "clients": self.clients,
            "requests": self.requests,
            "answered": self.answered,
            "refusals_429": self.refusals,
            "gave_up_after_429s": self.gave_up,
            "lost_or_failed": len(self.errors),
            "mixed_up": self.mixed_up,
            "retry_after_s": sorted(set(self.retry_after)),
            "p50_ms": percentile(lat, 0.5),
            "p95_ms": percentile(lat, 0.95),
            "end_to_end_p50_ms": percentile(e2e, 0.5),
            "end_to_end_p95_ms": percentile(e2e, 0.95),
            "wall_s": self.wall_s,
            "answered_per_s": self.answered / self.wall_s if self.wall_s else None,
            "tokens_per_s": self.tokens / self.wall_s if self.wall_s else None,
            "errors": self.errors[:5],
        }


def load(
    server: Server,
    expected: dict[str, list[int]],
    clients: int,
    requests: int,
    max_tokens: int,
    time_limit_s: float = 1800,
    attempts: int = 20,
    max_wait_s: float | None = None,
) -> LoadResult:
    """`clients` threads share `requests` requests, each loop bounded in count and in time. Each
    request names a prompt whose tokens alone are known (`expected`) and must come back with
    exactly those; a 429 must carry a Retry-After, which the client waits (at most
    `max_wait_s`) before asking again, up to `attempts` times (then it gives up: counted apart
    from requests lost or failed, which are any other outcome). Latency is that of the attempt
    that was answered (queue wait and generation); end to end counts the 429s and waits too."""
    res = LoadResult(clients, requests)
    texts = list(expected)
    lock = threading.Lock()
    client = server.client()
    counter = iter(range(requests))
    stop_at = time.monotonic() + time_limit_s

    def worker():
        while time.monotonic() < stop_at:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            text = texts[i % len(texts)]
            first = time.monotonic()
            for _ in range(attempts):
                t0 = time.monotonic()
                try:
                    got = complete(client, text, max_tokens)
                except openai.RateLimitError as e:
                    wait = int(e.response.headers.get("retry-after", "-1"))
                    with lock:
                        res.refusals += 1
                        res.retry_after.append(wait)
                    time.sleep(max(0, min(wait, max_wait_s if max_wait_s is not None else wait)))
                    continue
                except openai.APIError as e:  # any other answer, or none: a lost request
                    with lock:
                        res.errors.append(f"{type(e).__name__}: {e}")
                    break
                now = time.monotonic()
                with lock:
                    res.answered += 1
                    res.latencies_ms.append((now - t0) * 1e3)
                    res.end_to_end_ms.append((now - first) * 1e3)
                    res.tokens += len(got)
                    if got != expected[text]:
                        res.mixed_up += 1
                break
            else:
                with lock:
                    res.gave_up += 1

    start = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    res.wall_s = time.monotonic() - start
    return res


def soak(server: Server, expected: dict[str, list[int]], requests: int, max_tokens: int, clients: int = 4) -> dict:
    """`requests` requests from `clients` threads after a warm-up; the server's resident memory
    before and after, and sampled along the way."""
    warm = load(server, expected, clients, 2 * clients, max_tokens)
    rss = [server.rss_mb()]
    res = LoadResult(clients, 0)
    step = max(requests // 10, 1)
    done = 0
    while done < requests:
        n = min(step, requests - done)
        res.add(load(server, expected, clients, n, max_tokens))
        done += n
        rss.append(server.rss_mb())
    out = res.summary()
    out.update(
        rss_start_mb=rss[0],
        rss_end_mb=rss[-1],
        rss_max_mb=max(rss),
        rss_samples_mb=[round(x, 1) for x in rss],
        warmup_answered=warm.answered,
    )
    return out


KILLED_CLIENT = r"""
import http.client, json, sys
host, port, key, body = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
c = http.client.HTTPConnection(host, port)
c.request("POST", "/v1/completions", body=body, headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
r = c.getresponse()
assert r.status == 200, r.status
while True:
    line = r.fp.readline()
    if line.startswith(b"data: ") and b'"text"' in line:
        print("streaming", flush=True)
        break
sys.stdin.read()  # wait to be killed
"""


def wait_idle(server: Server, timeout: float = 30) -> float:
    """Seconds until /health shows the NPU idle and nothing waiting."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        q = server.health()["queue"]
        if not q["running"] and q["waiting"] == 0:
            return time.monotonic() - t0
        time.sleep(0.01)
    raise TimeoutError(f"the server stayed busy for {timeout} s: {server.health()}")


def kill_mid_stream(server: Server, kills: int, max_tokens: int, expected: dict[str, list[int]]) -> dict:
    """`kills` times: a client process streams a long request, and is killed (SIGKILL) once the
    first text arrives; the request must be cancelled (not run to its end) and the NPU idle
    soon after; then a normal request must give its own tokens."""
    host, port = server.host_port
    text = next(iter(expected))
    freed, cancelled = [], 0
    for _ in range(kills):
        before = server.health()["queue"]["requests"]
        body = json.dumps({"prompt": "the quick brown fox", "max_tokens": max_tokens, "temperature": 0, "stream": True})
        p = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT, host, str(port), server.api_key, body], stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "streaming"
        p.kill()
        t0 = time.monotonic()
        p.wait()
        wait_idle(server)
        freed.append((time.monotonic() - t0) * 1e3)
        after = server.health()["queue"]["requests"]
        cancelled += after["cancelled"] - before["cancelled"]
        assert after["tokens"] - before["tokens"] < max_tokens, "the killed client's request ran to its end"
        assert complete(server.client(), text, len(expected[text])) == expected[text]
    return {"kills": kills, "cancelled": cancelled, "npu_free_after_kill_ms": [round(x, 1) for x in freed]}


def stream_events(server: Server, body: dict, first: threading.Event, out: dict):
    """Streams a completion with a raw connection; records every data line, whether [DONE]
    came, and how the connection ended."""
    host, port = server.host_port
    try:
        c = http.client.HTTPConnection(host, port, timeout=120)
        c.request("POST", "/v1/completions", body=json.dumps({**body, "stream": True}), headers={"Authorization": f"Bearer {server.api_key}"})
        r = c.getresponse()
        out["status"] = r.status
        events = out.setdefault("events", [])
        for line in r:
            if line.startswith(b"data: "):
                data = line[6:].strip().decode()
                events.append(data)
                first.set()
        out["ended"] = "closed"
    except (OSError, http.client.HTTPException) as e:
        out["ended"] = f"{type(e).__name__}: {e}"
    first.set()


def sigterm_mid_request(qnnx: Path, artifact: Path, grace_s: float, max_tokens: int, waiting: int = 2, twice: bool = False) -> dict:
    """A server with one request streaming and `waiting` more queued gets SIGTERM (`twice`: a
    second one 0.1 s later): the streaming one must end with [DONE] (within the grace) or with
    an error event (the grace ran out, or the second signal), never a cut connection without
    either; the waiting ones get 503; the process exits 0."""
    with Server(qnnx, artifact, "--shutdown-grace", str(grace_s), api_key="k") as s:
        first, out = threading.Event(), {}
        t = threading.Thread(target=stream_events, args=(s, {"prompt": "the quick brown fox", "max_tokens": max_tokens, "temperature": 0}, first, out))
        t.start()
        assert first.wait(60), out
        statuses = []
        queued = []
        for i in range(waiting):
            th = threading.Thread(target=lambda: statuses.append(s.request("POST", "/v1/completions", json.dumps({"prompt": "hello", "max_tokens": 2}).encode())))
            th.start()
            queued.append(th)
        t0 = time.monotonic()
        while s.health()["queue"]["waiting"] < waiting and time.monotonic() - t0 < 10:
            time.sleep(0.01)
        t0 = time.monotonic()
        if twice:
            s.proc.send_signal(signal.SIGTERM)
            time.sleep(0.1)
        code = s.stop(signal.SIGTERM)
        exit_s = time.monotonic() - t0
        t.join(30)
        for th in queued:
            th.join(30)
        events = out.get("events", [])
        last = events[-1] if events else ""
        ending = "done" if last == "[DONE]" else ("error" if last.startswith('{"error"') else "cut")
        return {
            "grace_s": grace_s,
            "signals": 2 if twice else 1,
            "exit_code": code,
            "exit_s": round(exit_s, 2),
            "streaming_request": ending,
            "streaming_tokens": sum(1 for e in events if e.startswith("{") and '"text"' in e),
            "waiting_statuses": sorted(st for st, _, _ in statuses),
            "waiting_codes": sorted(str(b.get("error", {}).get("code")) for _, _, b in statuses if isinstance(b, dict)),
            "log_tail": s.log[-3:],
        }


def markdown(r: dict) -> str:
    ld, sk, k, terms = r["load"], r["soak"], r["kills"], r["sigterm"]
    lines = [
        f"# qnnx serve under load (commit {r['commit']}, {r['binary']})",
        "",
        f"`{r['command']}`; artifact: {r['artifact']}; max_tokens {r['max_tokens']}, greedy; server `--queue {r['queue']}`; "
        f"load average at start {r['loadavg']}.",
        "",
        "| test | result |",
        "|---|---|",
        f"| load: {ld['clients']} clients, {ld['requests']} requests | {ld['answered']} answered, {ld['gave_up_after_429s']} given up, "
        f"{ld['lost_or_failed']} lost or failed, {ld['mixed_up']} mixed up; {ld['refusals_429']} refusals with 429 on the way "
        f"(Retry-After {ld['retry_after_s']} s, waited by the clients); latency p50 {ld['p50_ms']:.0f} ms, p95 {ld['p95_ms']:.0f} ms "
        f"(end to end with 429s and waits: {ld['end_to_end_p50_ms']:.0f} / {ld['end_to_end_p95_ms']:.0f} ms); "
        f"{ld['answered_per_s']:.2f} requests/s, {ld['tokens_per_s']:.1f} tokens/s over {ld['wall_s']:.0f} s |",
        f"| soak: {sk['requests']} requests, {sk['clients']} clients | {sk['answered']} answered, {sk['refusals_429']} refusals, {sk['lost_or_failed']} lost or failed, "
        f"{sk['mixed_up']} mixed up; server RSS {sk['rss_start_mb']:.1f} MB -> {sk['rss_end_mb']:.1f} MB "
        f"({sk['rss_end_mb'] - sk['rss_start_mb']:+.1f} MB, max {sk['rss_max_mb']:.1f}); p50 {sk['p50_ms']:.0f} ms, p95 {sk['p95_ms']:.0f} ms |",
        f"| client killed mid-stream, {k['kills']} times | {k['cancelled']} requests cancelled; NPU idle {min(k['npu_free_after_kill_ms']):.0f} to "
        f"{max(k['npu_free_after_kill_ms']):.0f} ms after the kill; the next request gave its own tokens each time |",
    ]
    for t in terms:
        lines.append(
            f"| SIGTERM mid-request, grace {t['grace_s']} s | streaming request ended with {t['streaming_request']} "
            f"after {t['streaming_tokens']} chunks; waiting requests {t['waiting_statuses']} ({', '.join(t['waiting_codes'])}); "
            f"exit code {t['exit_code']} after {t['exit_s']} s |"
        )
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifact", type=Path, help="an artifact folder (default: the tiny test model, built here)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=320)
    ap.add_argument("--soak", type=int, default=1000)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--queue", type=int, default=8)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "serve_load")
    a = ap.parse_args()
    qnnx = qnnx_binary("release")
    artifact = a.artifact or build_tiny_artifact(ROOT / "bench" / "work" / "serve-tiny")
    commit = common.commit()
    result = {
        "commit": commit,
        "binary": str(qnnx.relative_to(ROOT)) if qnnx.is_relative_to(ROOT) else str(qnnx),
        "command": " ".join(["python3 bench/serve_load.py", *sys.argv[1:]]),
        "artifact": str(a.artifact) if a.artifact else "tests/models/common/tiny_llm.py (2 layers, cache 64, prefill 16, fp16, SoC 60)",
        "max_tokens": a.max_tokens,
        "queue": a.queue,
        "loadavg": round(os.getloadavg()[0], 1),
    }
    with Server(qnnx, artifact, "--queue", str(a.queue), api_key="bench") as s:
        expected = reference(s, prompts(a.clients), a.max_tokens)
        distinct = len({tuple(v) for v in expected.values()})
        print(f"{len(expected)} prompts, {distinct} distinct answers", flush=True)
        result["distinct_answers"] = distinct
        result["load"] = load(s, expected, a.clients, a.requests, a.max_tokens).summary()
        print("load", json.dumps(result["load"]), flush=True)
        result["soak"] = soak(s, expected, a.soak, a.max_tokens)
        print("soak", json.dumps({k: v for k, v in result["soak"].items() if k != "rss_samples_mb"}), flush=True)
        result["kills"] = kill_mid_stream(s, a.kills, 48, expected)
        print("kills", json.dumps(result["kills"]), flush=True)
        result["server_exit_code"] = s.stop()
    result["sigterm"] = [sigterm_mid_request(qnnx, artifact, grace, 48) for grace in (30.0, 0.3)]
    print("sigterm", json.dumps(result["sigterm"]), flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    a.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
