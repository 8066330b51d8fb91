//! The body of `POST /v1/chat/completions` and `POST /v1/completions`, read field by field
//! (as OpenAI's API defines them) into what the engine runs: the prompt's token ids, the
//! sampling options, the stop strings and the number of new tokens. Every refusal is a 400 that
//! names the field; fields this server does not know are ignored, as OpenAI-compatible servers
//! do, but a known feature it does not have (`n` above 1, `logprobs`, tools, penalties) is
//! refused rather than silently dropped.

use std::time::{SystemTime, UNIX_EPOCH};

use qnnx_engine::llm::{Artifact, Message, Sampling};
use serde_json::{Map, Value};

use super::error::ApiError;

/// Which route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `/v1/chat/completions`: messages through the artifact's chat template.
    Chat,
    /// `/v1/completions`: a raw prompt, tokenized as `qnnx generate --prompt` does.
    Completion,
}

/// A parsed request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub kind: Kind,
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: Sampling,
    pub stop: Vec<String>,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with the token counts.
    pub include_usage: bool,
}

fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Typed access to the body's fields; `null` is the same as absent.
struct Fields<'a>(&'a Map<String, Value>);

impl<'a> Fields<'a> {
    fn get(&self, k: &str) -> Option<&'a Value> {
        self.0.get(k).filter(|v| !v.is_null())
    }

    fn wrong(k: &'static str, want: &str, v: &Value) -> ApiError {
        ApiError::param(k, format!("'{k}' must be {want}, not {}", describe(v)))
    }

    fn number(&self, k: &'static str) -> Result<Option<f64>, ApiError> {
        self.get(k)
            .map(|v| v.as_f64().ok_or_else(|| Fields::wrong(k, "a number", v)))
            .transpose()
    }

    fn uint(&self, k: &'static str) -> Result<Option<u64>, ApiError> {
        self.get(k)
            .map(|v| {
                v.as_u64()
                    .ok_or_else(|| Fields::wrong(k, "a non-negative integer", v))
            })
            .transpose()
    }

    fn boolean(&self, k: &'static str) -> Result<Option<bool>, ApiError> {
        self.get(k)
            .map(|v| {
                v.as_bool()
                    .ok_or_else(|| Fields::wrong(k, "true or false", v))
            })
            .transpose()
    }

    /// Refuses `k` unless absent or equal to what this server does anyway.
    fn unsupported(&self, k: &'static str, fine: impl Fn(&Value) -> bool) -> Result<(), ApiError> {
        match self.get(k) {
            Some(v) if !fine(v) => Err(ApiError::param(
                k,
                format!("'{k}' is not supported by this server (it was {v})"),
            )),
            _ => Ok(()),
        }
    }
}

/// A seed for a sampled request that gives none: a new one each time, as OpenAI's API does.
fn fresh_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ N
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The body as a JSON object: refusals of bodies that are not UTF-8, not JSON, not an object.
pub fn body_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let text = std::str::from_utf8(body).map_err(|e| {
        ApiError::bad(format!(
            "the request body is not UTF-8 (invalid byte at offset {}): send JSON text",
            e.valid_up_to()
        ))
    })?;
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(ApiError::bad(format!(
            "the request body must be a JSON object, not {}",
            describe(&other)
        ))),
        Err(e) => Err(ApiError::bad(format!(
            "the request body is not valid JSON: {e}"
        ))),
    }
}

fn text_of(content: &Value, i: usize) -> Result<String, ApiError> {
    match content {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut text = String::new();
            for p in parts {
                match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("text"), Some(Value::String(t))) => text.push_str(t),
                    _ => {
                        return Err(ApiError::param(
                            "messages",
                            format!(
                                "messages[{i}].content: only text parts ({{\"type\": \"text\", \
                                 \"text\": ...}}) are supported, not {p}"
                            ),
                        ))
                    }
                }
            }
            Ok(text)
        }
        other => Err(ApiError::param(
            "messages",
            format!(
                "messages[{i}].content must be a string or an array of text parts, not {}",
                describe(other)
            ),
        )),
    }
}

