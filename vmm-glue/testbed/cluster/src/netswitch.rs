//! One Ethernet segment shared by NICs of different hosts: a topology's
//! `network`. QEMU's own hubs live inside one QEMU process, so each host's
//! end of the network is a `stream` netdev connected to this switch's unix
//! socket (QEMU's framing: a 4-byte big-endian length, then the frame).
//!
//! Every frame goes to every other port, as a hub repeats it (the guests'
//! and hosts' NICs filter by MAC). Each port has a bounded queue and a
//! writer of its own: a port whose QEMU is stopped (a paused host) loses
//! its frames, as a switch drops on a full queue, instead of stalling the
//! others. A host's QEMU that is restarted connects again as a new port.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Frames queued for one port before it loses frames.
const PORT_QUEUE: usize = 512;
/// The largest frame accepted: QEMU's `NET_BUFSIZE` (4096 + 65536), the
/// most a QEMU netdev sends or takes at once; a longer length means a
/// broken stream.
const MAX_FRAME: usize = 4096 + 65_536;

#[derive(Debug)]
struct Port {
    id: u64,
    tx: SyncSender<Arc<Vec<u8>>>,
    /// Kept to cut the connection when the switch stops.
    stream: UnixStream,
}

#[derive(Debug, Default)]
struct Shared {
    ports: Mutex<Vec<Port>>,
    stop: AtomicBool,
    next_id: AtomicU64,
    /// Frames dropped because a port's queue was full.
    dropped: AtomicU64,
}

/// A running switch for one network. Dropping it stops it and removes its
/// socket.
#[derive(Debug)]
pub struct NetSwitch {
    path: PathBuf,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl NetSwitch {
    /// Listens on `path` (replacing a stale socket there).
    pub fn start(path: &Path) -> io::Result<NetSwitch> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        let shared = Arc::new(Shared::default());
        let s = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("netswitch".into())
            .spawn(move || accept_loop(&listener, &s))?;
        Ok(NetSwitch {
            path: path.to_owned(),
            shared,
            accept: Some(accept),
        })
    }

    /// The socket QEMU connects to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Ports connected now.
    pub fn ports(&self) -> usize {
        lock(&self.shared).len()
    }

