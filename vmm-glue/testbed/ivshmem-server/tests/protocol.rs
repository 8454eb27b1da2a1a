//! The server's protocol, checked with fake clients over real sockets.

mod common;

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::FileExt;
use std::time::Duration;

use common::{assert_rings, Running};
use devlend_ivshmem_server::{Config, Server, ServerError};
use devlend_wire::{ControlArea, CtlLayout, DL_CTL_HEADER_SIZE, DL_DEFAULT_CTL_SIZE};

const QUIET: Duration = Duration::from_millis(200);

/// Maps the whole shared memory the server sent, as QEMU does.
fn map_and_parse(fd: &impl AsFd) -> CtlLayout {
    let file = File::from(fd.as_fd().try_clone_to_owned().unwrap());
    let len = file.metadata().unwrap().len() as usize;
    assert_eq!(len as u64, DL_DEFAULT_CTL_SIZE);
    // SAFETY: a fresh shared read-only mapping of `len` bytes of a file of
    // that size; nothing else in this test resizes the file.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(addr, libc::MAP_FAILED, "mmap failed");
    // SAFETY: `addr` maps `len` readable bytes until the munmap below, and
    // the slice does not outlive it.
    let area = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), len) };
    let layout = CtlLayout::parse(area).unwrap();
    layout.check_fits(len as u64).unwrap();
    assert!(area[DL_CTL_HEADER_SIZE..].iter().all(|&b| b == 0));
    // SAFETY: unmapping exactly the mapping made above; `area` is dead.
    assert_eq!(unsafe { libc::munmap(addr, len) }, 0);
    layout
}

#[test]
fn first_client_gets_version_id_shm_and_own_vectors() {
    let srv = Running::start(3, 4);
    let c = srv.connect(0);
    let shm = c.expect_greeting(0);
    let own = c.expect_vectors(0, 4);
    c.expect_nothing(QUIET);

    let layout = map_and_parse(&shm);
    assert_eq!(layout.max_hosts(), 3);
    assert_eq!(layout.ring_slots(), 128);
    assert_eq!(layout.slot_size(), 256);
    assert_eq!(layout.fabric_id(), srv.fabric_id);
    // The file on disk is the same area.
    let area = ControlArea::open(&srv.config.ctl_path).unwrap();
    assert_eq!(area.layout(), &layout);
    // Writes through the descriptor land in the file.
    File::from(shm.try_clone().unwrap())
        .write_all_at(b"x", 4096)
        .unwrap();
    let mut b = [0u8];
    File::open(&srv.config.ctl_path)
        .unwrap()
        .read_exact_at(&mut b, 4096)
        .unwrap();
    assert_eq!(&b, b"x");

    // Its own vectors are distinct eventfds.
    for v in 0..4 {
        assert_rings(&own[v], &own, v);
    }
}

#[test]
fn clients_get_each_others_vectors_in_order() {
    let srv = Running::start(3, 4);
    let c0 = srv.connect(0);
    c0.expect_greeting(0);
    let own0 = c0.expect_vectors(0, 4);

    // Host 2 before host 1: ids come from the socket, not the order.
    let c2 = srv.connect(2);
    c2.expect_greeting(2);
    let c2_to_0 = c2.expect_vectors(0, 4);
    let own2 = c2.expect_vectors(2, 4);
    c2.expect_nothing(QUIET);
    let c0_to_2 = c0.expect_vectors(2, 4);

    let c1 = srv.connect(1);
    c1.expect_greeting(1);
    let c1_to_0 = c1.expect_vectors(0, 4);
    let c1_to_2 = c1.expect_vectors(2, 4);
    let own1 = c1.expect_vectors(1, 4);
    c1.expect_nothing(QUIET);
    let c0_to_1 = c0.expect_vectors(1, 4);
    let c2_to_1 = c2.expect_vectors(1, 4);
    c0.expect_nothing(QUIET);
    c2.expect_nothing(QUIET);

    // The eventfd another client got for (peer, vector) is the peer's own
    // eventfd for that vector: ringing it interrupts exactly that vector.
    for v in 0..4 {
        assert_rings(&c1_to_0[v], &own0, v);
        assert_rings(&c2_to_0[v], &own0, v);
        assert_rings(&c0_to_1[v], &own1, v);
        assert_rings(&c2_to_1[v], &own1, v);
        assert_rings(&c0_to_2[v], &own2, v);
        assert_rings(&c1_to_2[v], &own2, v);
    }
}

