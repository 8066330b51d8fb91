//! The routes: `POST /v1/chat/completions`, `POST /v1/completions` (JSON, or server-sent
//! events with `"stream": true`), `GET /v1/models`, `GET /v1/models/{id}`, `GET /health`; the API
//! key check on all of them; OpenAI-style JSON for unknown routes, wrong methods and bodies
//! over the limit.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Request as HttpRequest, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as Sse, KeepAlive};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{self, Stream};
use qnnx_engine::llm::{Artifact, Cancel, GenerateOptions, Generation, StopReason};
use serde_json::{json, Value};

use super::error::ApiError;
use super::queue::{Event, Queue, Ticket};
use super::request::{self, Kind};

/// What every handler shares.
pub struct App {
    pub art: Arc<Artifact>,
    pub queue: Arc<Queue>,
    /// The model's id in responses and `/v1/models`.
    pub model: String,
    /// When the server started (Unix seconds): the model's `created`.
    pub created: u64,
    pub api_key: Option<String>,
    pub deadline: Duration,
    pub max_body: usize,
    pub next_id: AtomicU64,
}

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/health", get(health))
        .fallback(not_found)
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(middleware::from_fn_with_state(app.clone(), auth))
        .layer(DefaultBodyLimit::max(app.max_body))
        .with_state(app)
}

/// Compares in time independent of where the strings differ.
fn same_key(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn auth(State(app): State<Arc<App>>, req: HttpRequest, next: Next) -> Response {
    if let Some(key) = &app.api_key {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| same_key(g.trim().as_bytes(), key.as_bytes())) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

async fn not_found(req: HttpRequest) -> ApiError {
    ApiError::not_found(format!(
        "no route {} {}: this server has POST /v1/chat/completions, POST /v1/completions, GET \
         /v1/models and GET /health",
        req.method(),
        req.uri().path()
    ))
}

fn model_json(app: &App) -> Value {
    json!({ "id": app.model, "object": "model", "created": app.created, "owned_by": "qnnx" })
}

async fn models(State(app): State<Arc<App>>) -> Json<Value> {
    Json(json!({ "object": "list", "data": [model_json(&app)] }))
}

async fn model(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    if id == app.model {
        Json(model_json(&app)).into_response()
    } else {
        ApiError::not_found(format!(
            "no model {id:?}: this server serves {:?}",
            app.model
        ))
        .with_code("model_not_found")
        .into_response()
    }
}

async fn health(State(app): State<Arc<App>>) -> Response {
    let q = app.queue.snapshot();
    let status = if q.closed {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let body = json!({
        "status": if q.closed { "shutting_down" } else { "ok" },
        "model": app.model,
        "cache_len": app.art.cache_len(),
        "queue": q,
    });
    (status, Json(body)).into_response()
}

async fn chat(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    complete(app, Kind::Chat, body).await
}

async fn completions(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    complete(app, Kind::Completion, body).await
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One response's fixed parts.
struct Reply {
    id: String,
    kind: Kind,
    model: String,
    created: u64,
    include_usage: bool,
}

impl Reply {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Completion, _) => "text_completion",
        }
    }

    fn envelope(&self, chunk: bool, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": choices,
        })
    }

    fn choice(&self, text: &str, finish: Option<&str>, chunk: bool, first: bool) -> Value {
        match (self.kind, chunk) {
            (Kind::Chat, false) => json!({
                "index": 0,
                "message": { "role": "assistant", "content": text },
                "logprobs": null,
                "finish_reason": finish,
            }),
            (Kind::Chat, true) => {
                let delta = match (first, finish) {
                    (true, _) => json!({ "role": "assistant", "content": text }),
                    (false, Some(_)) => json!({}),
                    (false, None) => json!({ "content": text }),
                };
                json!({ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish })
            }
            (Kind::Completion, _) => json!({
                "index": 0, "text": text, "logprobs": null, "finish_reason": finish,
            }),
        }
    }
}