    /// Frames lost to full port queues so far.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

impl Drop for NetSwitch {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop with a connection of our own.
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for p in lock(&self.shared).drain(..) {
            let _ = p.stream.shutdown(Shutdown::Both);
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Vec<Port>> {
    // A panicking port thread cannot leave the list half-changed.
    s.ports.lock().unwrap_or_else(|e| e.into_inner())
}

fn accept_loop(listener: &UnixListener, shared: &Arc<Shared>) {
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(conn) = conn else { continue };
        if let Err(e) = add_port(conn, shared) {
            log::warn!("netswitch: cannot add a port: {e}");
        }
    }
}

fn add_port(conn: UnixStream, shared: &Arc<Shared>) -> io::Result<()> {
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = sync_channel::<Arc<Vec<u8>>>(PORT_QUEUE);
    let mut out = conn.try_clone()?;
    let keep = conn.try_clone()?;
    std::thread::Builder::new()
        .name(format!("netswitch-w{id}"))
        .spawn(move || {
            for frame in rx {
                let len = (frame.len() as u32).to_be_bytes();
                if out
                    .write_all(&len)
                    .and_then(|()| out.write_all(&frame))
                    .is_err()
                {
                    break;
                }
            }
        })?;
    lock(shared).push(Port {
        id,
        tx,
        stream: keep,
    });
    let s = Arc::clone(shared);
    std::thread::Builder::new()
        .name(format!("netswitch-r{id}"))
        .spawn(move || {
            read_port(conn, id, &s);
            let mut ports = lock(&s);
            if let Some(i) = ports.iter().position(|p| p.id == id) {
                let p = ports.swap_remove(i);
                let _ = p.stream.shutdown(Shutdown::Both);
            }
        })?;
    Ok(())
}

/// Repeats every frame port `id` sends to the other ports, until its
/// connection ends or breaks framing.
fn read_port(mut conn: UnixStream, id: u64, shared: &Shared) {
    let mut len = [0u8; 4];
    loop {
        if conn.read_exact(&mut len).is_err() {
            return;
        }
        let n = u32::from_be_bytes(len) as usize;
        if n > MAX_FRAME {
            log::warn!("netswitch: port {id} sent a {n}-byte frame; dropping the port");
            return;
        }
        let mut frame = vec![0u8; n];
        if conn.read_exact(&mut frame).is_err() {
            return;
        }
        let frame = Arc::new(frame);
        for p in lock(shared).iter().filter(|p| p.id != id) {
            if p.tx.try_send(Arc::clone(&frame)).is_err() {
                shared.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn send(s: &mut UnixStream, frame: &[u8]) {
        s.write_all(&(frame.len() as u32).to_be_bytes()).unwrap();
        s.write_all(frame).unwrap();
    }

    fn recv(s: &mut UnixStream) -> Vec<u8> {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).unwrap();
        let mut f = vec![0u8; u32::from_be_bytes(len) as usize];
        s.read_exact(&mut f).unwrap();
        f
    }

    fn wait_ports(sw: &NetSwitch, n: usize) {
        let end = Instant::now() + Duration::from_secs(5);
        while sw.ports() != n {
            assert!(Instant::now() < end, "{} ports, not {n}", sw.ports());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn frames_reach_every_other_port_and_not_the_sender() {
        let dir = tempfile::tempdir().unwrap();
        let sw = NetSwitch::start(&dir.path().join("lan.sock")).unwrap();
        let mut a = UnixStream::connect(sw.path()).unwrap();
        let mut b = UnixStream::connect(sw.path()).unwrap();
        let mut c = UnixStream::connect(sw.path()).unwrap();
        wait_ports(&sw, 3);
        for s in [&a, &b, &c] {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        send(&mut a, b"from a");
        assert_eq!(recv(&mut b), b"from a");
        assert_eq!(recv(&mut c), b"from a");
        send(&mut c, &[7u8; 1514]);
        assert_eq!(recv(&mut a), [7u8; 1514]);
        assert_eq!(recv(&mut b), [7u8; 1514]);
        // a got nothing of its own: the next frame it reads is b's.
        send(&mut b, b"from b");
        assert_eq!(recv(&mut a), b"from b");
        assert_eq!(recv(&mut c), b"from b");
    }

    #[test]
    fn a_port_that_leaves_or_breaks_framing_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let sw = NetSwitch::start(&dir.path().join("lan.sock")).unwrap();
        let mut a = UnixStream::connect(sw.path()).unwrap();
        let b = UnixStream::connect(sw.path()).unwrap();
        let mut bad = UnixStream::connect(sw.path()).unwrap();
        wait_ports(&sw, 3);
        drop(b);
        wait_ports(&sw, 2);
        bad.write_all(&u32::MAX.to_be_bytes()).unwrap();
        wait_ports(&sw, 1);
        // A new connection (a restarted QEMU) is a port again.
        let mut again = UnixStream::connect(sw.path()).unwrap();
        again
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        wait_ports(&sw, 2);
        send(&mut a, b"hello");
        assert_eq!(recv(&mut again), b"hello");
    }

    #[test]
    fn a_stalled_port_loses_frames_without_stalling_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let sw = NetSwitch::start(&dir.path().join("lan.sock")).unwrap();
        let mut a = UnixStream::connect(sw.path()).unwrap();
        let mut b = UnixStream::connect(sw.path()).unwrap();
        // Never read: its socket buffer and then its queue fill up.
        let _stalled = UnixStream::connect(sw.path()).unwrap();
        wait_ports(&sw, 3);
        b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // In lockstep, so b's own queue never fills.
        let frame = vec![1u8; 9000];
        for _ in 0..2000 {
            send(&mut a, &frame);
            assert_eq!(recv(&mut b).len(), 9000);
        }
        assert!(sw.dropped() > 0, "the stalled port lost nothing");
    }

    #[test]
    fn stopping_removes_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lan.sock");
        let sw = NetSwitch::start(&path).unwrap();
        let _a = UnixStream::connect(&path).unwrap();
        wait_ports(&sw, 1);
        drop(sw);
        assert!(!path.exists());
    }
}