fn messages(f: &Fields) -> Result<Vec<Message>, ApiError> {
    let list = match f.get("messages") {
        None => return Err(ApiError::param("messages", "'messages' is required")),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(Fields::wrong("messages", "an array of messages", v)),
    };
    if list.is_empty() {
        return Err(ApiError::param(
            "messages",
            "'messages' is empty: send at least one message",
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let role = m.get("role").and_then(Value::as_str).ok_or_else(|| {
                ApiError::param(
                    "messages",
                    format!("messages[{i}] must be an object with a string 'role'"),
                )
            })?;
            let content = text_of(m.get("content").unwrap_or(&Value::Null), i)?;
            Ok(Message::new(role, &content))
        })
        .collect()
}

fn prompt_ids(f: &Fields, art: &Artifact) -> Result<Vec<u32>, ApiError> {
    let one = |v: &Value| -> Result<Vec<u32>, ApiError> {
        match v {
            Value::String(s) if s.is_empty() => Err(ApiError::param("prompt", "'prompt' is empty")),
            Value::String(s) => art.encode(s, true).map_err(ApiError::from_engine),
            Value::Array(ids) if ids.iter().all(Value::is_u64) => {
                let vocab = art.manifest.model.vocab_size as u64;
                ids.iter()
                    .map(|x| {
                        let x = x.as_u64().expect("checked");
                        (x < vocab).then_some(x as u32).ok_or_else(|| {
                            ApiError::param(
                                "prompt",
                                format!("token {x} is outside the model's vocabulary of {vocab}"),
                            )
                        })
                    })
                    .collect()
            }
            other => Err(Fields::wrong(
                "prompt",
                "a string or an array of token ids",
                other,
            )),
        }
    };
    match f.get("prompt") {
        None => Err(ApiError::param("prompt", "'prompt' is required")),
        Some(Value::Array(a)) if a.len() == 1 && (a[0].is_string() || a[0].is_array()) => {
            one(&a[0])
        }
        Some(Value::Array(a)) if !a.is_empty() && !a[0].is_u64() => Err(ApiError::param(
            "prompt",
            format!(
                "'prompt' holds {} prompts; this server takes one per request",
                a.len()
            ),
        )),
        Some(Value::Array(a)) if a.is_empty() => {
            Err(ApiError::param("prompt", "'prompt' is empty"))
        }
        Some(v) => one(v),
    }
}

fn stop_strings(f: &Fields) -> Result<Vec<String>, ApiError> {
    match f.get("stop") {
        None => Ok(vec![]),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => Ok(a
            .iter()
            .map(|s| s.as_str().expect("checked").to_string())
            .collect()),
        Some(v) => Err(Fields::wrong("stop", "a string or an array of strings", v)),
    }
}

/// Parses and checks a request against the artifact: everything a client can get wrong is
/// refused here, before the request waits for the NPU.
pub fn parse(kind: Kind, body: &[u8], art: &Artifact) -> Result<Request, ApiError> {
    let obj = body_object(body)?;
    let f = Fields(&obj);
    // Type checks first, so a wrong type is reported as such whatever else is wrong.
    let n = f.uint("n")?;
    let max_tokens = match kind {
        Kind::Chat => f.uint("max_completion_tokens")?.or(f.uint("max_tokens")?),
        Kind::Completion => f.uint("max_tokens")?,
    };
    let temperature = f.number("temperature")?.unwrap_or(1.0);
    let top_p = f.number("top_p")?.unwrap_or(1.0);
    let top_k = f.uint("top_k")?.unwrap_or(0);
    let seed = f.uint("seed")?;
    let stream = f.boolean("stream")?.unwrap_or(false);
    let include_usage = match f.get("stream_options") {
        None => false,
        Some(Value::Object(o)) => Fields(o).boolean("include_usage")?.unwrap_or(false),
        Some(v) => return Err(Fields::wrong("stream_options", "an object", v)),
    };
    let stop = stop_strings(&f)?;
    if n.is_some_and(|n| n != 1) {
        return Err(ApiError::param(
            "n",
            "'n' must be 1: this server makes one choice per request",
        ));
    }
    let zero = |v: &Value| v.as_f64() == Some(0.0);
    f.unsupported("presence_penalty", zero)?;
    f.unsupported("frequency_penalty", zero)?;
    f.unsupported("logprobs", |v| v == &Value::Bool(false))?;
    f.unsupported("top_logprobs", zero)?;
    f.unsupported("logit_bias", |v| v.as_object().is_some_and(Map::is_empty))?;
    f.unsupported("tools", |v| v.as_array().is_some_and(Vec::is_empty))?;
    f.unsupported("functions", |v| v.as_array().is_some_and(Vec::is_empty))?;
    f.unsupported("response_format", |v| {
        v.get("type").and_then(Value::as_str) == Some("text")
    })?;
    f.unsupported("echo", |v| v == &Value::Bool(false))?;
    f.unsupported("best_of", |v| v.as_u64() == Some(1))?;
    f.unsupported("suffix", |v| v.as_str() == Some(""))?;
    let prompt = match kind {
        Kind::Chat => {
            let messages = messages(&f)?;
            let text = art
                .chat_prompt(&messages)
                .map_err(|e| ApiError::from_engine(e).param_of("messages"))?;
            art.encode(&text, false).map_err(ApiError::from_engine)?
        }
        Kind::Completion => prompt_ids(&f, art)?,
    };
    let which = match kind {
        Kind::Chat => "messages",
        Kind::Completion => "prompt",
    };
    let cache = art.cache_len();
    if prompt.is_empty() {
        return Err(ApiError::param(which, "the prompt has no tokens"));
    }
    let max_tokens = match max_tokens {
        Some(0) => {
            return Err(ApiError::param(
                "max_tokens",
                "'max_tokens' must be at least 1",
            ))
        }
        // Clamped so that prompt plus new tokens cannot overflow.
        Some(m) => m.min(u32::MAX as u64) as usize,
        None => cache.saturating_sub(prompt.len()).max(1),
    };
    art.check_fits(prompt.len(), max_tokens).map_err(|e| {
        ApiError::from_engine(e)
            .param_of("max_tokens")
            .with_code("context_length_exceeded")
    })?;
    let sampling = Sampling {
        temperature: temperature as f32,
        top_k: top_k as usize,
        top_p: top_p as f32,
        seed: seed.unwrap_or_else(fresh_seed),
    };
    sampling.check().map_err(ApiError::bad)?;
    Ok(Request {
        kind,
        prompt,
        max_tokens,
        sampling,
        stop,
        stream,
        include_usage,
    })
}

impl ApiError {
    fn param_of(self, param: &'static str) -> ApiError {
        ApiError {
            param: Some(param),
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_that_are_not_utf8_json_or_an_object_are_refused() {
        let e = body_object(b"{\"a\": \"\xff\"}").unwrap_err();
        assert!(
            e.message.contains("not UTF-8") && e.message.contains("offset 7"),
            "{e:?}"
        );
        let e = body_object(b"{\"model\": ").unwrap_err();
        assert!(e.message.contains("not valid JSON"), "{e:?}");
        assert_eq!(e.status, 400);
        let e = body_object(b"[1, 2]").unwrap_err();
        assert!(e.message.contains("not an array"), "{e:?}");
        assert!(body_object(b"{}").unwrap().is_empty());
    }

    #[test]
    fn wrong_types_name_the_field() {
        let obj = body_object(br#"{"temperature": "hot", "max_tokens": -1, "stream": 1}"#).unwrap();
        let f = Fields(&obj);
        let e = f.number("temperature").unwrap_err();
        assert_eq!(e.param, Some("temperature"));
        assert!(
            e.message.contains("must be a number, not a string"),
            "{e:?}"
        );
        let e = f.uint("max_tokens").unwrap_err();
        assert!(e.message.contains("non-negative integer"), "{e:?}");
        assert!(f.boolean("stream").is_err());
        assert_eq!(f.number("top_p").unwrap(), None);
    }

    #[test]
    fn messages_are_checked() {
        let parse = |s: &str| messages(&Fields(&body_object(s.as_bytes()).unwrap()));
        assert!(parse(r#"{"messages": []}"#)
            .unwrap_err()
            .message
            .contains("empty"));
        assert!(parse(r#"{}"#).unwrap_err().message.contains("required"));
        assert!(parse(r#"{"messages": "hi"}"#)
            .unwrap_err()
            .message
            .contains("not a string"));
        assert!(parse(r#"{"messages": [{"content": "hi"}]}"#)
            .unwrap_err()
            .message
            .contains("'role'"));
        assert!(
            parse(r#"{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#)
                .unwrap_err()
                .message
                .contains("only text parts")
        );
        let m = parse(
            r#"{"messages": [{"role": "system", "content": null},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}"#,
        )
        .unwrap();
        assert_eq!(
            m,
            vec![Message::new("system", ""), Message::new("user", "ab")]
        );
    }

    #[test]
    fn stop_is_a_string_or_strings() {
        let parse = |s: &str| stop_strings(&Fields(&body_object(s.as_bytes()).unwrap()));
        assert_eq!(parse(r#"{"stop": "x"}"#).unwrap(), vec!["x"]);
        assert_eq!(parse(r#"{"stop": ["x", "y"]}"#).unwrap(), vec!["x", "y"]);
        assert_eq!(parse(r#"{"stop": null}"#).unwrap(), Vec::<String>::new());
        assert_eq!(parse(r#"{"stop": [1]}"#).unwrap_err().param, Some("stop"));
    }
}
