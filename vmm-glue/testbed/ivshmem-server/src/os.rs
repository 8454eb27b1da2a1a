//! The system interfaces the server needs beyond std, taken from
//! vmm-sys-util (rust-vmm): eventfds, waiting on descriptors, and one
//! 8-byte message with an optional file descriptor over a UNIX socket
//! (`SCM_RIGHTS`).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use vmm_sys_util::eventfd::{EventFd as VmmEventFd, EFD_NONBLOCK};
use vmm_sys_util::poll::{PollContext, PollToken};
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

/// An eventfd: the doorbell of one interrupt vector of one peer.
///
/// Created close-on-exec and non-blocking, like QEMU's own event
/// notifiers. The counter is a native-endian `u64`.
#[derive(Debug)]
pub struct EventFd(VmmEventFd);

impl EventFd {
    /// A new eventfd with counter 0.
    pub fn new() -> io::Result<Self> {
        VmmEventFd::new(EFD_NONBLOCK | libc::EFD_CLOEXEC).map(EventFd)
    }

    /// Wraps a descriptor received from elsewhere (e.g. from the server).
    pub fn from_owned(fd: OwnedFd) -> Self {
        // SAFETY: into_raw_fd() hands over ownership of an open
        // descriptor, which the new EventFd now alone closes.
        EventFd(unsafe { VmmEventFd::from_raw_fd(fd.into_raw_fd()) })
    }

    /// Adds `value` to the counter: rings the doorbell.
    pub fn write(&self, value: u64) -> io::Result<()> {
        self.0.write(value)
    }

    /// Reads and resets the counter; [`io::ErrorKind::WouldBlock`] if it is
    /// zero and the descriptor is non-blocking.
    pub fn read(&self) -> io::Result<u64> {
        self.0.read()
    }

    /// Another descriptor for the same eventfd.
    pub fn try_clone(&self) -> io::Result<Self> {
        self.0.try_clone().map(EventFd)
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor is owned by `self.0` and stays open for
        // as long as `self` is borrowed.
        unsafe { BorrowedFd::borrow_raw(self.0.as_raw_fd()) }
    }
}

/// What a descriptor watched by [`wait_readable`] stands for.
pub(crate) trait Token: PollToken + Copy {}
impl<T: PollToken + Copy> Token for T {}

/// A descriptor that has something to say: `readable` when data (or end
/// of stream) waits, else it hung up or failed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ready<T> {
    pub token: T,
    pub readable: bool,
}

/// Waits until one of `fds` is readable, hangs up or fails (or `timeout`
/// passes; `None` waits for ever); returns every one that did.
pub(crate) fn wait_readable<T: Token>(
    fds: &[(BorrowedFd<'_>, T)],
    timeout: Option<Duration>,
) -> io::Result<Vec<Ready<T>>> {
    let mut ctx = PollContext::new()?;
    // A new context each time: hangups are reported, not a busy loop.
    ctx.set_check_for_hangup(false);
    for (fd, token) in fds {
        ctx.add(fd, *token)?;
    }
    let events = match timeout {
        Some(t) => ctx.wait_timeout(t)?,
        None => ctx.wait()?,
    };
    Ok(events
        .iter()
        .map(|e| Ready {
            token: e.token(),
            readable: e.readable(),
        })
        .collect())
}

/// Sends one ivshmem protocol message: `value` as 8 little-endian bytes,
/// with `fd` attached if given.
///
/// Never raises SIGPIPE, and never blocks on the server's clients, whose
/// sockets are non-blocking: a client whose socket buffer is full gets
/// [`io::ErrorKind::WouldBlock`], a closed one `BrokenPipe`.
pub fn send_msg(sock: &UnixStream, value: i64, fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
    let bytes = value.to_le_bytes();
    let fds: Vec<_> = fd.iter().map(AsRawFd::as_raw_fd).collect();
    let n = sock.send_with_fds(&[&bytes[..]], &fds)?;
    if n != bytes.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("short send: {n} of {} bytes", bytes.len()),
        ));
    }
    Ok(())
}