#[test]
fn with_notify_disconnects_a_disconnect_is_announced_and_the_id_can_reconnect() {
    let srv = Running::start_notify(3, 2);
    let c0 = srv.connect(0);
    c0.expect_greeting(0);
    let own0 = c0.expect_vectors(0, 2);
    let c1 = srv.connect(1);
    c1.expect_greeting(1);
    c1.expect_vectors(0, 2);
    c1.expect_vectors(1, 2);
    let old_c0_to_1 = c0.expect_vectors(1, 2);
    let c2 = srv.connect(2);
    c2.expect_greeting(2);
    c2.expect_vectors(0, 2);
    c2.expect_vectors(1, 2);
    c2.expect_vectors(2, 2);
    c0.expect_vectors(2, 2);
    c1.expect_vectors(2, 2);

    drop(c1);
    c0.expect(1);
    c2.expect(1);
    c0.expect_nothing(QUIET);

    // Host 1 reboots and comes back on its socket, with new eventfds.
    let c1 = srv.connect(1);
    c1.expect_greeting(1);
    let c1_to_0 = c1.expect_vectors(0, 2);
    c1.expect_vectors(2, 2);
    let own1 = c1.expect_vectors(1, 2);
    let c0_to_1 = c0.expect_vectors(1, 2);
    c2.expect_vectors(1, 2);
    for v in 0..2 {
        assert_rings(&c0_to_1[v], &own1, v);
        assert_rings(&c1_to_0[v], &own0, v);
    }
    // The old incarnation's eventfds are not the new ones.
    old_c0_to_1[0].write(1).unwrap();
    assert!(own1[0].read().is_err());
}

#[test]
fn by_default_disconnects_are_silent_and_eventfds_stay() {
    let srv = Running::start(3, 2);
    let c0 = srv.connect(0);
    c0.expect_greeting(0);
    let own0 = c0.expect_vectors(0, 2);
    let c1 = srv.connect(1);
    c1.expect_greeting(1);
    c1.expect_vectors(0, 2);
    c1.expect_vectors(1, 2);
    let c0_to_1 = c0.expect_vectors(1, 2);

    // Host 1 leaves: nobody is told.
    drop(c1);
    c0.expect_nothing(QUIET);
    // Host 2 arrives while host 1 is away: it learns only about host 0.
    let c2 = srv.connect(2);
    c2.expect_greeting(2);
    c2.expect_vectors(0, 2);
    let own2 = c2.expect_vectors(2, 2);
    let c0_to_2 = c0.expect_vectors(2, 2);
    // A ring meant for host 1 while it is away...
    c0_to_1[0].write(1).unwrap();

    // Host 1 comes back with the same eventfds. Host 0 already has them
    // and is sent nothing; host 2 learns about host 1 now.
    let c1 = srv.connect(1);
    c1.expect_greeting(1);
    let c1_to_0 = c1.expect_vectors(0, 2);
    let c1_to_2 = c1.expect_vectors(2, 2);
    let own1 = c1.expect_vectors(1, 2);
    c1.expect_nothing(QUIET);
    c0.expect_nothing(QUIET);
    let c2_to_1 = c2.expect_vectors(1, 2);
    c2.expect_nothing(QUIET);
    // ... was drained before host 1 got its eventfds back.
    assert!(own1[0].read().is_err(), "stale ring delivered");
    for v in 0..2 {
        assert_rings(&c0_to_1[v], &own1, v);
        assert_rings(&c2_to_1[v], &own1, v);
        assert_rings(&c1_to_0[v], &own0, v);
        assert_rings(&c1_to_2[v], &own2, v);
        assert_rings(&c0_to_2[v], &own2, v);
    }
}

#[test]
fn a_second_client_on_a_taken_id_is_refused() {
    let srv = Running::start(2, 1);
    let c0 = srv.connect(0);
    c0.expect_greeting(0);
    c0.expect_vectors(0, 1);

    let dup = srv.connect(0);
    assert!(
        dup.expect_closed().is_empty(),
        "refused client got messages"
    );
    // The first client is not disturbed, and the server still serves.
    c0.expect_nothing(QUIET);
    let c1 = srv.connect(1);
    c1.expect_greeting(1);
    c1.expect_vectors(0, 1);
    c1.expect_vectors(1, 1);
    c0.expect_vectors(1, 1);
}

#[test]
fn a_client_that_talks_is_dropped() {
    let srv = Running::start(2, 1);
    let c0 = srv.connect(0);
    c0.expect_greeting(0);
    c0.expect_vectors(0, 1);
    let c1 = srv.connect(1);
    c1.expect_greeting(1);
    c1.expect_vectors(0, 1);
    c1.expect_vectors(1, 1);
    c0.expect_vectors(1, 1);

    std::io::Write::write_all(&mut &c1.stream, b"garbage").unwrap();
    assert!(c1.expect_closed().is_empty());
    c0.expect_nothing(QUIET);
    // Its id is free again.
    let c1 = srv.connect(1);
    c1.expect_greeting(1);
}

