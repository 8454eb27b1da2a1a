//! A fake ivshmem client and a server running in a thread, for tests.

#![allow(dead_code)]

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

use devlend_ivshmem_server::{recv_msg, Config, EventFd, Server, ServerError};

pub const TIMEOUT: Duration = Duration::from_secs(10);

/// A server serving in a thread until dropped.
pub struct Running {
    dir: Option<tempfile::TempDir>,
    pub config: Config,
    pub fabric_id: u64,
    stop: EventFd,
    thread: Option<JoinHandle<Result<(), ServerError>>>,
}

impl Running {
    /// A server with the default behaviour (stable eventfds, silent
    /// disconnects).
    pub fn start(hosts: u32, vectors: u32) -> Self {
        Self::start_mode(hosts, vectors, false)
    }

    /// A server that announces disconnects, as QEMU's spec describes.
    pub fn start_notify(hosts: u32, vectors: u32) -> Self {
        Self::start_mode(hosts, vectors, true)
    }

    fn start_mode(hosts: u32, vectors: u32, notify_disconnects: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::new(dir.path(), hosts, dir.path().join("fabric.ctl"));
        config.vectors = vectors;
        config.notify_disconnects = notify_disconnects;
        Self::start_with(dir, config)
    }

    pub fn start_with(dir: tempfile::TempDir, config: Config) -> Self {
        let mut server = Server::new(config.clone()).unwrap();
        let fabric_id = server.layout().fabric_id();
        let stop = EventFd::new().unwrap();
        let stop2 = stop.try_clone().unwrap();
        let thread = std::thread::spawn(move || server.run(stop2.as_fd()));
        Running {
            dir: Some(dir),
            config,
            fabric_id,
            stop,
            thread: Some(thread),
        }
    }

    pub fn dir(&self) -> &Path {
        self.dir.as_ref().unwrap().path()
    }

    pub fn socket(&self, id: u32) -> PathBuf {
        self.config.socket_path(id)
    }

    pub fn connect(&self, id: u32) -> Client {
        Client::connect(&self.socket(id))
    }

    /// Stops the server and returns what `run` returned, and the
    /// directory (which still exists).
    pub fn stop(mut self) -> (Result<(), ServerError>, tempfile::TempDir) {
        self.stop.write(1).unwrap();
        let result = self.thread.take().unwrap().join().unwrap();
        (result, self.dir.take().unwrap())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.stop.write(1).unwrap();
            let _ = t.join();
        }
    }
}

/// A fake ivshmem client (what QEMU's ivshmem-doorbell does).
pub struct Client {
    pub stream: UnixStream,
}

/// One message as received.
#[derive(Debug)]
pub struct Msg {
    pub value: i64,
    pub fd: Option<OwnedFd>,
}

impl Client {
    pub fn connect(path: &Path) -> Self {
        let stream = UnixStream::connect(path).unwrap();
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        Client { stream }
    }

    /// The next message; panics on end of stream or timeout.
    pub fn recv(&self) -> Msg {
        match recv_msg(&self.stream) {
            Ok(Some((value, fd))) => Msg { value, fd },
            Ok(None) => panic!("server closed the connection"),
            Err(e) => panic!("no message from the server: {e}"),
        }
    }

    /// The next message, which must be `value` without a descriptor.
    pub fn expect(&self, value: i64) {
        let m = self.recv();
        assert_eq!(m.value, value, "unexpected message {m:?}");
        assert!(m.fd.is_none(), "message {value} came with a descriptor");
    }

    /// The next `n` messages, which must all be `value` with a
    /// descriptor; returns the descriptors as eventfds.
    pub fn expect_vectors(&self, value: i64, n: u32) -> Vec<EventFd> {
        (0..n)
            .map(|v| {
                let m = self.recv();
                assert_eq!(m.value, value, "vector {v}: unexpected message {m:?}");
                EventFd::from_owned(m.fd.expect("vector message without descriptor"))
            })
            .collect()
    }

    /// The three messages every client gets first; returns the shared
    /// memory descriptor.
    pub fn expect_greeting(&self, id: i64) -> OwnedFd {
        self.expect(0);
        self.expect(id);
        let m = self.recv();
        assert_eq!(m.value, -1, "expected the shared memory message, got {m:?}");
        m.fd.expect("shared memory message without descriptor")
    }

    /// Asserts that nothing more arrives within `wait`.
    pub fn expect_nothing(&self, wait: Duration) {
        self.stream.set_read_timeout(Some(wait)).unwrap();
        match recv_msg(&self.stream) {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            other => panic!("expected no message, got {other:?}"),
        }
        self.stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    }

    /// Asserts that the server closed the connection (after any messages
    /// still queued, which are returned).
    pub fn expect_closed(&self) -> Vec<Msg> {
        let mut msgs = Vec::new();
        loop {
            match recv_msg(&self.stream) {
                Ok(Some((value, fd))) => msgs.push(Msg { value, fd }),
                Ok(None) => return msgs,
                Err(e) => panic!("expected the server to close the connection: {e}"),
            }
        }
    }
}

/// Asserts that ringing `bell` (a peer's vector as another client got it)
/// interrupts exactly vector `v` of `own` (that peer's own vectors).
pub fn assert_rings(bell: &EventFd, own: &[EventFd], v: usize) {
    bell.write(1).unwrap();
    for (i, e) in own.iter().enumerate() {
        match e.read() {
            Ok(n) if i == v => assert_eq!(n, 1),
            Ok(n) => panic!("vector {v} rang vector {i} ({n})"),
            Err(err) if i != v && err.kind() == io::ErrorKind::WouldBlock => {}
            Err(err) => panic!("vector {i}: {err}"),
        }
    }
}
