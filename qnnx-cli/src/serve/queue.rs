//! One NPU, many clients: requests wait for the device in arrival order in a bounded queue, and
//! one worker thread runs them one at a time (QNN asks callers to serialize executes of a
//! graph). A request holds a [`Ticket`]; dropping it (the client went away, or its response was
//! sent) cancels the request: a waiting one leaves the queue at once, a running one stops
//! before its next graph execute. A full queue refuses at once (429 with `Retry-After`), a
//! request whose deadline passed while waiting is not started, and [`Queue::close`] (SIGTERM)
//! refuses everything still waiting.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use qnnx_engine::llm::{Cancel, GenerateOptions, Generation, StopReason};
use serde::Serialize;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use super::error::ApiError;

/// What the worker tells the request's handler, in this order: `Started` (or `Failed`), any
/// `Text`, then `Done` or `Failed`.
#[derive(Debug)]
pub enum Event {
    /// The request left the queue for the NPU after waiting this long.
    Started {
        queue_ms: f64,
    },
    /// A piece of text (streamed requests only).
    Text(String),
    Done(Box<Generation>),
    Failed(ApiError),
}

/// A request for the NPU.
pub struct Job {
    pub id: u64,
    pub prompt: Vec<u32>,
    /// Its deadline and cancel are always set (by [`Queue::submit`]'s caller).
    pub opts: GenerateOptions,
    /// Whether the text is sent as it comes ([`Event::Text`]).
    pub stream: bool,
    pub arrived: Instant,
    events: UnboundedSender<Event>,
}

impl Job {
    fn cancel(&self) -> &Cancel {
        self.opts.cancel.as_ref().expect("jobs have a cancel")
    }
}

/// Counts since the server started (`GET /health`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    /// Admitted into the queue.
    pub admitted: u64,
    /// Refused with 429.
    pub refused: u64,
    /// Answered to their end.
    pub completed: u64,
    /// Stopped because the client went away (waiting or running).
    pub cancelled: u64,
    /// 4xx found by the engine, 5xx (QNN failures, panics).
    pub failed: u64,
    /// Their deadline passed (504).
    pub timed_out: u64,
    /// Refused or stopped by shutdown (503).
    pub shut_down: u64,
    /// Tokens generated, over all requests.
    pub tokens: u64,
}

struct State {
    waiting: VecDeque<Job>,
    /// The running request's id and cancel.
    running: Option<(u64, Cancel)>,
    closed: bool,
    stats: Stats,
    /// Moving average of the time a request holds the NPU, for `Retry-After`.
    service_ms: f64,
}

/// The queue in front of the NPU.
pub struct Queue {
    state: Mutex<State>,
    ready: Condvar,
    /// Requests that may wait (the running one not counted).
    pub capacity: usize,
}

/// A request's place: its events, and its cancellation when dropped.
pub struct Ticket {
    queue: Arc<Queue>,
    id: u64,
    cancel: Cancel,
    pub events: UnboundedReceiver<Event>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.cancel.cancel();
        let mut s = self.queue.lock();
        if let Some(at) = s.waiting.iter().position(|j| j.id == self.id) {
            s.waiting.remove(at);
            s.stats.cancelled += 1;
            tracing::info!("request {}: the client went away while it waited", self.id);
        }
    }
}

/// What `GET /health` shows of the queue.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    pub waiting: usize,
    pub running: bool,
    pub capacity: usize,
    pub closed: bool,
    pub requests: Stats,
}

