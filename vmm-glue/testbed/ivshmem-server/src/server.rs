//! The server: sockets, clients and the event loop.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use devlend_wire::{CtlLayout, WireError};

use crate::config::{Config, MAX_VECTORS};
use crate::ctl::{self, CtlError};
use crate::os::{send_msg, wait_readable, EventFd};
use vmm_sys_util::poll::PollToken;

/// The ivshmem protocol version this server speaks.
pub const PROTOCOL_VERSION: i64 = 0;

/// The message value that comes with the shared memory descriptor.
const SHM_MSG: i64 = -1;

/// Errors that stop the server from starting or running. Nothing a client
/// does is one of them.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The control area parameters do not make a valid layout.
    #[error("invalid control area parameters")]
    Layout(#[source] WireError),
    /// The control area size is not a power of two.
    #[error("control area size {0} is not a power of two (QEMU maps it as a PCI BAR)")]
    CtlSizeNotPowerOfTwo(u64),
    /// The vector count is out of range.
    #[error("{0} vectors: must be between 1 and {MAX_VECTORS}")]
    Vectors(u32),
    /// The control area could not be created.
    #[error(transparent)]
    Ctl(#[from] CtlError),
    /// Another server answers on a socket path.
    #[error("{path} is in use: another server is listening on it")]
    SocketInUse {
        /// The socket.
        path: PathBuf,
    },
    /// Something other than a socket is in the way.
    #[error("{path} exists and is not a socket; not replacing it")]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// A socket path could not be inspected, probed or replaced.
    #[error("cannot check or replace the old socket {path}")]
    OldSocket {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A listening socket could not be created.
    #[error("cannot listen on {path}")]
    Listen {
        /// The socket.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A listening socket could not be put in place.
    #[error("cannot move socket {from} to {to}")]
    Rename {
        /// The temporary path it was bound to.
        from: PathBuf,
        /// The final path.
        to: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The eventfds of the hosts could not be created.
    #[error("cannot create eventfds")]
    EventFd(#[source] io::Error),
    /// `poll` failed.
    #[error("poll failed")]
    Poll(#[source] io::Error),
}

/// A socket file this server created; unlinked on drop if it is still the
/// one we created (a newer server may have replaced it).
#[derive(Debug)]
struct SocketFile {
    path: PathBuf,
    dev_ino: Option<(u64, u64)>,
}

impl SocketFile {
    fn new(path: PathBuf) -> Self {
        let dev_ino = fs::symlink_metadata(&path).ok().map(|m| (m.dev(), m.ino()));
        SocketFile { path, dev_ino }
    }

    fn rename(&mut self, to: PathBuf) -> io::Result<()> {
        fs::rename(&self.path, &to)?;
        self.path = to;
        Ok(())
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let current = fs::symlink_metadata(&self.path)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        if current.is_some() && current == self.dev_ino {
            if let Err(e) = fs::remove_file(&self.path) {
                log::warn!("cannot remove {}: {e}", self.path.display());
            }
        }
    }
}

#[derive(Debug)]
struct Listener {
    sock: UnixListener,
    file: SocketFile,
}

/// One host id: its eventfds and, while it is connected, its client.
#[derive(Debug, Default)]
struct Host {
    /// The eventfds of its vectors. By default created at start and kept
    /// for the server's lifetime; with `notify_disconnects`, created per
    /// connection.
    vectors: Option<Vec<EventFd>>,
    /// Its client, while connected.
    conn: Option<Conn>,
}

/// A connected client.
#[derive(Debug)]
struct Conn {
    stream: UnixStream,
    /// Which hosts' eventfds this client has been sent.
    knows: Vec<bool>,
}

/// What a watched descriptor stands for. Handled in this order (see
/// [`Server::run`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Token {
    Stop,
    Peer(u32),
    Listener(u32),
}

impl PollToken for Token {
    fn as_raw_token(&self) -> u64 {
        match *self {
            Token::Stop => 0,
            Token::Peer(id) => 1 << 32 | u64::from(id),
            Token::Listener(id) => 2 << 32 | u64::from(id),
        }
    }

    fn from_raw_token(data: u64) -> Self {
        let id = data as u32;
        match data >> 32 {
            1 => Token::Peer(id),
            2 => Token::Listener(id),
            _ => Token::Stop,
        }
    }
}

/// The ivshmem server. [`Server::new`] sets everything up; [`Server::run`]
/// serves until told to stop; dropping it closes every connection and
/// removes its sockets (never the control area: the caller owns it).
///
/// Connected clients get no disconnect notifications when the server
/// stops: like with QEMU's server they keep ringing each other.
///
/// Unless [`Config::notify_disconnects`] is set, host ids keep their
/// eventfds for the server's lifetime and disconnects are not announced
/// (see there why): a client is sent each other host's eventfds once, when
/// it connects or when that host first connects after it.
#[derive(Debug)]
pub struct Server {
    config: Config,
    layout: CtlLayout,
    shm: File,
    listeners: Vec<Listener>,
    hosts: Vec<Host>,
}

/// Fails if `path` is held by a live server or by something that is not a
/// socket; a stale socket is fine (it will be replaced).
fn check_old_socket(path: &Path) -> Result<(), ServerError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(ServerError::OldSocket {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    if !meta.file_type().is_socket() {
        return Err(ServerError::NotASocket {
            path: path.to_path_buf(),
        });
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(ServerError::SocketInUse {
            path: path.to_path_buf(),
        }),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            log::info!("replacing stale socket {}", path.display());
            Ok(())
        }
        Err(source) => Err(ServerError::OldSocket {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Binds and listens on a temporary name next to `path`, so that `path`
/// only ever appears as a socket that already accepts connections.
fn listen_tmp(path: &Path, id: u32) -> Result<Listener, ServerError> {
    let tmp = path.with_file_name(format!(
        ".{}.{}.tmp",
        crate::socket_name(id),
        std::process::id()
    ));
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(ServerError::OldSocket { path: tmp, source }),
    }
    let sock = UnixListener::bind(&tmp).map_err(|source| ServerError::Listen {
        path: tmp.clone(),
        source,
    })?;
    let file = SocketFile::new(tmp.clone());
    sock.set_nonblocking(true)
        .map_err(|source| ServerError::Listen { path: tmp, source })?;
    Ok(Listener { sock, file })
}

impl Server {
    /// Validates `config`, listens on every host's socket, creates and
    /// formats the control area, and puts the sockets in place.
    ///
    /// When this returns, `doorbell-<i>.sock` exists for every host and
    /// accepts connections. On failure nothing is left behind.
    pub fn new(config: Config) -> Result<Self, ServerError> {
        if config.vectors == 0 || config.vectors > MAX_VECTORS {
            return Err(ServerError::Vectors(config.vectors));
        }
        if !config.ctl_size.is_power_of_two() {
            return Err(ServerError::CtlSizeNotPowerOfTwo(config.ctl_size));
        }
        let layout = CtlLayout::new(
            config.ctl_size,
            config.hosts,
            config.ring_slots,
            config.slot_size,
        )
        .map_err(ServerError::Layout)?;

        // Sockets first: if another server owns them, fail before touching
        // the control area (which --reuse would wipe).
        let mut listeners = Vec::new();
        for id in 0..config.hosts {
            let path = config.socket_path(id);
            check_old_socket(&path)?;
            listeners.push(listen_tmp(&path, id)?);
        }

        let mut hosts: Vec<Host> = (0..config.hosts).map(|_| Host::default()).collect();
        if !config.notify_disconnects {
            for host in &mut hosts {
                host.vectors = Some(new_vectors(config.vectors).map_err(ServerError::EventFd)?);
            }
        }

        let layout = layout.with_fabric_id(ctl::random_fabric_id()?);
        let shm = ctl::create(&config.ctl_path, &layout, config.reuse)?;

        for (id, l) in (0..).zip(listeners.iter_mut()) {
            let to = config.socket_path(id);
            if let Err(source) = l.file.rename(to.clone()) {
                if !config.reuse {
                    let _ = fs::remove_file(&config.ctl_path);
                }
                return Err(ServerError::Rename {
                    from: l.file.path.clone(),
                    to,
                    source,
                });
            }
        }
        log::info!(
            "serving {} hosts on {}/doorbell-*.sock, {} vectors each; control area {}: {layout}",
            config.hosts,
            config.socket_dir.display(),
            config.vectors,
            config.ctl_path.display()
        );
        Ok(Server {
            config,
            layout,
            shm,
            listeners,
            hosts,
        })
    }

    /// The control area's layout (with its fabric id).
    pub fn layout(&self) -> &CtlLayout {
        &self.layout
    }

    /// The configuration served.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Ids of the connected hosts.
    pub fn connected(&self) -> Vec<u32> {
        (0..)
            .zip(&self.hosts)
            .filter_map(|(id, h)| h.conn.as_ref().map(|_| id))
            .collect()
    }

    /// Serves clients until `stop` becomes readable (an eventfd that was
    /// written, a signalfd that got a signal). Returns an error only if
    /// `poll` itself fails.
    pub fn run(&mut self, stop: BorrowedFd<'_>) -> Result<(), ServerError> {
        loop {
            let mut fds = vec![(stop, Token::Stop)];
            for (id, host) in (0..).zip(&self.hosts) {
                if let Some(conn) = &host.conn {
                    fds.push((conn.stream.as_fd(), Token::Peer(id)));
                }
            }
            for (id, l) in (0..).zip(&self.listeners) {
                fds.push((l.sock.as_fd(), Token::Listener(id)));
            }
            let mut ready = wait_readable(&fds, None).map_err(ServerError::Poll)?;
            drop(fds);
            // Peers before listeners: a host that reconnects is seen to
            // have gone before its new connection is looked at.
            ready.sort_by_key(|r| r.token);
            for r in ready {
                match r.token {
                    Token::Stop => {
                        log::info!("stopping: closing {} client(s)", self.connected().len());
                        return Ok(());
                    }
                    Token::Peer(id) => self.peer_event(id, r.readable),
                    Token::Listener(id) => self.accept(id),
                }
            }
        }
    }

    /// Something happened on the connection of host `id` (`readable`, else
    /// it hung up or failed). Clients never send anything, so it is a
    /// disconnect either way.
    fn peer_event(&mut self, id: u32, readable: bool) {
        let Some(conn) = &self.hosts[id as usize].conn else {
            return;
        };
        let reason = if readable {
            let mut buf = [0u8; 64];
            match (&conn.stream).read(&mut buf) {
                Ok(0) => "closed the connection".to_owned(),
                Ok(n) => format!("sent {n} unexpected byte(s)"),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => format!("connection error: {e}"),
            }
        } else {
            "connection hung up".to_owned()
        };
        self.disconnect(id, reason);
    }

    /// Checks, without waiting, whether the connection of host `id` has
    /// gone, and handles that if so.
    fn reap_if_gone(&mut self, id: u32) {
        let Some(conn) = &self.hosts[id as usize].conn else {
            return;
        };
        match wait_readable(&[(conn.stream.as_fd(), ())], Some(Duration::ZERO)) {
            Ok(ready) => {
                if let Some(r) = ready.first() {
                    self.peer_event(id, r.readable);
                }
            }
            Err(e) => log::warn!("host {id}: cannot poll its connection: {e}"),
        }
    }

    fn accept(&mut self, id: u32) {
        loop {
            match self.listeners[id as usize].sock.accept() {
                Ok((stream, _)) => self.connect(id, stream),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                    ) => {}
                Err(e) => {
                    // E.g. out of descriptors: the connection stays
                    // queued; back off instead of spinning on it.
                    log::error!(
                        "accept on {} failed: {e}",
                        self.listeners[id as usize].file.path.display()
                    );
                    std::thread::sleep(Duration::from_millis(100));
                    return;
                }
            }
        }
    }

    /// A client connected on the socket of host `id`.
    fn connect(&mut self, id: u32, stream: UnixStream) {
        let sock_name = crate::socket_name(id);
        let idx = id as usize;
        if self.hosts[idx].conn.is_some() {
            // A host that reboots reconnects at once; its old connection
            // may have closed after the last poll.
            self.reap_if_gone(id);
        }
        if self.hosts[idx].conn.is_some() {
            log::warn!("refused a second client on {sock_name}: host {id} is connected");
            return;
        }
        if let Err(e) = stream.set_nonblocking(true) {
            log::error!("host {id}: cannot make its connection non-blocking, closing it: {e}");
            return;
        }
        let vectors = match self.hosts[idx].vectors.take() {
            Some(vectors) => {
                // The same eventfds as last time: forget rings that were
                // meant for the previous incarnation.
                for v in &vectors {
                    let _ = v.read();
                }
                vectors
            }
            None => match new_vectors(self.config.vectors) {
                Ok(v) => v,
                Err(e) => {
                    log::error!("host {id}: cannot create eventfds, closing the connection: {e}");
                    return;
                }
            },
        };
        let mut conn = Conn {
            stream,
            knows: vec![false; self.hosts.len()],
        };

        if let Err(e) = self.greet(id, &mut conn) {
            // Nobody has been told about this client yet.
            log::warn!("host {id}: connection on {sock_name} failed during setup: {e}");
            if !self.config.notify_disconnects {
                self.hosts[idx].vectors = Some(vectors);
            }
            return;
        }
        let mut broken = Vec::new();
        for (other_id, other) in self.hosts.iter_mut().enumerate() {
            let Some(other_conn) = other.conn.as_mut() else {
                continue;
            };
            if other_id == idx || other_conn.knows[idx] {
                continue;
            }
            match send_vectors(&other_conn.stream, id, &vectors) {
                Ok(()) => other_conn.knows[idx] = true,
                Err(e) => broken.push((
                    other_id as u32,
                    format!("cannot announce host {id} to it: {e}"),
                )),
            }
        }
        let own = send_vectors(&conn.stream, id, &vectors);
        self.hosts[idx].vectors = Some(vectors);
        let peers = self.connected();
        self.hosts[idx].conn = Some(conn);
        log::info!("host {id} connected on {sock_name}; peers connected: {peers:?}");
        if let Err(e) = own {
            broken.push((id, format!("cannot send it its own eventfds: {e}")));
        }
        for (bad, reason) in broken {
            self.disconnect(bad, reason);
        }
    }

    /// Steps 1 to 4 of the protocol to a new client of host `id`: version,
    /// id, shared memory, and the vectors of every other connected host.
    fn greet(&self, id: u32, conn: &mut Conn) -> io::Result<()> {
        let sock = &conn.stream;
        send_msg(sock, PROTOCOL_VERSION, None)?;
        send_msg(sock, id.into(), None)?;
        send_msg(sock, SHM_MSG, Some(self.shm.as_fd()))?;
        for (other_id, other) in self.hosts.iter().enumerate() {
            if other_id == id as usize || other.conn.is_none() {
                continue;
            }
            let vectors = other
                .vectors
                .as_deref()
                .expect("a connected host has eventfds");
            send_vectors(&conn.stream, other_id as u32, vectors)?;
            conn.knows[other_id] = true;
        }
        Ok(())
    }

    /// Drops the client of host `id`. With `notify_disconnects`, tells the
    /// others and closes its eventfds; a client that cannot be told is
    /// dropped in turn.
    fn disconnect(&mut self, id: u32, reason: String) {
        let mut work = vec![(id, reason)];
        while let Some((id, reason)) = work.pop() {
            let idx = id as usize;
            let Some(conn) = self.hosts[idx].conn.take() else {
                continue;
            };
            drop(conn);
            log::info!("host {id} disconnected: {reason}");
            if !self.config.notify_disconnects {
                continue;
            }
            for (other_id, other) in self.hosts.iter_mut().enumerate() {
                // Only clients that were told about it: QEMU frees a peer's
                // eventfd array on any disconnect message for it.
                let Some(other_conn) = other.conn.as_mut().filter(|c| c.knows[idx]) else {
                    continue;
                };
                match send_msg(&other_conn.stream, id.into(), None) {
                    Ok(()) => other_conn.knows[idx] = false,
                    Err(e) => work.push((
                        other_id as u32,
                        format!("cannot tell it host {id} disconnected: {e}"),
                    )),
                }
            }
            // Closing our copies; clients hold theirs until they process
            // the notification.
            self.hosts[idx].vectors = None;
        }
    }
}

/// Creates the eventfds of one host.
fn new_vectors(n: u32) -> io::Result<Vec<EventFd>> {
    (0..n).map(|_| EventFd::new()).collect()
}

/// Sends `id` once per vector, each with that vector's eventfd.
fn send_vectors(stream: &UnixStream, id: u32, vectors: &[EventFd]) -> io::Result<()> {
    vectors
        .iter()
        .try_for_each(|v| send_msg(stream, id.into(), Some(v.as_fd())))
}