/// Receives one ivshmem protocol message: the 8-byte little-endian value
/// and the descriptor that came with it, if any. `Ok(None)` at end of
/// stream before a message. Blocks unless the socket is non-blocking (or
/// has a read timeout, which then fails with `WouldBlock`).
///
/// This is the client side of the protocol, for tests and diagnostics.
/// More than one descriptor with a message is an error (they are closed).
/// Received descriptors are not close-on-exec: vmm-sys-util's receive
/// does not ask for `MSG_CMSG_CLOEXEC`.
pub fn recv_msg(sock: &UnixStream) -> io::Result<Option<(i64, Option<OwnedFd>)>> {
    let mut bytes = [0u8; 8];
    let mut got = 0;
    let mut fds: Vec<OwnedFd> = Vec::new();
    while got < bytes.len() {
        let (n, file) = match sock.recv_with_fd(&mut bytes[got..]) {
            Ok(r) => r,
            Err(e) if e.errno() == libc::EINTR => continue,
            Err(e) if e.errno() == libc::ENOBUFS => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "more than one descriptor with one message (they were closed)",
                ))
            }
            Err(e) => return Err(e.into()),
        };
        fds.extend(file.map(OwnedFd::from));
        if n == 0 {
            if got == 0 && fds.is_empty() {
                return Ok(None);
            }
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got += n;
    }
    if fds.len() > 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} descriptors with one message", fds.len()),
        ));
    }
    Ok(Some((i64::from_le_bytes(bytes), fds.pop())))
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    #[test]
    fn message_with_and_without_fd() {
        let (a, b) = UnixStream::pair().unwrap();
        let ev = EventFd::new().unwrap();
        send_msg(&a, 7, None).unwrap();
        send_msg(&a, -1, Some(ev.as_fd())).unwrap();
        let (v, fd) = recv_msg(&b).unwrap().unwrap();
        assert_eq!((v, fd.is_none()), (7, true));
        let (v, fd) = recv_msg(&b).unwrap().unwrap();
        assert_eq!(v, -1);
        // The received descriptor is the same eventfd.
        let other = EventFd::from_owned(fd.unwrap());
        other.write(3).unwrap();
        assert_eq!(ev.read().unwrap(), 3);
        assert_eq!(
            ev.read().unwrap_err().kind(),
            io::ErrorKind::WouldBlock,
            "reading resets the counter"
        );
        drop(a);
        assert!(recv_msg(&b).unwrap().is_none());
    }

    #[test]
    fn values_are_little_endian() {
        let (a, b) = UnixStream::pair().unwrap();
        send_msg(&a, 0x0102_0304_0506_0708, None).unwrap();
        let mut raw = [0u8; 8];
        (&b).read_exact(&mut raw).unwrap();
        assert_eq!(raw, [8, 7, 6, 5, 4, 3, 2, 1]);
    }

    #[test]
    fn send_to_closed_peer_fails_without_sigpipe() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(b);
        let err = send_msg(&a, 1, None).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn send_to_full_nonblocking_socket_would_block() {
        let (a, _b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let err = (0..1_000_000)
            .find_map(|_| send_msg(&a, 1, None).err())
            .expect("the socket buffer never filled");
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn truncated_message_is_an_error() {
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(&[1, 2, 3]).unwrap();
        drop(a);
        assert_eq!(
            recv_msg(&b).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }

    #[test]
    fn waits_report_readable_and_hung_up() {
        let ev = EventFd::new().unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        let fds = [(ev.as_fd(), 1u32), (a.as_fd(), 2u32)];
        let zero = Some(Duration::ZERO);
        assert!(wait_readable(&fds, zero).unwrap().is_empty());
        ev.write(1).unwrap();
        let r = wait_readable(&fds, zero).unwrap();
        assert_eq!((r.len(), r[0].token, r[0].readable), (1, 1, true));
        ev.read().unwrap();
        drop(b);
        let r = wait_readable(&fds, zero).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].token, 2);
    }
}
