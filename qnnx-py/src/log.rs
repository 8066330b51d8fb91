//! The Rust side's log (the `tracing` events of the engine, the cache and QNN's own log) sent to
//! Python's `logging`, logger `qnnx_backend`, so that a warning such as "removed cache entry
//! ...: binary sha256 is ..." reaches the user once, as the CLI prints it. Warnings and errors
//! are forwarded; QNN's own log (target `qnn`, noisy with harmless ERROR lines:
//! docs/qnn-notes.md gotcha 15) only after `set_log_level` asked for it.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::prelude::*;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// Whether QNN's own log is forwarded (set by `set_log_level`).
pub static QNN_LOG: AtomicBool = AtomicBool::new(false);

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        } else {
            self.0 += &format!(" {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = value.to_string();
        } else {
            self.0 += &format!(" {}={value}", field.name());
        }
    }
}

struct ToPython;

impl<S: Subscriber> Layer<S> for ToPython {
    fn on_event(&self, event: &Event<'_>, _cx: Context<'_, S>) {
        let meta = event.metadata();
        let qnn = meta.target() == "qnn" || meta.target().starts_with("qnn::");
        let level = *meta.level();
        let wanted = if qnn {
            QNN_LOG.load(Ordering::Relaxed)
        } else {
            level <= Level::WARN
        };
        if !wanted {
            return;
        }
        let mut m = Message(String::new());
        event.record(&mut m);
        // Python's logging levels.
        let py_level: u32 = match level {
            Level::ERROR => 40,
            Level::WARN => 30,
            Level::INFO => 20,
            Level::DEBUG | Level::TRACE => 10,
        };
        Python::attach(|py| {
            let logged = py.import("logging").and_then(|logging| {
                let logger = logging.call_method1("getLogger", ("qnnx_backend",))?;
                logger.call_method1("log", (py_level, m.0))
            });
            // Logging must never fail a call; a broken logging setup drops the line.
            if let Err(e) = logged {
                e.print(py);
            }
        });
    }
}

/// Installs the forwarding subscriber for the process (once; a subscriber the embedding
/// application set first wins).
pub fn install() {
    let subscriber = tracing_subscriber::registry().with(ToPython);
    let _ = tracing::subscriber::set_global_default(subscriber);
}