fn usage(g: &Generation) -> Value {
    let (p, c) = (g.prompt_tokens.len(), g.tokens.len());
    json!({ "prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c })
}

fn finish_reason(stop: &StopReason) -> &'static str {
    match stop {
        StopReason::MaxTokens => "length",
        StopReason::StopToken(_) | StopReason::StopString(_) => "stop",
        // Not answered with a finish reason (the worker sends an error instead).
        StopReason::Cancelled | StopReason::Deadline => "stop",
    }
}

/// qnnx's own fields beside OpenAI's: the token ids and where the time went.
fn extension(g: &Generation, queue_ms: f64) -> Value {
    let t = &g.timings;
    json!({
        "tokens": g.tokens,
        "stop": g.stop.name(),
        "queue_ms": queue_ms,
        "first_token_ms": t.first_token_ms,
        "decode_tokens_per_s": (t.decode_steps > 0).then(|| t.decode_tokens_per_s()),
    })
}

async fn complete(app: Arc<App>, kind: Kind, body: Result<Bytes, BytesRejection>) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return ApiError::too_large(app.max_body).into_response()
        }
        Err(r) => return ApiError::bad(r.body_text()).into_response(),
    };
    let req = match request::parse(kind, &body, &app.art) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let n = app.next_id.fetch_add(1, Ordering::Relaxed);
    let cancel = Cancel::new();
    let opts = GenerateOptions {
        max_new_tokens: req.max_tokens,
        sampling: req.sampling,
        stop_strings: req.stop.clone(),
        deadline: Some(Instant::now() + app.deadline),
        cancel: Some(cancel),
    };
    let mut ticket = match app.queue.submit(n, req.prompt.clone(), opts, req.stream) {
        Ok(t) => t,
        Err(e) => {
            tracing::info!("request {n}: refused ({})", e.status);
            return e.into_response();
        }
    };
    let reply = Reply {
        id: match kind {
            Kind::Chat => format!("chatcmpl-qnnx-{n}"),
            Kind::Completion => format!("cmpl-qnnx-{n}"),
        },
        kind,
        model: app.model.clone(),
        created: now_s(),
        include_usage: req.include_usage,
    };
    // Waiting for the NPU: errors until it starts (shutdown, deadline) are plain HTTP errors.
    let queue_ms = match ticket.events.recv().await {
        Some(Event::Started { queue_ms }) => queue_ms,
        Some(Event::Failed(e)) => return e.into_response(),
        Some(other) => return unexpected(&other).into_response(),
        None => return worker_gone().into_response(),
    };
    if req.stream {
        return streamed(reply, ticket, queue_ms).into_response();
    }
    match ticket.events.recv().await {
        Some(Event::Done(g)) => {
            let mut v = reply.envelope(
                false,
                json!([reply.choice(&g.text, Some(finish_reason(&g.stop)), false, false)]),
            );
            v["usage"] = usage(&g);
            v["qnnx"] = extension(&g, queue_ms);
            Json(v).into_response()
        }
        Some(Event::Failed(e)) => e.into_response(),
        Some(other) => unexpected(&other).into_response(),
        None => worker_gone().into_response(),
    }
}

fn unexpected(e: &Event) -> ApiError {
    ApiError::internal(format!("the NPU worker sent {e:?} out of order"))
}

fn worker_gone() -> ApiError {
    ApiError::internal("the NPU worker stopped; restart the server")
}

fn data(v: &Value) -> Sse {
    Sse::default().data(v.to_string())
}

/// The stream of a streamed request: a first chunk (the assistant's role), a chunk per piece
/// of text, a last chunk with the finish reason (and qnnx's fields), the usage chunk if asked
/// for, and `[DONE]`; an error after the start is an `{"error": ...}` event, as OpenAI sends
/// it. The ticket lives in the stream: when the client goes away, the stream is dropped and
/// the request cancelled.
fn streamed(
    reply: Reply,
    ticket: Ticket,
    queue_ms: f64,
) -> axum::response::Sse<impl Stream<Item = Result<Sse, Infallible>>> {
    let first = match reply.kind {
        Kind::Chat => vec![data(
            &reply.envelope(true, json!([reply.choice("", None, true, true)])),
        )],
        Kind::Completion => vec![],
    };
    let state = (
        reply,
        ticket,
        std::collections::VecDeque::from(first),
        false,
    );
    let s = stream::unfold(
        state,
        move |(reply, mut ticket, mut pending, mut done)| async move {
            loop {
                if let Some(e) = pending.pop_front() {
                    return Some((Ok(e), (reply, ticket, pending, done)));
                }
                if done {
                    return None;
                }
                match ticket.events.recv().await {
                    Some(Event::Text(piece)) => pending.push_back(data(
                        &reply.envelope(true, json!([reply.choice(&piece, None, true, false)])),
                    )),
                    Some(Event::Done(g)) => {
                        let finish = finish_reason(&g.stop);
                        let mut last = reply
                            .envelope(true, json!([reply.choice("", Some(finish), true, false)]));
                        last["qnnx"] = extension(&g, queue_ms);
                        pending.push_back(data(&last));
                        if reply.include_usage {
                            let mut u = reply.envelope(true, json!([]));
                            u["usage"] = usage(&g);
                            pending.push_back(data(&u));
                        }
                        pending.push_back(Sse::default().data("[DONE]"));
                        done = true;
                    }
                    Some(Event::Failed(e)) => {
                        pending.push_back(data(&e.to_json()));
                        done = true;
                    }
                    Some(other) => {
                        pending.push_back(data(&unexpected(&other).to_json()));
                        done = true;
                    }
                    None => {
                        pending.push_back(data(&worker_gone().to_json()));
                        done = true;
                    }
                }
            }
        },
    );
    axum::response::Sse::new(s).keep_alive(KeepAlive::default())
}
