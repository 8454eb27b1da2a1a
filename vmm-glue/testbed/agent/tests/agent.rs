//! The real agent binary against the real client, with the test playing
//! QEMU: a unix socket server (one connection at a time, like
//! `-chardev socket,server=on,wait=off`) bridged to a pty whose slave side
//! the agent serves on (`--port`). Bytes the agent writes while no client
//! is connected are dropped.

use std::ffi::CStr;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::Shutdown;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use devlend_agent::protocol::MAX_LINE;
use devlend_agent::{AgentClient, AgentError, ExecRequest};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(5);

type Current = Arc<Mutex<Option<UnixStream>>>;

/// One emulated "host": an agent process, its pty and the socket bridge.
struct Host {
    dir: tempfile::TempDir,
    sock: PathBuf,
    agent: Option<Child>,
    /// The connected client's stream, as seen by the bridge.
    current: Current,
}

impl Host {
    fn start() -> Host {
        Self::start_with(&[])
    }

    fn start_with(args: &[&str]) -> Host {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("agent.sock");
        let (master, slave) = open_pty();
        let current = bridge(&sock, master);
        let agent = Some(spawn_agent(dir.path(), &slave, args));
        Host {
            dir,
            sock,
            agent,
            current,
        }
    }

    fn client(&self) -> AgentClient {
        AgentClient::connect_ready(&self.sock, T).unwrap()
    }

    fn raw(&self) -> Raw {
        let stream = UnixStream::connect(&self.sock).unwrap();
        stream.set_read_timeout(Some(T)).unwrap();
        Raw {
            reader: BufReader::new(stream.try_clone().unwrap()),
            stream,
        }
    }

    fn agent_pid(&self) -> u32 {
        self.agent.as_ref().unwrap().id()
    }

    /// Closes the bridge's side of the current connection, as QEMU does when
    /// it shuts down.
    fn drop_connection(&self) {
        if let Some(conn) = self.current.lock().unwrap().take() {
            conn.shutdown(Shutdown::Both).unwrap();
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            let _ = agent.kill();
            let _ = agent.wait();
        }
        if thread::panicking() {
            let log = fs::read_to_string(self.dir.path().join("agent.log")).unwrap_or_default();
            eprintln!("--- agent log ---\n{log}");
        }
    }
}

fn spawn_agent(dir: &Path, port: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_devlend-agent"))
        .arg("--port")
        .arg(port)
        .args(args)
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(dir.join("agent.log")).unwrap())
        .spawn()
        .unwrap()
}

/// A raw pty pair: (master, slave path).
fn open_pty() -> (File, PathBuf) {
    // SAFETY: plain system call returning a new descriptor or -1.
    let fd = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) };
    assert!(fd >= 0, "posix_openpt: {}", io::Error::last_os_error());
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let master = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: `fd` is an open pty master, `name` is writable for its length,
    // and `tio` is plain data filled by tcgetattr before use.
    let slave = unsafe {
        assert_eq!(libc::grantpt(fd), 0);
        assert_eq!(libc::unlockpt(fd), 0);
        assert_eq!(libc::ptsname_r(fd, name.as_mut_ptr(), name.len()), 0);
        // Raw mode on the master applies to the slave: no echo, no line
        // editing, no 4 KiB canonical line limit.
        let mut tio: libc::termios = std::mem::zeroed();
        assert_eq!(libc::tcgetattr(fd, &mut tio), 0);
        libc::cfmakeraw(&mut tio);
        assert_eq!(libc::tcsetattr(fd, libc::TCSANOW, &tio), 0);
        CStr::from_ptr(name.as_ptr())
    };
    (master, PathBuf::from(slave.to_str().unwrap()))
}

/// Serves `sock` like QEMU's chardev and relays to and from the pty master.
fn bridge(sock: &Path, master: File) -> Current {
    let listener = UnixListener::bind(sock).unwrap();
    let current: Current = Arc::default();
    let to_port = master.try_clone().unwrap();
    let cur = Arc::clone(&current);
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            *cur.lock().unwrap() = Some(conn.try_clone().unwrap());
            let _ = io::copy(&mut &conn, &mut &to_port);
            *cur.lock().unwrap() = None;
        }
    });
    let cur = Arc::clone(&current);
    thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // EIO once the agent is gone and the slave is closed.
            let n = match (&master).read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let mut cur = cur.lock().unwrap();
            if let Some(conn) = cur.as_mut() {
                if conn.write_all(&buf[..n]).is_err() {
                    *cur = None;
                }
            }
        }
    });
    current
}

