//! Wire protocol between the outer machine and the in-host agent.
//!
//! The transport is a byte stream (a virtio-serial port inside the host, a
//! unix socket on the outer machine) carrying newline-delimited JSON: one
//! request object per line, one response object per line. Requests carry a
//! numeric `id` chosen by the client; the agent copies it into the response
//! and may answer requests in any order.
//!
//! ```text
//! {"id":1,"op":"ping"}
//!     -> {"id":1,"ok":true}
//! {"id":2,"op":"exec","argv":["sh","-c","echo hi"],"timeout_ms":30000,"stdin":null}
//!     -> {"id":2,"ok":true,"exit_code":0,"signal":null,"timed_out":false,
//!         "stdout":"hi\n","stderr":"","stdout_truncated":false,"stderr_truncated":false}
//! any failure to parse or run
//!     -> {"id":2,"ok":false,"error":"..."}      (id null when it cannot be parsed)
//! ```
//!
//! Optional `exec` fields: `env` (object of strings, added to the agent's
//! environment), `cwd` (string). Unknown fields are ignored. Lines longer than
//! [`MAX_LINE`] bytes are rejected with an error whose id is null.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Longest request line (without the newline) the agent accepts.
pub const MAX_LINE: usize = 1 << 20;

/// Default cap on captured stdout and on captured stderr, each.
pub const DEFAULT_OUTPUT_CAP: usize = 16 << 20;

/// Timeout applied by the agent when an `exec` request has no `timeout_ms`.
pub const DEFAULT_TIMEOUT_MS: u64 = 60_000;

/// Name of the virtio-serial port the agent listens on.
pub const PORT_NAME: &str = "org.devlend.agent";

/// One request line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Chosen by the client, echoed in the response.
    pub id: u64,
    /// The operation and its arguments.
    #[serde(flatten)]
    pub op: Op,
}

/// The operations the agent understands, tagged by the `op` field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Liveness check; answered with `ok: true` and nothing else.
    Ping,
    /// Run a program and capture its output.
    Exec(ExecRequest),
}

/// Arguments of an `exec` request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecRequest {
    /// Program and arguments; `argv[0]` is looked up in `PATH`.
    pub argv: Vec<String>,
    /// Written to the child's stdin, which is then closed. `None`: /dev/null.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Kill the child's process group after this long ([`DEFAULT_TIMEOUT_MS`]
    /// when absent).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Variables added to (or overriding) the agent's environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// Working directory of the child (the agent's, `/`, when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// Result of an `exec` request that ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecOutput {
    /// Exit status if the child exited normally.
    pub exit_code: Option<i32>,
    /// Signal number if the child was killed by a signal (SIGKILL after a
    /// timeout).
    pub signal: Option<i32>,
    /// The timeout expired and the child's process group was killed.
    pub timed_out: bool,
    /// Captured stdout, decoded as lossy UTF-8.
    pub stdout: String,
    /// Captured stderr, decoded as lossy UTF-8.
    pub stderr: String,
    /// stdout was longer than the agent's cap and was cut.
    #[serde(default)]
    pub stdout_truncated: bool,
    /// stderr was longer than the agent's cap and was cut.
    #[serde(default)]
    pub stderr_truncated: bool,
}

impl ExecOutput {
    /// True when the child exited with status 0 before the timeout.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }

    /// Short human-readable description of how the child ended.
    pub fn status_text(&self) -> String {
        match (self.exit_code, self.signal) {
            _ if self.timed_out => match self.signal {
                Some(sig) => format!("timed out (killed by signal {sig})"),
                None => "timed out (exit status unknown)".to_string(),
            },
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            (None, None) => "exit status unknown".to_string(),
        }
    }
}

/// One response line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// The request's id; `None` when the request line could not be parsed
    /// far enough to find one.
    pub id: Option<u64>,
    /// Whether the request was carried out (for `exec`: the child ran; its
    /// exit status may still be non-zero).
    pub ok: bool,
    /// Why the request failed, when `ok` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Present in successful `exec` responses.
    #[serde(flatten)]
    pub exec: Option<ExecOutput>,
}

impl Response {
    /// Successful response without payload (ping).
    pub fn ok(id: u64) -> Self {
        Response {
            id: Some(id),
            ok: true,
            error: None,
            exec: None,
        }
    }

