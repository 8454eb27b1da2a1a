//! The request loop.
//!
//! One thread reads lines from the port; each request runs in a thread of
//! its own, so a long command does not hold up others, and writes its
//! response as one whole line under the writer lock. Nothing a peer sends
//! ends the loop: bad lines get an error response, end of file (the outer
//! side disconnected) and read errors are waited out.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use devlend_agent::protocol::{Op, Request, Response, MAX_LINE};
use log::{debug, info, warn};
use serde_json::Value;

use super::exec;
use super::lines::{Event, LineReader};

/// Pause after end of file or a read error before reading again.
const READ_RETRY: Duration = Duration::from_millis(100);

/// Tunables of the request loop.
#[derive(Debug, Clone)]
pub struct Config {
    /// Cap on captured stdout and on captured stderr, in bytes.
    pub output_cap: usize,
    /// Requests running at once; more are refused with an error.
    pub max_in_flight: usize,
}

/// Writes responses, one whole line at a time.
#[derive(Clone)]
struct Responder {
    out: Arc<Mutex<dyn Write + Send>>,
}

impl Responder {
    fn send(&self, resp: &Response) {
        let mut line = match serde_json::to_vec(resp) {
            Ok(l) => l,
            Err(e) => {
                warn!("encode response {:?}: {e}", resp.id);
                return;
            }
        };
        line.push(b'\n');
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = out.write_all(&line).and_then(|()| out.flush()) {
            // The outer side went away; the client will time out or retry.
            warn!("write response {:?}: {e}", resp.id);
        }
    }
}

/// Decrements the in-flight count when a request thread ends, however.
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Serves requests read from `input`, answering on `output`. Never returns.
pub fn serve(input: impl Read, output: impl Write + Send + 'static, config: Config) -> ! {
    let responder = Responder {
        out: Arc::new(Mutex::new(output)),
    };
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut lines = LineReader::new(input, MAX_LINE);
    let mut idle = false;
    let mut failing = false;
    loop {
        match lines.next_event() {
            Ok(Event::Line(line)) => {
                if idle || failing {
                    info!("port readable again");
                    idle = false;
                    failing = false;
                }
                dispatch(&line, &responder, &in_flight, &config);
            }
            Ok(Event::TooLong) => {
                debug!("rejecting request line longer than {MAX_LINE} bytes");
                responder.send(&Response::error(
                    None,
                    format!("request line longer than {MAX_LINE} bytes; discarded"),
                ));
            }
            Ok(Event::Eof) => {
                if !idle {
                    info!("port: outer side not connected; waiting");
                    idle = true;
                }
                thread::sleep(READ_RETRY);
            }
            Err(e) => {
                if !failing {
                    warn!("read port: {e}; retrying");
                    failing = true;
                }
                thread::sleep(READ_RETRY);
            }
        }
    }
}

/// Parses a request line; the error is the response to send instead.
pub fn parse_request(line: &[u8]) -> Result<Request, Response> {
    let value: Value = serde_json::from_slice(line)
        .map_err(|e| Response::error(None, format!("malformed JSON: {e}")))?;
    let id = value.get("id").and_then(Value::as_u64);
    serde_json::from_value(value).map_err(|e| Response::error(id, format!("invalid request: {e}")))
}

fn dispatch(line: &[u8], responder: &Responder, in_flight: &Arc<AtomicUsize>, config: &Config) {
    let line = line.trim_ascii();
    if line.is_empty() {
        return;
    }
    let req = match parse_request(line) {
        Ok(req) => req,
        Err(resp) => {
            debug!(
                "bad request {:.120}: {}",
                String::from_utf8_lossy(line),
                resp.error.as_deref().unwrap_or("")
            );
            responder.send(&resp);
            return;
        }
    };
    let id = req.id;
    if in_flight.fetch_add(1, Ordering::SeqCst) >= config.max_in_flight {
        in_flight.fetch_sub(1, Ordering::SeqCst);
        warn!(
            "request {id}: refused, {} requests running",
            config.max_in_flight
        );
        responder.send(&Response::error(
            Some(id),
            format!("busy: {} requests already running", config.max_in_flight),
        ));
        return;
    }
    let guard = InFlight(Arc::clone(in_flight));
    let worker_responder = responder.clone();
    let config = config.clone();
    let spawned = thread::Builder::new()
        .name(format!("req-{id}"))
        .spawn(move || {
            let _guard = guard;
            let resp = handle(req, &config);
            worker_responder.send(&resp);
        });
    if let Err(e) = spawned {
        // The closure, and with it the in-flight guard, was dropped.
        warn!("request {id}: cannot start a thread: {e}");
        responder.send(&Response::error(
            Some(id),
            format!("cannot start a thread: {e}"),
        ));
    }
}

/// Carries out one request; logs one line about it at debug level.
fn handle(req: Request, config: &Config) -> Response {
    let id = req.id;
    match req.op {
        Op::Ping => {
            debug!("request {id}: ping");
            Response::ok(id)
        }
        Op::Exec(exec) => {
            let start = Instant::now();
            let result = exec::run(&exec, config.output_cap);
            let ms = start.elapsed().as_millis();
            match result {
                Ok(out) => {
                    debug!(
                        "request {id}: exec {:?}: {} after {ms} ms",
                        exec.argv,
                        out.status_text()
                    );
                    Response::exec(id, out)
                }
                Err(msg) => {
                    debug!("request {id}: exec {:?}: {msg}", exec.argv);
                    Response::error(Some(id), msg)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_carry_the_id_when_there_is_one() {
        let err = |line: &str| parse_request(line.as_bytes()).unwrap_err();
        let e = err("{not json");
        assert_eq!(e.id, None);
        assert!(e.error.unwrap().starts_with("malformed JSON"));
        let e = err(r#"{"id":7,"op":"reboot"}"#);
        assert_eq!(e.id, Some(7));
        assert!(e.error.unwrap().contains("unknown variant"));
        assert_eq!(err(r#"{"id":"x","op":"ping"}"#).id, None);
        assert_eq!(err(r#"[1,2]"#).id, None);
        assert_eq!(err("\u{ff}").id, None);
        assert_eq!(err(r#"{"id":8,"op":"exec","argv":"ls"}"#).id, Some(8));
        let ok = parse_request(br#"{"id":9,"op":"ping"}"#).unwrap();
        assert_eq!(ok.id, 9);
    }
}