/// A bare connection, for sending what the client never would.
struct Raw {
    stream: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Raw {
    fn send(&mut self, line: &[u8]) {
        self.stream.write_all(line).unwrap();
        self.stream.write_all(b"\n").unwrap();
    }

    fn recv(&mut self) -> Value {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }
}

/// Waits until `pid` no longer exists (killed *and* reaped).
fn gone(pid: u32, within: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < within {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    false
}

fn exec_req(argv: &[&str]) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        timeout_ms: Some(5000),
        ..Default::default()
    }
}

#[test]
fn ping_exec_output_and_exit_codes() {
    let host = Host::start();
    let c = host.client();
    c.ping(T).unwrap();

    let out = c.sh("echo out; echo err >&2; exit 3", T).unwrap();
    assert_eq!(
        (out.exit_code, out.signal, out.timed_out),
        (Some(3), None, false)
    );
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("out\n", "err\n")
    );
    assert!(!out.success() && !out.stdout_truncated && !out.stderr_truncated);

    assert!(c.exec(&["true"], T).unwrap().success());
    assert_eq!(c.exec_ok(&["echo", "a", "b"], T).unwrap(), "a b\n");
    assert_eq!(c.sh_ok("printf 'x y'", T).unwrap(), "x y");
    // Output that is not UTF-8 arrives lossily decoded.
    assert_eq!(c.sh_ok(r"printf '\377ok'", T).unwrap(), "\u{fffd}ok");

    let err = c
        .sh_ok("echo partial; echo boom >&2; exit 7", T)
        .unwrap_err();
    let AgentError::CommandFailed(f) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(f.command, "echo partial; echo boom >&2; exit 7");
    assert_eq!((f.exit_code, f.signal, f.timed_out), (Some(7), None, false));
    assert_eq!(
        (f.stdout.as_str(), f.stderr.as_str()),
        ("partial\n", "boom\n")
    );
    let text = err.to_string();
    for part in [
        "exit code 7",
        "boom",
        "partial",
        host.sock.to_str().unwrap(),
    ] {
        assert!(text.contains(part), "{part:?} not in {text:?}");
    }
}