    /// Successful `exec` response.
    pub fn exec(id: u64, output: ExecOutput) -> Self {
        Response {
            id: Some(id),
            ok: true,
            error: None,
            exec: Some(output),
        }
    }

    /// Failure response.
    pub fn error(id: Option<u64>, message: impl Into<String>) -> Self {
        Response {
            id,
            ok: false,
            error: Some(message.into()),
            exec: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn to_value<T: Serialize>(v: &T) -> Value {
        serde_json::to_value(v).unwrap()
    }

    #[test]
    fn requests_match_the_contract() {
        let ping: Request = serde_json::from_str(r#"{"id":1,"op":"ping"}"#).unwrap();
        assert_eq!(
            ping,
            Request {
                id: 1,
                op: Op::Ping
            }
        );
        assert_eq!(to_value(&ping), json!({"id":1,"op":"ping"}));

        let line = r#"{"id":2,"op":"exec","argv":["sh","-c","x"],"timeout_ms":30000,"stdin":null}"#;
        let exec: Request = serde_json::from_str(line).unwrap();
        let Op::Exec(req) = &exec.op else {
            panic!("not exec: {exec:?}")
        };
        assert_eq!(req.argv, ["sh", "-c", "x"]);
        assert_eq!(req.timeout_ms, Some(30000));
        assert_eq!(req.stdin, None);
        assert_eq!(
            to_value(&exec),
            serde_json::from_str::<Value>(line).unwrap()
        );

        let full: Request = serde_json::from_str(
            r#"{"id":3,"op":"exec","argv":["env"],"env":{"A":"b"},"cwd":"/tmp","extra":1}"#,
        )
        .unwrap();
        let Op::Exec(req) = full.op else { panic!() };
        assert_eq!(req.env.unwrap()["A"], "b");
        assert_eq!(req.cwd.as_deref(), Some("/tmp"));
        assert_eq!(req.timeout_ms, None);
    }

    #[test]
    fn bad_requests_are_rejected() {
        for line in [
            r#"{"id":1}"#,
            r#"{"id":1,"op":"reboot"}"#,
            r#"{"op":"ping"}"#,
            r#"{"id":-1,"op":"ping"}"#,
            r#"{"id":1,"op":"exec"}"#,
            r#"{"id":1,"op":"exec","argv":"ls"}"#,
        ] {
            assert!(serde_json::from_str::<Request>(line).is_err(), "{line}");
        }
    }

    #[test]
    fn responses_match_the_contract() {
        assert_eq!(to_value(&Response::ok(1)), json!({"id":1,"ok":true}));
        let out = ExecOutput {
            exit_code: Some(0),
            stdout: "hi\n".into(),
            ..Default::default()
        };
        let v = to_value(&Response::exec(2, out.clone()));
        assert_eq!(
            v,
            json!({"id":2,"ok":true,"exit_code":0,"signal":null,"timed_out":false,
                   "stdout":"hi\n","stderr":"","stdout_truncated":false,
                   "stderr_truncated":false})
        );
        assert_eq!(
            to_value(&Response::error(None, "bad")),
            json!({"id":null,"ok":false,"error":"bad"})
        );

        let back: Response = serde_json::from_value(v).unwrap();
        assert_eq!(back.exec, Some(out));
        let ping: Response = serde_json::from_str(r#"{"id":1,"ok":true}"#).unwrap();
        assert_eq!(ping, Response::ok(1));
        // The contract's example, without the truncation flags.
        let old: Response = serde_json::from_str(
            r#"{"id":2,"ok":true,"exit_code":0,"signal":null,"timed_out":false,"stdout":"","stderr":""}"#,
        )
        .unwrap();
        assert!(old.exec.unwrap().success());
    }

    #[test]
    fn status_text() {
        let mut o = ExecOutput {
            exit_code: Some(3),
            ..Default::default()
        };
        assert_eq!(o.status_text(), "exit code 3");
        o.exit_code = None;
        o.signal = Some(9);
        assert_eq!(o.status_text(), "killed by signal 9");
        o.timed_out = true;
        assert_eq!(o.status_text(), "timed out (killed by signal 9)");
        assert!(!o.success());
    }
}