impl Queue {
    pub fn new(capacity: usize) -> Queue {
        Queue {
            state: Mutex::new(State {
                waiting: VecDeque::new(),
                running: None,
                closed: false,
                stats: Stats::default(),
                service_ms: 1000.0,
            }),
            ready: Condvar::new(),
            capacity,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves nothing half-done here (each update is one
        // statement), so a poisoned lock is taken as it is.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a request, or refuses it: 429 when `capacity` requests wait already, 503 after
    /// [`Queue::close`].
    pub fn submit(
        self: &Arc<Self>,
        id: u64,
        prompt: Vec<u32>,
        opts: GenerateOptions,
        stream: bool,
    ) -> Result<Ticket, ApiError> {
        let cancel = opts.cancel.clone().expect("jobs have a cancel");
        let (tx, rx) = unbounded_channel();
        let mut s = self.lock();
        if s.closed {
            s.stats.shut_down += 1;
            return Err(ApiError::shutting_down());
        }
        if s.waiting.len() >= self.capacity {
            s.stats.refused += 1;
            let ahead = s.waiting.len() + usize::from(s.running.is_some());
            let secs = (s.service_ms * ahead as f64 / 1e3).ceil().max(1.0) as u64;
            return Err(ApiError::queue_full(self.capacity, secs));
        }
        s.stats.admitted += 1;
        s.waiting.push_back(Job {
            id,
            prompt,
            opts,
            stream,
            arrived: Instant::now(),
            events: tx,
        });
        drop(s);
        self.ready.notify_one();
        Ok(Ticket {
            queue: self.clone(),
            id,
            cancel,
            events: rx,
        })
    }

    /// The next request in arrival order, marked running; `None` once closed and empty.
    fn next(&self) -> Option<Job> {
        let mut s = self.lock();
        loop {
            if let Some(job) = s.waiting.pop_front() {
                s.running = Some((job.id, job.cancel().clone()));
                return Some(job);
            }
            if s.closed {
                return None;
            }
            s = self.ready.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn finish(&self, held_ms: f64, count: impl FnOnce(&mut Stats)) {
        let mut s = self.lock();
        s.running = None;
        s.service_ms = 0.8 * s.service_ms + 0.2 * held_ms;
        count(&mut s.stats);
    }

    fn count(&self, count: impl FnOnce(&mut Stats)) {
        count(&mut self.lock().stats);
    }

    /// Stops admitting requests and refuses every waiting one (503); the running one goes on
    /// until [`Queue::cancel_running`]. The worker returns when it is done.
    pub fn close(&self) -> usize {
        let mut s = self.lock();
        s.closed = true;
        let refused: Vec<Job> = s.waiting.drain(..).collect();
        s.stats.shut_down += refused.len() as u64;
        drop(s);
        for job in &refused {
            let _ = job.events.send(Event::Failed(ApiError::shutting_down()));
        }
        self.ready.notify_all();
        refused.len()
    }

    /// Stops the running request before its next graph execute (shutdown's grace is over).
    pub fn cancel_running(&self) {
        if let Some((_, c)) = &self.lock().running {
            c.cancel();
        }
    }

    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    pub fn snapshot(&self) -> Snapshot {
        let s = self.lock();
        Snapshot {
            waiting: s.waiting.len(),
            running: s.running.is_some(),
            capacity: self.capacity,
            closed: s.closed,
            requests: s.stats.clone(),
        }
    }
}

/// Runs one job: the prompt, the options, and the callback for each piece of text (false:
/// stop). The server's runs [`qnnx_engine::llm::Generator::generate`].
pub type Run<'a> =
    dyn FnMut(&Job, &mut dyn FnMut(&str) -> bool) -> qnnx_engine::Result<Generation> + 'a;

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// The worker: takes requests in arrival order and runs them until the queue is closed and
/// empty. A failed request (an engine error, a panic) fails alone; the next one is served.
pub fn work(queue: &Queue, deadline_s: f64, run: &mut Run) {
    while let Some(job) = queue.next() {
        let start = Instant::now();
        let queue_ms = (start - job.arrived).as_secs_f64() * 1e3;
        if job.cancel().is_cancelled() {
            queue.finish(0.0, |s| s.cancelled += 1);
            continue;
        }
        if job.opts.deadline.is_some_and(|d| start >= d) {
            let _ = job
                .events
                .send(Event::Failed(ApiError::deadline(deadline_s, 0)));
            tracing::info!(
                "request {}: deadline passed after {queue_ms:.0} ms in the queue",
                job.id
            );
            queue.finish(0.0, |s| s.timed_out += 1);
            continue;
        }
        if job.events.send(Event::Started { queue_ms }).is_err() {
            queue.finish(0.0, |s| s.cancelled += 1);
            continue;
        }
        let cancel = job.cancel().clone();
        let events = job.events.clone();
        let stream = job.stream;
        let mut on_text = |piece: &str| {
            (!stream || events.send(Event::Text(piece.to_string())).is_ok())
                && !cancel.is_cancelled()
        };
        let result = catch_unwind(AssertUnwindSafe(|| run(&job, &mut on_text)));
        let held_ms = ms(start);
        let (event, what): (Event, fn(&mut Stats)) = match result {
            Ok(Ok(gen)) => {
                let t = &gen.timings;
                tracing::info!(
                    "request {}: {} prompt tokens, {} new ({}); waited {queue_ms:.0} ms, time \
                     to first token {:.0} ms ({:.0} ms on the NPU), decode {:.1} tokens/s, \
                     {held_ms:.0} ms on the NPU",
                    job.id,
                    gen.prompt_tokens.len(),
                    gen.tokens.len(),
                    gen.stop.name(),
                    queue_ms + t.first_token_ms,
                    t.first_token_ms,
                    if t.decode_steps > 0 {
                        t.decode_tokens_per_s()
                    } else {
                        0.0
                    },
                );
                let n = gen.tokens.len() as u64;
                queue.count(|s| s.tokens += n);
                match gen.stop {
                    StopReason::Cancelled if queue.is_closed() => {
                        (Event::Failed(ApiError::shutting_down()), |s| {
                            s.shut_down += 1
                        })
                    }
                    // The client is gone: nobody reads this.
                    StopReason::Cancelled => (
                        Event::Failed(ApiError::internal("the request was cancelled")),
                        |s| s.cancelled += 1,
                    ),
                    StopReason::Deadline => (
                        Event::Failed(ApiError::deadline(deadline_s, gen.tokens.len())),
                        |s| s.timed_out += 1,
                    ),
                    _ => (Event::Done(Box::new(gen)), |s| s.completed += 1),
                }
            }
            Ok(Err(e)) => {
                let e = ApiError::from_engine(e);
                tracing::warn!("request {}: {} ({})", job.id, e.message, e.status);
                (Event::Failed(e), |s| s.failed += 1)
            }
            Err(p) => {
                let msg = format!("the generation panicked: {}", panic_message(p.as_ref()));
                tracing::error!("request {}: {msg}", job.id);
                (Event::Failed(ApiError::internal(msg)), |s| s.failed += 1)
            }
        };
        let _ = job.events.send(event);
        queue.finish(held_ms, what);
    }
}

/// The queue and worker without the NPU: a run function stands in for the generator so that
/// the order, the refusals and the failures (a QNN error, a panic) can be chosen; the real
/// generator is run by tests/python/test_serve.py.
#[cfg(test)]
mod tests {
    use super::*;
    use qnnx_engine::llm::Timings;
    use std::sync::mpsc;
    use std::time::Duration;

    fn opts(deadline_s: f64) -> GenerateOptions {
        GenerateOptions {
            max_new_tokens: 4,
            deadline: Some(Instant::now() + Duration::from_secs_f64(deadline_s)),
            cancel: Some(Cancel::new()),
            ..Default::default()
        }
    }

    fn submit(q: &Arc<Queue>, id: u64) -> Result<Ticket, ApiError> {
        q.submit(id, vec![id as u32], opts(60.0), false)
    }

    fn generation(job: &Job, stop: StopReason) -> Generation {
        Generation {
            prompt_tokens: job.prompt.clone(),
            tokens: vec![7; 3],
            text: format!("answer {}", job.id),
            stop,
            timings: Timings::default(),
        }
    }

    fn next(t: &mut Ticket) -> Event {
        t.events.blocking_recv().expect("an event")
    }

    fn done_text(t: &mut Ticket) -> String {
        assert!(matches!(next(t), Event::Started { .. }));
        match next(t) {
            Event::Done(g) => g.text,
            other => panic!("{other:?}"),
        }
    }

    fn failed(t: &mut Ticket) -> ApiError {
        loop {
            match next(t) {
                Event::Started { .. } => continue,
                Event::Failed(e) => return e,
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn requests_run_in_arrival_order_and_a_full_queue_refuses_until_a_slot_frees() {
        let q = Arc::new(Queue::new(2));
        let (gate, wait) = mpsc::channel::<()>();
        let worker = {
            let q = q.clone();
            std::thread::spawn(move || {
                let mut order = vec![];
                work(&q, 60.0, &mut |job, _| {
                    order.push(job.id);
                    wait.recv().unwrap();
                    Ok(generation(job, StopReason::MaxTokens))
                });
                order
            })
        };
        let mut t1 = submit(&q, 1).unwrap();
        assert!(matches!(next(&mut t1), Event::Started { .. }));
        let t2 = submit(&q, 2).unwrap();
        let mut t3 = submit(&q, 3).unwrap();
        let full = submit(&q, 4).err().expect("full");
        assert_eq!(full.status, 429);
        assert!(full.retry_after.is_some_and(|s| s >= 1), "{full:?}");
        assert_eq!(full.code, Some("queue_full"));
        // A client that goes away while waiting frees its slot at once.
        drop(t2);
        assert_eq!(q.snapshot().waiting, 1);
        let mut t5 = submit(&q, 5).unwrap();
        for _ in 0..3 {
            gate.send(()).unwrap();
        }
        match next(&mut t1) {
            Event::Done(g) => assert_eq!(g.text, "answer 1"),
            other => panic!("{other:?}"),
        }
        assert_eq!(done_text(&mut t3), "answer 3");
        assert_eq!(done_text(&mut t5), "answer 5");
        q.close();
        assert_eq!(worker.join().unwrap(), vec![1, 3, 5]);
        let s = q.snapshot().requests;
        assert_eq!(
            (s.admitted, s.refused, s.cancelled, s.completed),
            (4, 1, 1, 3)
        );
    }

    #[test]
    fn a_failed_request_fails_alone_and_the_next_is_served() {
        let q = Arc::new(Queue::new(4));
        let worker = {
            let q = q.clone();
            std::thread::spawn(move || {
                work(&q, 60.0, &mut |job, _| match job.id {
                    1 => Err(qnnx_engine::Error::qnn(qnn::Error::NotProvided {
                        call: "graphExecute",
                        library: "libQnnHtp.so".into(),
                    })),
                    2 => panic!("boom"),
                    3 => Err(qnnx_engine::Error::Input("token 600 is outside".into())),
                    _ => Ok(generation(job, StopReason::StopToken(1))),
                })
            })
        };
        let mut t = submit(&q, 1).unwrap();
        let e = failed(&mut t);
        assert_eq!((e.status.as_u16(), e.kind), (500, "server_error"));
        assert!(e.message.contains("graphExecute"), "{e:?}");
        let e = failed(&mut submit(&q, 2).unwrap());
        assert_eq!(e.status, 500);
        assert!(e.message.contains("panicked: boom"), "{e:?}");
        let e = failed(&mut submit(&q, 3).unwrap());
        assert_eq!((e.status.as_u16(), e.kind), (400, "invalid_request_error"));
        assert_eq!(done_text(&mut submit(&q, 4).unwrap()), "answer 4");
        q.close();
        worker.join().unwrap();
        assert_eq!(q.snapshot().requests.failed, 3);
    }

    #[test]
    fn late_requests_are_not_started_and_close_refuses_the_waiting_and_stops_the_running() {
        let q = Arc::new(Queue::new(4));
        let (gate, wait) = mpsc::channel::<()>();
        let worker = {
            let q = q.clone();
            std::thread::spawn(move || {
                work(&q, 0.5, &mut |job, _| {
                    wait.recv().unwrap();
                    let c = job.opts.cancel.as_ref().unwrap();
                    let stop = if c.is_cancelled() {
                        StopReason::Cancelled
                    } else {
                        StopReason::MaxTokens
                    };
                    Ok(generation(job, stop))
                })
            })
        };
        let mut t1 = submit(&q, 1).unwrap();
        assert!(matches!(next(&mut t1), Event::Started { .. }));
        let mut late = q.submit(2, vec![2], opts(0.0), false).unwrap();
        gate.send(()).unwrap();
        assert!(matches!(next(&mut t1), Event::Done(_)));
        let e = failed(&mut late);
        assert_eq!(
            (e.status.as_u16(), e.code),
            (504, Some("deadline_exceeded"))
        );

        let mut running = submit(&q, 3).unwrap();
        assert!(matches!(next(&mut running), Event::Started { .. }));
        let mut waiting = submit(&q, 4).unwrap();
        assert_eq!(q.close(), 1);
        let e = failed(&mut waiting);
        assert_eq!((e.status.as_u16(), e.code), (503, Some("shutting_down")));
        assert_eq!(submit(&q, 5).err().unwrap().status, 503);
        q.cancel_running();
        gate.send(()).unwrap();
        assert_eq!(failed(&mut running).status, 503);
        worker.join().unwrap();
        let s = q.snapshot().requests;
        assert_eq!((s.timed_out, s.shut_down, s.completed), (1, 3, 1));
    }
}
