//! The few system interfaces the server needs that std does not wrap:
//! eventfds, `poll`, and one 8-byte message with an optional file
//! descriptor over a UNIX socket (`SCM_RIGHTS`).

use std::fs::File;
use std::io::{self, Read, Write};
use std::mem::{size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;

/// An eventfd: the doorbell of one interrupt vector of one peer.
///
/// Created close-on-exec and non-blocking, like QEMU's own event
/// notifiers. The counter is a native-endian `u64`.
#[derive(Debug)]
pub struct EventFd(File);

impl EventFd {
    /// A new eventfd with counter 0.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd() takes no pointers; it returns a new descriptor
        // or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd(), is open, and is
        // owned by nothing else.
        Ok(EventFd(File::from(unsafe { OwnedFd::from_raw_fd(fd) })))
    }

    /// Wraps a descriptor received from elsewhere (e.g. from the server).
    pub fn from_owned(fd: OwnedFd) -> Self {
        EventFd(File::from(fd))
    }

    /// Adds `value` to the counter: rings the doorbell.
    pub fn write(&self, value: u64) -> io::Result<()> {
        (&self.0).write_all(&value.to_ne_bytes())
    }

    /// Reads and resets the counter; [`io::ErrorKind::WouldBlock`] if it is
    /// zero and the descriptor is non-blocking.
    pub fn read(&self) -> io::Result<u64> {
        let mut buf = [0u8; 8];
        (&self.0).read_exact(&mut buf)?;
        Ok(u64::from_ne_bytes(buf))
    }

    /// Another descriptor for the same eventfd.
    pub fn try_clone(&self) -> io::Result<Self> {
        Ok(EventFd(self.0.try_clone()?))
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Waits for events on `fds` (or `timeout_ms`, -1 for ever); returns how
/// many entries have events. Interrupted waits are retried.
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    loop {
        // SAFETY: the pointer and length describe `fds`, an exclusively
        // borrowed slice of pollfd that poll() may write `revents` into.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Control buffer for up to [`MAX_RECV_FDS`] descriptors, aligned for
/// `cmsghdr`.
#[repr(C, align(8))]
struct CmsgBuf([u8; 64]);

/// Descriptors `recv_msg` makes room for in one message: one is expected,
/// more are a protocol error (they are closed).
const MAX_RECV_FDS: usize = 4;

/// `CMSG_SPACE` for `n` descriptors.
fn cmsg_space(n: usize) -> usize {
    // SAFETY: CMSG_SPACE is pure arithmetic on its argument.
    let space = unsafe { libc::CMSG_SPACE((n * size_of::<RawFd>()) as libc::c_uint) } as usize;
    assert!(space <= size_of::<CmsgBuf>(), "control buffer too small");
    space
}

/// Sends one ivshmem protocol message: `value` as 8 little-endian bytes,
/// with `fd` attached if given.
///
/// Never blocks and never raises SIGPIPE: a client whose socket buffer is
/// full gets [`io::ErrorKind::WouldBlock`], a closed one `BrokenPipe`.
pub fn send_msg(sock: BorrowedFd<'_>, value: i64, fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
    let bytes = value.to_le_bytes();
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    let mut cbuf = CmsgBuf([0; 64]);
    // SAFETY: msghdr is a plain C struct (on some libcs with private
    // padding fields) for which all-zero bytes are a valid, empty value.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        msg.msg_control = cbuf.0.as_mut_ptr().cast();
        msg.msg_controllen = cmsg_space(1) as _;
        // SAFETY: msg_control points to `cbuf`, which is aligned for
        // cmsghdr and msg_controllen (CMSG_SPACE(sizeof(int))) bytes long,
        // enough for one header, so CMSG_FIRSTHDR returns a non-null
        // pointer into it.
        let cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        assert!(!cmsg.is_null());
        // SAFETY: `cmsg` points to a cmsghdr inside `cbuf` (see above);
        // CMSG_DATA(cmsg) is followed by room for one int within the
        // CMSG_SPACE(sizeof(int)) bytes, written unaligned to be safe.
        unsafe {
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as libc::c_uint) as _;
            ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd.as_raw_fd());
        }
    }
    // SAFETY: `msg` points to `iov` (which points to `bytes`) and, when a
    // descriptor is sent, to `cbuf`; all outlive the call, which only
    // reads them.
    let n = unsafe {
        libc::sendmsg(
            sock.as_raw_fd(),
            &msg,
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != bytes.len() {
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
/// Received descriptors are close-on-exec; more than one with a message
/// is an error (and they are closed).
pub fn recv_msg(sock: BorrowedFd<'_>) -> io::Result<Option<(i64, Option<OwnedFd>)>> {
    let mut bytes = [0u8; 8];
    let mut got = 0;
    let mut fds: Vec<OwnedFd> = Vec::new();
    while got < bytes.len() {
        let mut iov = libc::iovec {
            iov_base: bytes[got..].as_mut_ptr().cast(),
            iov_len: bytes.len() - got,
        };
        let mut cbuf = CmsgBuf([0; 64]);
        // SAFETY: as in send_msg, all-zero is a valid msghdr.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.0.as_mut_ptr().cast();
        msg.msg_controllen = cmsg_space(MAX_RECV_FDS) as _;
        // SAFETY: `msg` points to `iov` (the unfilled tail of `bytes`) and
        // `cbuf` (msg_controllen bytes, aligned for cmsghdr), both
        // exclusively borrowed and alive for the call.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        // Take ownership of every descriptor received before anything
        // else, so none leaks whatever happens next.
        // SAFETY: the kernel filled `msg` (and its control buffer) in.
        let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        while !cmsg.is_null() {
            // SAFETY: CMSG_FIRSTHDR/CMSG_NXTHDR returned a header that lies
            // within the msg_controllen bytes the kernel filled in.
            let (level, kind, len) = unsafe {
                (
                    (*cmsg).cmsg_level,
                    (*cmsg).cmsg_type,
                    (*cmsg).cmsg_len as usize,
                )
            };
            if level == libc::SOL_SOCKET && kind == libc::SCM_RIGHTS {
                // SAFETY: pure arithmetic.
                let data_off = unsafe { libc::CMSG_LEN(0) } as usize;
                let count = len.saturating_sub(data_off) / size_of::<RawFd>();
                for i in 0..count {
                    // SAFETY: the header's cmsg_len says `count` ints
                    // follow CMSG_DATA(cmsg), within the control buffer.
                    let raw = unsafe {
                        ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>().add(i))
                    };
                    // SAFETY: SCM_RIGHTS installed `raw` as a new
                    // descriptor of this process, owned by no one else.
                    fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
                }
            }
            // SAFETY: `msg` and `cmsg` are valid as above.
            cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "too many descriptors with one message (control data truncated)",
            ));
        }
        if n == 0 {
            if got == 0 && fds.is_empty() {
                return Ok(None);
            }
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got += n as usize;
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
    use std::os::unix::net::UnixStream;

    use super::*;

    #[test]
    fn message_with_and_without_fd() {
        let (a, b) = UnixStream::pair().unwrap();
        let ev = EventFd::new().unwrap();
        send_msg(a.as_fd(), 7, None).unwrap();
        send_msg(a.as_fd(), -1, Some(ev.as_fd())).unwrap();
        let (v, fd) = recv_msg(b.as_fd()).unwrap().unwrap();
        assert_eq!((v, fd.is_none()), (7, true));
        let (v, fd) = recv_msg(b.as_fd()).unwrap().unwrap();
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
        assert!(recv_msg(b.as_fd()).unwrap().is_none());
    }

    #[test]
    fn values_are_little_endian() {
        let (a, b) = UnixStream::pair().unwrap();
        send_msg(a.as_fd(), 0x0102_0304_0506_0708, None).unwrap();
        let mut raw = [0u8; 8];
        (&b).read_exact(&mut raw).unwrap();
        assert_eq!(raw, [8, 7, 6, 5, 4, 3, 2, 1]);
    }

    #[test]
    fn send_to_closed_peer_fails_without_sigpipe() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(b);
        let err = send_msg(a.as_fd(), 1, None).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn truncated_message_is_an_error() {
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(&[1, 2, 3]).unwrap();
        drop(a);
        assert_eq!(
            recv_msg(b.as_fd()).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }

    #[test]
    fn poll_reports_readable() {
        let ev = EventFd::new().unwrap();
        let mut fds = [libc::pollfd {
            fd: ev.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        assert_eq!(poll(&mut fds, 0).unwrap(), 0);
        ev.write(1).unwrap();
        assert_eq!(poll(&mut fds, 0).unwrap(), 1);
        assert_ne!(fds[0].revents & libc::POLLIN, 0);
    }
}