#[test]
fn stdin_env_cwd_and_spawn_errors() {
    let host = Host::start();
    let c = host.client();

    let mut req = exec_req(&["cat"]);
    req.stdin = Some("line1\nline2".into());
    assert_eq!(c.run(&req).unwrap().stdout, "line1\nline2");

    // More than a pipe holds, fed while the output is drained.
    req.stdin = Some("z".repeat(600 * 1024));
    let out = c.run(&req).unwrap();
    assert_eq!(out.stdout.len(), 600 * 1024);

    // A child that does not read its stdin is not an error.
    let mut req = exec_req(&["true"]);
    req.stdin = Some("z".repeat(600 * 1024));
    assert!(c.run(&req).unwrap().success());

    // Without stdin the child reads /dev/null.
    assert_eq!(c.exec_ok(&["cat"], T).unwrap(), "");

    let mut req = exec_req(&["sh", "-c", r#"echo "$DEVLEND_X"; pwd"#]);
    req.env = Some([("DEVLEND_X".to_string(), "y z".to_string())].into());
    req.cwd = Some("/tmp".into());
    assert_eq!(c.run(&req).unwrap().stdout, "y z\n/tmp\n");

    req.cwd = Some("/nonexistent-dir".into());
    let err = c.run(&req).unwrap_err();
    assert!(
        matches!(&err, AgentError::Remote { message, .. } if message.contains("/nonexistent-dir")),
        "{err:?}"
    );

    let err = c.exec(&["/nonexistent/program"], T).unwrap_err();
    assert!(
        matches!(&err, AgentError::Remote { message, .. } if message.contains("/nonexistent/program")),
        "{err:?}"
    );
    let err = c.exec(&[], T).unwrap_err();
    assert!(matches!(&err, AgentError::Remote { message, .. } if message.contains("empty")));

    // The agent still works after all that.
    c.ping(T).unwrap();
}

#[test]
fn signal_killed_child() {
    let host = Host::start();
    let c = host.client();
    let out = c.sh("echo before; kill -TERM $$", T).unwrap();
    assert_eq!(
        (out.exit_code, out.signal, out.timed_out),
        (None, Some(libc::SIGTERM), false)
    );
    assert_eq!(out.stdout, "before\n");
    assert_eq!(out.status_text(), "killed by signal 15");
}

#[test]
fn timeout_kills_the_whole_process_group() {
    let host = Host::start();
    let c = host.client();
    let start = Instant::now();
    let out = c
        .sh("sleep 100 & echo $!; sleep 100", Duration::from_millis(300))
        .unwrap();
    let elapsed = start.elapsed();
    assert!(out.timed_out, "{out:?}");
    assert_eq!((out.exit_code, out.signal), (None, Some(libc::SIGKILL)));
    assert!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(3),
        "{elapsed:?}"
    );
    // Output written before the kill is kept.
    let bg: u32 = out.stdout.trim().parse().unwrap();
    // The background sleep was killed too, and reaped by the agent (its
    // subreaper) rather than left a zombie.
    assert!(gone(bg, Duration::from_secs(2)), "pid {bg} survived");
}

#[test]
fn orphans_are_reaped_and_lingering_pipes_do_not_block() {
    let host = Host::start();
    let c = host.client();
    let out = c.sh_ok("sleep 0.3 >/dev/null 2>&1 & echo $!", T).unwrap();
    let orphan: u32 = out.trim().parse().unwrap();
    // Its shell is gone, so it was handed to the agent (the subreaper)...
    let stat = fs::read_to_string(format!("/proc/{orphan}/stat")).unwrap();
    let ppid: u32 = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(ppid, host.agent_pid());
    // ...which reaps it when it exits instead of leaving a zombie.
    assert!(
        gone(orphan, Duration::from_secs(3)),
        "orphan {orphan} not reaped"
    );

    // A background process holding stdout open does not hold up the answer.
    let start = Instant::now();
    assert_eq!(c.sh_ok("sleep 2 & echo started", T).unwrap(), "started\n");
    assert!(
        start.elapsed() < Duration::from_millis(1500),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn concurrent_requests_are_answered_out_of_order() {
    let host = Host::start();
    let c = host.client();
    thread::scope(|s| {
        let slow = s.spawn(|| c.sh_ok("sleep 0.8; echo slow", T).unwrap());
        thread::sleep(Duration::from_millis(100));
        let start = Instant::now();
        assert_eq!(c.sh_ok("echo fast", T).unwrap(), "fast\n");
        assert!(start.elapsed() < Duration::from_millis(500));
        assert!(!slow.is_finished());

        let many: Vec<_> = (0..16)
            .map(|i| {
                let c = &c;
                s.spawn(move || (i, c.sh_ok(&format!("echo {i}"), T).unwrap()))
            })
            .collect();
        for h in many {
            let (i, out) = h.join().unwrap();
            assert_eq!(out, format!("{i}\n"));
        }
        assert_eq!(slow.join().unwrap(), "slow\n");
    });
}

#[test]
fn malformed_input_gets_errors_and_the_agent_survives() {
    let host = Host::start();
    let mut raw = host.raw();

    raw.send(b"{not json");
    let resp = raw.recv();
    assert_eq!(
        (&resp["id"], &resp["ok"]),
        (&Value::Null, &json!(false)),
        "{resp}"
    );
    assert!(resp["error"].as_str().unwrap().contains("malformed JSON"));

    raw.send(br#"{"id":7,"op":"reboot"}"#);
    let resp = raw.recv();
    assert_eq!(
        (&resp["id"], &resp["ok"]),
        (&json!(7), &json!(false)),
        "{resp}"
    );

    raw.send(br#"{"id":8,"op":"exec","argv":[]}"#);
    let resp = raw.recv();
    assert_eq!(
        (&resp["id"], &resp["ok"]),
        (&json!(8), &json!(false)),
        "{resp}"
    );

    raw.send(b"\xff\xfe");
    assert_eq!(raw.recv()["id"], Value::Null);

    // Blank lines are ignored; CRLF is accepted.
    raw.send(b"");
    raw.send(b"{\"id\":9,\"op\":\"ping\"}\r");
    assert_eq!(raw.recv(), json!({"id":9,"ok":true}));
}

#[test]
fn over_long_lines_are_rejected() {
    let host = Host::start();
    let mut raw = host.raw();
    raw.send(&vec![b'a'; 2 * MAX_LINE]);
    let resp = raw.recv();
    assert_eq!(
        (&resp["id"], &resp["ok"]),
        (&Value::Null, &json!(false)),
        "{resp}"
    );
    assert!(resp["error"].as_str().unwrap().contains("longer than"));
    raw.send(br#"{"id":1,"op":"ping"}"#);
    assert_eq!(raw.recv(), json!({"id":1,"ok":true}));
    drop(raw);

    // The client refuses to send such a line in the first place.
    let c = host.client();
    let mut req = exec_req(&["cat"]);
    req.stdin = Some("x".repeat(MAX_LINE));
    let err = c.run(&req).unwrap_err();
    assert!(matches!(err, AgentError::RequestTooLarge { .. }), "{err:?}");
    c.ping(T).unwrap();
}

#[test]
fn output_is_capped() {
    let host = Host::start_with(&["--output-cap", "1000"]);
    let c = host.client();
    let out = c
        .sh("head -c 300000 /dev/zero | tr '\\0' a; echo err >&2", T)
        .unwrap();
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout, "a".repeat(1000));
    assert!(out.stdout_truncated && !out.stderr_truncated);
    assert_eq!(out.stderr, "err\n");
}

#[test]
fn reconnecting_clients_and_stale_responses() {
    let host = Host::start();

    // A client leaves with requests in flight (ids a new client could use).
    let mut raw = host.raw();
    for id in 1..=20 {
        raw.send(
            json!({"id": id, "op": "exec", "argv": ["sh", "-c", "sleep 0.3; echo stale"],
                   "timeout_ms": 5000})
            .to_string()
            .as_bytes(),
        );
    }
    drop(raw);

    // The next one is not confused by their answers.
    let c = host.client();
    assert_eq!(c.sh_ok("sleep 0.5; echo fresh", T).unwrap(), "fresh\n");
    drop(c);

    // The connection breaking under a waiting request is reported as such.
    let c = host.client();
    thread::scope(|s| {
        let waiting = s.spawn(|| c.sh("sleep 1", T));
        thread::sleep(Duration::from_millis(200));
        host.drop_connection();
        let err = waiting.join().unwrap().unwrap_err();
        assert!(matches!(err, AgentError::Disconnected { .. }), "{err:?}");
    });
    let err = c.ping(T).unwrap_err();
    assert!(matches!(err, AgentError::Disconnected { .. }), "{err:?}");

    let c = host.client();
    c.ping(T).unwrap();
}

#[test]
fn connect_ready_waits_for_socket_and_agent() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("agent.sock");
    let (master, slave) = open_pty();
    let mut host = thread::scope(|s| {
        let starter = s.spawn(|| {
            thread::sleep(Duration::from_millis(150));
            let current = bridge(&sock, master);
            thread::sleep(Duration::from_millis(300));
            (spawn_agent(dir.path(), &slave, &[]), current)
        });
        let c = AgentClient::connect_ready(&sock, T).unwrap();
        assert_eq!(c.sh_ok("echo up", T).unwrap(), "up\n");
        starter.join().unwrap()
    });
    let _ = host.0.kill();
    let _ = host.0.wait();
}

#[test]
fn not_ready_and_connect_errors_name_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.sock");
    let err = AgentClient::connect(&missing).unwrap_err();
    assert!(matches!(err, AgentError::Connect { .. }), "{err:?}");
    assert!(err.to_string().contains("missing.sock"));

    // A socket that accepts but where no agent answers (QEMU before boot).
    let sock = dir.path().join("agent.sock");
    let (master, _slave) = open_pty();
    let _current = bridge(&sock, master);
    let start = Instant::now();
    let err = AgentClient::connect_ready(&sock, Duration::from_millis(500)).unwrap_err();
    assert!(matches!(err, AgentError::NotReady { .. }), "{err:?}");
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(err.to_string().contains("agent.sock"));
}

#[test]
fn end_of_file_on_the_port_is_waited_out() {
    // /dev/null reads as a virtio-serial port with nobody on the outer side.
    let dir = tempfile::tempdir().unwrap();
    let mut agent = spawn_agent(dir.path(), Path::new("/dev/null"), &[]);
    thread::sleep(Duration::from_millis(400));
    let alive = agent.try_wait().unwrap().is_none();
    let _ = agent.kill();
    let _ = agent.wait();
    let log = fs::read_to_string(dir.path().join("agent.log")).unwrap();
    assert!(alive, "agent exited on EOF:\n{log}");
    assert!(log.contains("serving on /dev/null"), "{log}");
    assert_eq!(log.matches("not connected").count(), 1, "{log}");
}