#[test]
fn a_client_that_never_reads_is_dropped_not_waited_for() {
    // Announced disconnects make every cycle below queue messages.
    let srv = Running::start_notify(2, 4);
    let sleeper = srv.connect(0);
    // Host 1 connects and leaves over and over; every cycle queues four
    // messages with descriptors and a disconnect for host 0, which never
    // reads, until its socket buffer is full and the server drops it.
    let mut cycles = 0;
    loop {
        assert!(cycles < 5000, "host 0 was never dropped");
        cycles += 1;
        let c1 = srv.connect(1);
        c1.expect_greeting(1);
        let m = c1.recv();
        if m.value == 1 {
            // No vectors of host 0 before its own: host 0 is gone.
            c1.expect_vectors(1, 3);
            break;
        }
        assert_eq!(m.value, 0);
        c1.expect_vectors(0, 3);
        c1.expect_vectors(1, 4);
    }
    // The sleeper finds what was queued, then the end of the stream.
    let queued = sleeper.expect_closed();
    assert!(queued.len() >= 3 + 4, "only {} messages", queued.len());
    // And host 0 can come back.
    let c0 = srv.connect(0);
    c0.expect_greeting(0);
    eprintln!(
        "host 0 dropped after {cycles} cycles, {} messages",
        queued.len()
    );
}

#[test]
fn stopping_removes_the_sockets_but_not_the_area() {
    let srv = Running::start(3, 1);
    let ctl = srv.config.ctl_path.clone();
    let sockets: Vec<_> = (0..3).map(|i| srv.socket(i)).collect();
    assert!(sockets.iter().all(|s| s.exists()));
    let c0 = srv.connect(0);
    c0.expect_greeting(0);
    c0.expect_vectors(0, 1);
    let (result, dir) = srv.stop();
    result.unwrap();
    assert!(sockets.iter().all(|s| !s.exists()));
    assert!(ctl.exists());
    // Only the area is left.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    // The client sees the server go away, without disconnect messages.
    assert!(c0.expect_closed().is_empty());
}

#[test]
fn refuses_an_existing_area_unless_reused() {
    let dir = tempfile::tempdir().unwrap();
    let ctl = dir.path().join("fabric.ctl");
    std::fs::write(&ctl, vec![0xaau8; 8192]).unwrap();
    let config = Config::new(dir.path(), 2, &ctl);
    match Server::new(config.clone()) {
        Err(ServerError::Ctl(e)) => assert!(e.to_string().contains("fabric.ctl"), "{e}"),
        other => panic!("expected a control area error, got {other:?}"),
    }
    // Nothing left behind: no sockets, the file untouched.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["fabric.ctl"]);
    assert_eq!(std::fs::read(&ctl).unwrap(), vec![0xaau8; 8192]);

    let config = Config {
        reuse: true,
        ..config
    };
    let srv = Server::new(config).unwrap();
    let area = ControlArea::open(&ctl).unwrap();
    assert_eq!(area.layout(), srv.layout());
    let bytes = std::fs::read(&ctl).unwrap();
    assert_eq!(bytes.len() as u64, DL_DEFAULT_CTL_SIZE);
    assert!(bytes[DL_CTL_HEADER_SIZE..].iter().all(|&b| b == 0));
}

#[test]
fn replaces_stale_sockets_but_not_live_ones() {
    let srv = Running::start(2, 1);
    // A second server on the same directory finds the live sockets.
    let dir2 = tempfile::tempdir().unwrap();
    let config = Config::new(srv.dir(), 2, dir2.path().join("other.ctl"));
    match Server::new(config) {
        Err(ServerError::SocketInUse { path }) => assert_eq!(path, srv.socket(0)),
        other => panic!("expected SocketInUse, got {other:?}"),
    }
    assert!(!dir2.path().join("other.ctl").exists());
    drop(srv);

    // A socket left by a server that died (bound, nobody listening).
    let dir = tempfile::tempdir().unwrap();
    let stale = dir.path().join("doorbell-1.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    let config = Config::new(dir.path(), 2, dir.path().join("fabric.ctl"));
    let srv = Running::start_with(dir, config);
    let c1 = srv.connect(1);
    c1.expect_greeting(1);

    // Something that is not a socket is not replaced.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("doorbell-0.sock"), "").unwrap();
    let config = Config::new(dir.path(), 1, dir.path().join("f.ctl"));
    assert!(matches!(
        Server::new(config),
        Err(ServerError::NotASocket { .. })
    ));
    assert!(!dir.path().join("f.ctl").exists());
}

#[test]
fn rejects_bad_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let base = Config::new(dir.path(), 2, dir.path().join("f.ctl"));
    let cases = [
        Config {
            hosts: 0,
            ..base.clone()
        },
        Config {
            hosts: 9,
            ..base.clone()
        },
        Config {
            vectors: 0,
            ..base.clone()
        },
        Config {
            vectors: 65,
            ..base.clone()
        },
        Config {
            ctl_size: 3 << 20,
            ..base.clone()
        },
        // One page: no room for the host info slots after the header.
        Config {
            ctl_size: 4096,
            ..base.clone()
        },
        Config {
            ring_slots: 100,
            ..base.clone()
        },
        Config {
            slot_size: 100,
            ..base.clone()
        },
    ];
    for config in cases {
        let err = Server::new(config.clone()).unwrap_err();
        assert!(
            matches!(
                err,
                ServerError::Layout(_)
                    | ServerError::Vectors(_)
                    | ServerError::CtlSizeNotPowerOfTwo(_)
            ),
            "{config:?}: {err}"
        );
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
