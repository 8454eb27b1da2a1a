//! devlend's device-ownership protocol as an exhaustively checked model.
//!
//! One lender host lends one device; one borrower host borrows it through
//! one mdev, maps one or two of its pages for the device's DMA, and gives
//! it back; the fabric between them loses, delays and reorders what they
//! say; the lender may be stalled, may take the device back, may unlend it
//! (`unlend force`, module unload) and may restart as a new incarnation.
//! Every transition is named after the C function that implements it, and
//! its doc comment names the file, so that a reader can hold one against
//! the other. `docs/model.md` has the table and what is abstracted away.
//!
//! The properties ([`Ownership::properties`]) are the two invariants of
//! the DMA ownership rule (`docs/lending.md`):
//!
//! 1. [`INV_PAGES`]: no page is given back on the borrower (unpinned and
//!    in no lease's quarantine) while a lender IOMMU mapping of it exists
//!    in the lender incarnation that is alive.
//! 2. [`INV_HOLDER`]: the lender, unless it is removing the device
//!    anyway, holds the device for this borrower only while the borrower
//!    has an unsettled lease naming that lender incarnation, i.e. one
//!    whose mdev will still return it or whose release work will still
//!    send `DL_MSG_DEV_RELEASE` to it. A device held with no such lease is
//!    held for good: nothing on the borrower will ever ask for it again.
//!    This is a safety property over reachable states rather than an
//!    `eventually`: stateright's `eventually` is only sound on acyclic
//!    paths, and every state of this model lies on cycles (a lost message
//!    and its retry); "no lease will ever release it" is what makes a
//!    holder stay, and it is a property of one state.
//!
//! `sometimes` properties show that the paths that matter are reachable,
//! so that the invariants are not true for want of behaviour.
//!
//! Two fixes are parameters ([`Params`]), so that the checker can show
//! the bug each one removes: [`Params::fix_remove_order`] (issue 26 item
//! 1, `dl_lender_remove()` takes the device back before it leaves the
//! table) and [`Params::fix_lease_inc`] (item 5, a lease names the
//! incarnation its `DL_MSG_DEV_ACQUIRE` went to). [`csource`] reads the C
//! and says which variant it implements.

use std::fmt;

use stateright::{Model, Property};

pub mod check;
pub mod csource;

/// Name of invariant 1 (see the crate documentation).
pub const INV_PAGES: &str = "inv1: no page is given back while an alive lender maps it";
/// Name of invariant 2 (see the crate documentation).
pub const INV_HOLDER: &str =
    "inv2: the lender holds the device for us only under an unsettled lease of its incarnation";

/// Lease slots on the borrower: one held by the mdev, the others
/// unreturned or settling. A borrow that would need a fourth is not
/// explored (it cannot arise with one mdev and one restart).
pub const LEASES: usize = 3;

/// The model's bounds and the fixes it includes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Params {
    /// Item 1: `dl_lender_remove()` (lender/driver.c) marks the device
    /// busy, takes it back (unmapping everything) and only then erases it
    /// from the table, so `-ENODEV` is answered only once nothing is
    /// mapped. Without it: erased first, taken back after.
    pub fix_remove_order: bool,
    /// Item 5: the lease of a borrow names the lender incarnation the
    /// `DL_MSG_DEV_ACQUIRE` went to (`dl_fabric_req.peer_inc`), a grant
    /// by an incarnation other than the remote entry's loses the mdev,
    /// only a refusal settles an unanswered borrow, and a scan whose
    /// lender restarted meanwhile drops its answers (borrower/session.c,
    /// borrower/remote.c). Without it: the lease names the remote entry's
    /// incarnation, which may be stale.
    pub fix_lease_inc: bool,
    /// Borrower pages the guest has (1 or 2).
    pub pages: u8,
    /// Lender restarts (new incarnations) at most.
    pub restarts: u8,
    /// Requests in flight from the borrower at most (ring slots and
    /// request credits); a request that finds no room fails with
    /// `-EAGAIN` at once, as `dl_fabric_req_submit()` does.
    pub ring: u8,
    /// A second borrower host that takes and gives back the device
    /// (abstract: its own mappings are not tracked).
    pub other_host: bool,
    /// The lender's `allowed_hosts` may leave this borrower out.
    pub allowed_hosts: bool,
    /// The lender module may be unloaded once its device is removed.
    pub unload: bool,
    /// The lender may restart after its device was removed (or while it
    /// is being removed); else only while it lends it.
    pub restart_after_removal: bool,
    /// Explore `dl_serve_acquire()`'s second read of the link (commit
    /// b8d0286) finding the borrower down after the holder was named: the
    /// device is marked for take-back, and answered as
    /// [`Params::fix_acquire_silent`] says.
    pub acquire_race: bool,
    /// The fix of the race that second read opened: the ACQUIRE is not
    /// answered (the borrower returns the device later, as after any lost
    /// answer). Without it the request is answered -EINVAL, sent when the
    /// receive work gets to it if the link is up by then, and the borrower
    /// settles a lease the lender still holds the device for.
    pub fix_acquire_silent: bool,
}

impl Params {
    /// Both fixes in, the default bounds.
    pub fn fixed() -> Self {
        Params {
            fix_remove_order: true,
            fix_lease_inc: true,
            pages: 1,
            restarts: 1,
            ring: 2,
            other_host: true,
            allowed_hosts: false,
            unload: true,
            restart_after_removal: false,
            acquire_race: true,
            fix_acquire_silent: true,
        }
    }

    /// The default bounds raised by `level` (the `DEVLEND_MODEL_DEPTH`
    /// environment variable): 1 adds `allowed_hosts` and restarts after a
    /// removal, 2 also two pages, 3 also a ring of three requests, 4 also
    /// two lender restarts. Each level multiplies the states (and the
    /// time: minutes at 2, hours at 4).
    pub fn deeper(mut self, level: u8) -> Self {
        if level >= 1 {
            self.allowed_hosts = true;
            self.restart_after_removal = true;
        }
        if level >= 2 {
            self.pages = 2;
        }
        if level >= 3 {
            self.ring = 3;
        }
        if level >= 4 {
            self.restarts = 2;
        }
        self
    }

    /// [`Params::deeper`] by `DEVLEND_MODEL_DEPTH`, if set.
    pub fn from_env(self) -> Self {
        match std::env::var("DEVLEND_MODEL_DEPTH") {
            Ok(v) => {
                let level = v
                    .trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("DEVLEND_MODEL_DEPTH={v:?}: not a number 0..=4"));
                self.deeper(level)
            }
            Err(_) => self,
        }
    }

    fn all_pages(&self) -> u8 {
        (1u8 << self.pages) - 1
    }
}

/// A request's result as the borrower sees it. The lender's `-EAGAIN`
/// (busy: resetting, being removed) travels as `DL_STATUS_EIO`
/// (fabric/msg.c `dl_errno_to_status()`), so it is [`Ret::Eio`] here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ret {
    /// 0.
    Ok,
    /// -EINVAL: nobody holds it, or not ours to ask.
    Einval,
    /// -EBUSY: another host holds it.
    Ebusy,
    /// -ENODEV: not lent (not in the table, removed, or not for us).
    Enodev,
    /// -EOPNOTSUPP: the host runs no lender.
    Eopnotsupp,
    /// -EIO: busy (the lender's -EAGAIN).
    Eio,
    /// -ETIMEDOUT: no answer in time (local).
    Etimedout,
    /// -ENOTCONN: the link is or went down (local).
    Enotconn,
    /// -EAGAIN: no ring room or credit (local).
    Eagain,
}

impl Ret {
    /// borrower/lease.c `dl_lease_answer_settles()`.
    pub fn settles(self) -> bool {
        matches!(
            self,
            Ret::Ok | Ret::Einval | Ret::Ebusy | Ret::Enodev | Ret::Eopnotsupp
        )
    }
}

/// Who waits for a request on the borrower: each has at most one out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Slot {
    /// The mdev (borrower/vdev.c, dma.c, under `v->lock`).
    Mdev,
    /// The release work (borrower/lease.c).
    Work,
}

impl Slot {
    fn idx(self) -> usize {
        self as usize
    }
}

/// What a request asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// DL_MSG_DEV_ACQUIRE.
    Acquire,
    /// DL_MSG_DMA_MAP of these pages.
    DmaMap(u8),
    /// DL_MSG_DMA_UNMAP of these pages, or of everything (`all`).
    DmaUnmap {
        /// The pages, a bit each.
        pages: u8,
        /// DL_DMA_UNMAP_F_ALL.
        all: bool,
    },
    /// DL_MSG_DEV_RELEASE.
    Release,
}

/// A request on its way to the lender.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Req {
    /// What it asks.
    pub kind: Kind,
    /// The lender incarnation the ring it went into is bound to: only that
    /// incarnation reads it.
    pub to: u8,
    /// Who waits for its answer; `None` once they stopped waiting (a late
    /// answer finds no request with its id and is dropped).
    pub tag: Option<Slot>,
}

/// Who the lender's device is held by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Holder {
    /// DL_LENT_AVAILABLE.
    Nobody,
    /// DL_LENT_BORROWED by this borrower (its one incarnation).
    Us,
    /// DL_LENT_BORROWED by another host.
    Other,
}

/// The lent device on the lender (lender/internal.h `struct dl_lent`).
/// DL_LENT_RETURNING lasts only inside `dl_lent_reclaim()`, under the
/// device's locks, so it is never seen between two steps of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dev {
    /// Found by `dl_lent_get()` (the `dl_lender.devs` xarray).
    pub in_table: bool,
    /// `dl_lender_remove()` has started.
    pub removing: bool,
    /// `lent->slow_holds`: requests are answered -EAGAIN instead of
    /// waiting for the device's locks.
    pub slow_holds: bool,
    /// `lent->dead`.
    pub dead: bool,
    /// Its holder.
    pub holder: Holder,
    /// Borrower pages mapped in its IOMMU domain, a bit each.
    pub maps: u8,
    /// A DL_MSG_DEV_RELEASE taken for the slow work (DL_LENT_SLOW_BUSY),
    /// with whoever waits for its answer.
    pub slow: Option<Option<Slot>>,
    /// DL_LENT_SLOW_RECLAIM: the holder went down; take it back.
    pub reclaim: bool,
    /// `allowed_hosts` lets this borrower see it.
    pub allowed: bool,
}

impl Dev {
    fn lent() -> Self {
        Dev {
            in_table: true,
            removing: false,
            slow_holds: false,
            dead: false,
            holder: Holder::Nobody,
            maps: 0,
            slow: None,
            reclaim: false,
            allowed: true,
        }
    }
}

/// The lender host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lender {
    /// Its incarnation (0, 1, ... as it restarts).
    pub inc: u8,
    /// The lender module is loaded (its handlers registered).
    pub loaded: bool,
    /// Its fabric sees the borrower up.
    pub sees_borrower: bool,
    /// The lent device (dev_id 1), `None` once removed.
    pub dev: Option<Dev>,
    /// An answer the receive work has yet to send (only with
    /// [`Params::acquire_race`]), and who waits for it.
    pub outbox: Option<(Option<Slot>, Ret)>,
}

/// The borrower fabric's view of the lender (fabric/peer.c).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum View {
    /// Down; the incarnation last seen.
    Down(u8),
    /// Up, bound to this incarnation.
    Up(u8),
}

impl View {
    fn up(self) -> Option<u8> {
        match self {
            View::Up(i) => Some(i),
            View::Down(_) => None,
        }
    }
}

/// The borrower's remote device entry (borrower/remote.c `struct
/// dl_remote`) for the lender's dev_id 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The lender incarnation it was listed under (`r->incarnation`).
    pub inc: u8,
    /// `r->gone`.
    pub gone: bool,
}

/// The entry an mdev targets (`v->remote`, a reference).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteRef {
    /// Its incarnation.
    pub inc: u8,
    /// It left the table (gone for good, whatever is listed later).
    pub unlinked: bool,
}

/// borrower/internal.h `enum dl_vdev_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VState {
    /// DL_VDEV_IDLE.
    Idle,
    /// DL_VDEV_BORROWED.
    Borrowed,
    /// DL_VDEV_LOST.
    Lost,
    /// DL_VDEV_RETURNING.
    Returning,
}

/// What follows an unmap (`dl_dma_release()`) in its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Then {
    /// `dl_dma_fill()` failed: undo everything.
    FillFailed,
    /// `dl_dma_disable()`.
    Disable,
    /// `dl_dma_unmap_range()`.
    UnmapRange,
    /// `dl_vdev_close()`: then `dl_session_release()`.
    Close,
}

/// What the mdev waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Nothing.
    None,
    /// `dl_session_borrow()`: DL_MSG_DEV_ACQUIRE's answer, for this lease;
    /// `to`: the incarnation the request went to (`peer_inc`).
    Acquire {
        /// The lease slot.
        lease: u8,
        /// The incarnation asked.
        to: u8,
    },
    /// `dl_dma_fill()`: DL_MSG_DMA_MAP's answer.
    Map,
    /// `dl_dma_lender_unmap()`: DL_MSG_DMA_UNMAP's answer.
    Unmap {
        /// The pages.
        pages: u8,
        /// DL_DMA_UNMAP_F_ALL.
        all: bool,
        /// What follows.
        then: Then,
    },
    /// `dl_session_release()`: DL_MSG_DEV_RELEASE's answer.
    Release,
}

/// The mdev (borrower/internal.h `struct dl_vdev`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mdev {
    /// Opened by a VMM.
    pub open: bool,
    /// Its state.
    pub state: VState,
    /// The entry it targets, once chosen.
    pub remote: Option<RemoteRef>,
    /// `v->lease`.
    pub lease: Option<u8>,
    /// Pages pinned, a bit each.
    pub pinned: u8,
    /// `v->dma_mapped`: the lender was sent mappings.
    pub dma_mapped: bool,
    /// `v->dma_on`: bus mastering on, everything mapped.
    pub dma_on: bool,
    /// What it waits for.
    pub op: Op,
    /// Borrowed since the running scan started (`borrow_seq` >
    /// `start_seq`).
    pub borrowed_in_scan: bool,
}

/// A lease (borrower/lease.c `struct dl_lease`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lease {
    /// The lender incarnation it names.
    pub inc: u8,
    /// `l->settled`.
    pub settled: bool,
    /// `l->unreturned`.
    pub unreturned: bool,
    /// `l->orphaned`: its mdev let go of it.
    pub orphaned: bool,
    /// `l->busy`: the release work has a DL_MSG_DEV_RELEASE out for it.
    pub busy: bool,
    /// Its quarantine, a bit per page.
    pub quarantine: u8,
}

/// The borrower host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Borrower {
    /// Its fabric's view of the lender.
    pub view: View,
    /// The remote entry of the device, if listed.
    pub entry: Option<Entry>,
    /// A scan under way (`dl_remote_scan_peer()`): the incarnation it read
    /// before asking.
    pub scan: Option<u8>,
    /// The mdev.
    pub mdev: Mdev,
    /// The leases.
    pub leases: [Option<Lease>; LEASES],
    /// The lease the release work has a DL_MSG_DEV_RELEASE out for.
    pub work: Option<u8>,
    /// Pages leaked on purpose (quarantined with no lease to hold them).
    pub leaked: u8,
}

/// Why a lease settled, for the `sometimes` properties.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Why {
    /// Settled by this answer to DL_MSG_DEV_RELEASE.
    Answer(Ret),
    /// The lender came back as a new incarnation.
    NewIncarnation,
    /// A borrow the lender refused.
    NotBorrowed,
}

/// What the last step did that the `sometimes` properties look for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Note {
    /// A lease settled; `freed`: it let quarantined pages go.
    Settled {
        /// Why.
        why: Why,
        /// Quarantined pages were released.
        freed: bool,
    },
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The lender.
    pub lender: Lender,
    /// Requests in flight, in ring order (the lender reads the oldest
    /// first; any may be lost).
    pub reqs: Vec<Req>,
    /// Answers in flight, one at most per [`Slot`] (in any order).
    pub answers: [Option<Ret>; 2],
    /// The borrower.
    pub bor: Borrower,
    /// What the step into this state did, if notable.
    pub last: Option<Note>,
}

/// A transition. Each names the C function it stands for; its doc
/// comment, the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// borrower/vdev.c `dl_vdev_open()` with `dl_vdev_choose()`: a VMM
    /// opens the mdev, which targets the listed entry.
    DlVdevOpen,
    /// borrower/session.c `dl_session_borrow()`: a lease (`dl_lease_new()`,
    /// borrower/lease.c), then DL_MSG_DEV_ACQUIRE.
    DlVdevBorrow,
    /// borrower/session.c `dl_session_borrow()`: DL_MSG_DEV_ACQUIRE again after
    /// -EIO (the lender is still taking it back).
    DlVdevBorrowRetry,
    /// borrower/dma.c `dl_dma_enable()` / `dl_dma_fill()`: Bus Master
    /// Enable pins the guest's pages and sends DL_MSG_DMA_MAP.
    DlDmaEnable,
    /// borrower/dma.c `dl_dma_disable()`: BME cleared or reset: unmap
    /// everything, then unpin.
    DlDmaDisable,
    /// borrower/dma.c `dl_dma_unmap_range()`: VFIO's `dma_unmap()` of one
    /// page (no KVM: unmapped at once).
    DlDmaUnmapRange(u8),
    /// borrower/dma.c `dl_dma_unmap_request()`: DL_MSG_DMA_UNMAP again
    /// after -EIO.
    DlDmaUnmapRequestRetry,
    /// borrower/vdev.c `dl_vdev_close()`: `dl_dma_disable()`, then
    /// `dl_session_release()` (DL_MSG_DEV_RELEASE).
    DlVdevClose,
    /// borrower/parent.c: the mdev is removed and created again (its
    /// target chosen anew at the next open).
    MdevRecreate,
    /// borrower/lease.c `dl_lease_release_work()`: for an unreturned
    /// lease, settle it if the lender restarted, else send
    /// DL_MSG_DEV_RELEASE.
    DlLeaseReleaseWork(u8),
    /// borrower/remote.c `dl_remote_scan_peer()`: a scan starts; it reads
    /// the lender's incarnation first.
    DlRemoteScanPeer,
    /// borrower/remote.c `dl_remote_update()`: the scan's answers
    /// (DL_MSG_DEV_LIST, DL_MSG_DEV_INFO) update the entry.
    DlRemoteUpdate,
    /// borrower/remote.c `dl_remote_scan_peer()`: a request of the scan
    /// failed; nothing is updated.
    DlRemoteScanFail,
    /// fabric/peer.c `dl_peer_set_down()` on the borrower (heartbeat
    /// timeout, or the lender's restart seen): requests fail with
    /// -ENOTCONN (`dl_req_fail()`), then borrower/remote.c
    /// `dl_remote_peer_down()`.
    DlPeerSetDown,
    /// fabric/peer.c `dl_peer_try_up()` on the borrower: up, bound to the
    /// lender's incarnation now (then `dl_remote_peer_up()`,
    /// `dl_lease_peer_up()`).
    DlPeerTryUp,
    /// fabric/request.c `dl_req_complete()`: an answer reaches the waiter
    /// (continued in the waiter's function).
    DlReqComplete(Slot, Ret),
    /// fabric/request.c `dl_fabric_req_wait()`: the waiter gives up,
    /// -ETIMEDOUT.
    DlFabricReqWaitTimeout(Slot),
    /// The fabric loses the oldest request in flight. (Losing a younger
    /// one is the same as losing it when it is the oldest: nothing reads
    /// it before.) An answer is never lost outright: one left undelivered
    /// until its waiter gives up is the same to everyone.
    LoseRequest,
    /// lender/msg.c `dl_lender_on_dev_msg()` with `dl_lender_open()` and
    /// the `dl_serve_*()` of its type: the lender serves the oldest
    /// request.
    DlLenderOnDevMsg(Kind),
    /// lender/msg.c `dl_serve_acquire()` (with [`Params::acquire_race`]):
    /// the holder named, the link read again finds the borrower down
    /// (`dl_lender_peer_down()` ran meanwhile): marked for take-back,
    /// answered -EINVAL by `dl_lender_respond()` later.
    DlServeAcquireSeesDown,
    /// lender/peers.c `dl_lender_respond()`: the receive work sends the
    /// answer it holds, if the link is up, else drops it.
    DlLenderRespond,
    /// lender/slow.c `dl_lent_slow_work()`: a marked take-back, then a
    /// DL_MSG_DEV_RELEASE taken for it, answered.
    DlLentSlowWork,
    /// lender/slow.c `dl_lender_peer_down()`: the lender's fabric sees
    /// the borrower down (it stalled); its device is marked for take-back.
    DlLenderPeerDown,
    /// fabric/peer.c `dl_peer_try_up()` on the lender: the borrower is up
    /// again.
    LenderPeerUp,
    /// lender/driver.c `dl_lender_remove()` (`unlend force`, unload):
    /// first step. Fixed: the slow hold (requests answered -EAGAIN).
    /// Not fixed: `xa_erase()` (requests answered -ENODEV).
    DlLenderRemove,
    /// lender/driver.c `dl_lender_remove()`: `lent->dead`, then
    /// `dl_lent_reclaim()` (every mapping removed). Not fixed: the end.
    DlLenderRemoveReclaim,
    /// lender/driver.c `dl_lender_remove()`, fixed: `xa_erase()` after the
    /// take-back, then `dl_lent_slow_cancel()`.
    DlLenderRemoveErase,
    /// lender/main.c `dl_lender_exit()`: the module is unloaded; the
    /// fabric answers every request -EOPNOTSUPP (fabric/msg.c
    /// `dl_msg_dispatch()`).
    DlLenderExit,
    /// The lender host restarts: a new incarnation (fabric/hostinfo.c
    /// `dl_hostinfo_init()`), nothing mapped, the device lent again with
    /// the same dev_id (lender/driver.c `dl_lender_probe()`,
    /// `dl_lent_assign_id()`).
    LenderRestart,
    /// lender/driver.c `allowed_hosts_store()`: this borrower allowed or
    /// not.
    AllowedHostsStore(bool),
    /// lender/msg.c `dl_serve_acquire()` for another host.
    OtherHostAcquire,
    /// lender/slow.c `dl_lent_slow_work()` releasing it for the other host.
    OtherHostRelease,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The model: [`Params`] and the transition relation.
#[derive(Clone, Debug)]
pub struct Ownership {
    /// Bounds and fixes.
    pub p: Params,
}

impl Ownership {
    /// A model with these parameters.
    pub fn new(p: Params) -> Self {
        assert!((1..=2).contains(&p.pages), "1 or 2 pages");
        assert!(p.ring >= 1, "a ring of at least one request");
        Ownership { p }
    }
}

impl State {
    fn lease(&self, i: u8) -> &Lease {
        self.bor.leases[i as usize]
            .as_ref()
            .expect("a lease slot in use")
    }

    fn lease_mut(&mut self, i: u8) -> &mut Lease {
        self.bor.leases[i as usize]
            .as_mut()
            .expect("a lease slot in use")
    }

    fn lease_settled(&self, i: Option<u8>) -> bool {
        i.is_some_and(|i| self.lease(i).settled)
    }

    /// The mdev's entry left the table or is marked gone (`r->gone`).
    fn remote_gone(&self) -> bool {
        match self.bor.mdev.remote {
            None => true,
            Some(r) => {
                r.unlinked
                    || match self.bor.entry {
                        Some(e) => e.inc != r.inc || e.gone,
                        None => true,
                    }
            }
        }
    }

    /// The mdev targets the entry in the table.
    fn mdev_owns_entry(&self) -> bool {
        match (self.bor.mdev.remote, self.bor.entry) {
            (Some(r), Some(e)) => !r.unlinked && r.inc == e.inc,
            _ => false,
        }
    }

    /// A page is given back: not pinned, in no quarantine, not leaked.
    pub fn given_back(&self, page: u8) -> bool {
        let bit = 1u8 << page;
        let held = self.bor.mdev.pinned
            | self.bor.leaked
            | self
                .bor
                .leases
                .iter()
                .flatten()
                .fold(0, |q, l| q | l.quarantine);
        held & bit == 0
    }

    /// The alive lender incarnation maps the page.
    pub fn lender_maps(&self, page: u8) -> bool {
        self.lender.dev.is_some_and(|d| d.maps & (1u8 << page) != 0)
    }

    /// Leases are told apart only by what they hold and who refers to
    /// them, not by their slot: order the slots so that states that
    /// differ only in where a lease sits are one state.
    fn canonical_leases(&mut self) {
        let key = |s: &State, i: usize| {
            s.bor.leases[i].map(|l| {
                (
                    l,
                    s.bor.mdev.lease == Some(i as u8),
                    matches!(s.bor.mdev.op, Op::Acquire { lease, .. } if lease == i as u8),
                    s.bor.work == Some(i as u8),
                )
            })
        };
        let mut order: Vec<usize> = (0..LEASES).collect();
        // Used slots first, then by content.
        order.sort_by_key(|&i| (key(self, i).is_none(), key(self, i)));
        if order.iter().enumerate().all(|(n, &i)| n == i) {
            return;
        }
        let mut new_of = [0u8; LEASES];
        for (n, &i) in order.iter().enumerate() {
            new_of[i] = n as u8;
        }
        let old = self.bor.leases;
        for (n, &i) in order.iter().enumerate() {
            self.bor.leases[n] = old[i];
        }
        let m = &mut self.bor.mdev;
        m.lease = m.lease.map(|i| new_of[i as usize]);
        if let Op::Acquire { lease, to } = m.op {
            m.op = Op::Acquire {
                lease: new_of[lease as usize],
                to,
            };
        }
        self.bor.work = self.bor.work.map(|i| new_of[i as usize]);
    }

    // ---- borrower/lease.c ----

    /// `dl_lease_new()`: a free slot, unless an unsettled lease of the
    /// same incarnation is still to be returned (-EBUSY).
    fn lease_new_slot(&self, inc: u8) -> Option<u8> {
        if self
            .bor
            .leases
            .iter()
            .flatten()
            .any(|l| l.inc == inc && !l.settled)
        {
            return None;
        }
        self.bor
            .leases
            .iter()
            .position(Option::is_none)
            .map(|i| i as u8)
    }

    /// `dl_lease_return_later()`.
    fn return_later(&mut self, i: u8) {
        let l = self.lease_mut(i);
        if !l.settled && !l.unreturned {
            l.unreturned = true;
        }
    }

    fn free_if_done(&mut self, i: u8) {
        let l = self.lease(i);
        if l.settled && l.orphaned && !l.busy {
            self.bor.leases[i as usize] = None;
        }
    }

    /// `dl_lease_put()`.
    fn lease_put(&mut self, i: u8) {
        self.lease_mut(i).orphaned = true;
        if self.lease(i).settled {
            self.free_if_done(i);
        } else {
            self.return_later(i);
        }
    }

    /// `dl_lease_settle()`: the quarantine is let go.
    fn settle(&mut self, i: u8, why: Why) {
        let l = self.lease_mut(i);
        let freed = l.quarantine != 0;
        l.quarantine = 0;
        l.settled = true;
        l.unreturned = false;
        // Noted only where a `sometimes` property looks: every note is a
        // state more.
        if freed || !matches!(why, Why::NotBorrowed | Why::Answer(Ret::Einval)) {
            self.last = Some(Note::Settled { why, freed });
        }
        self.free_if_done(i);
    }

    // ---- borrower/vdev.c, session.c ----

    /// `dl_session_lost()`.
    fn vdev_lost(&mut self) {
        if self.bor.mdev.state != VState::Borrowed {
            return;
        }
        self.bor.mdev.state = VState::Lost;
        if let Some(l) = self.bor.mdev.lease {
            self.return_later(l);
        }
    }

    /// remote.c `dl_remote_unlink()`: the entry leaves the table; its
    /// mdev, if borrowing, is lost (`dl_remote_check_owner()`).
    fn unlink_entry(&mut self) {
        if self.mdev_owns_entry() {
            self.vdev_lost();
            if let Some(r) = self.bor.mdev.remote.as_mut() {
                r.unlinked = true;
            }
        }
        self.bor.entry = None;
    }

    // ---- fabric/request.c ----

    /// `dl_fabric_req_submit()`: into the ring bound to the lender's
    /// incarnation as the borrower sees it, or a local error at once.
    fn send(&mut self, ring: u8, slot: Slot, kind: Kind) -> Result<u8, Ret> {
        let Some(to) = self.bor.view.up() else {
            return Err(Ret::Enotconn);
        };
        if self.reqs.len() >= ring as usize {
            return Err(Ret::Eagain);
        }
        self.reqs.push(Req {
            kind,
            to,
            tag: Some(slot),
        });
        Ok(to)
    }

    /// Nobody waits for `slot`'s request any more: its answer, in flight
    /// or to come, finds no request and is dropped.
    fn forget_waiter(&mut self, slot: Slot) {
        for r in &mut self.reqs {
            if r.tag == Some(slot) {
                r.tag = None;
            }
        }
        if let Some(d) = self.lender.dev.as_mut() {
            if d.slow == Some(Some(slot)) {
                d.slow = Some(None);
            }
        }
        if let Some((tag, _)) = self.lender.outbox.as_mut() {
            if *tag == Some(slot) {
                *tag = None;
            }
        }
        self.answers[slot.idx()] = None;
    }
}

impl Ownership {
    // ---- the borrower's continuations: what runs when a wait ends ----

    fn complete(&self, s: &mut State, slot: Slot, ret: Ret) {
        match slot {
            Slot::Mdev => match s.bor.mdev.op {
                Op::None => unreachable!("an answer for an mdev that waits for nothing"),
                Op::Acquire { lease, to } => self.borrow_done(s, lease, Some(to), ret),
                Op::Map => self.fill_done(s, ret),
                Op::Unmap { pages, all, then } => self.unmap_done(s, pages, all, then, ret),
                Op::Release => self.release_done(s, ret),
            },
            Slot::Work => self.work_done(s, ret),
        }
    }

    /// borrower/session.c `dl_session_borrow()` after DL_MSG_DEV_ACQUIRE. `to`:
    /// the incarnation the request went to (`peer_inc`), `None` if it was
    /// not sent.
    fn borrow_done(&self, s: &mut State, lease: u8, to: Option<u8>, ret: Ret) {
        s.bor.mdev.op = Op::None;
        if self.p.fix_lease_inc {
            if let Some(to) = to {
                s.lease_mut(lease).inc = to;
            }
        }
        if ret != Ret::Ok {
            let maybe_granted = if self.p.fix_lease_inc {
                // Sent, and not refused by the lender (struct dl_acquire).
                to.is_some() && matches!(ret, Ret::Etimedout | Ret::Enotconn)
            } else {
                matches!(ret, Ret::Etimedout | Ret::Enotconn)
            };
            if maybe_granted {
                s.return_later(lease);
            } else {
                s.settle(lease, Why::NotBorrowed);
            }
            s.lease_put(lease);
            return;
        }
        s.bor.mdev.lease = Some(lease);
        let other_inc = self.p.fix_lease_inc
            && s.bor
                .mdev
                .remote
                .is_some_and(|r| r.inc != s.lease(lease).inc);
        if s.remote_gone() || other_inc {
            s.bor.mdev.state = VState::Lost;
            s.return_later(lease);
        } else {
            s.bor.mdev.state = VState::Borrowed;
            s.bor.mdev.borrowed_in_scan = true;
        }
    }

    /// borrower/dma.c `dl_dma_fill()` after DL_MSG_DMA_MAP (fresh: on
    /// error everything is undone).
    fn fill_done(&self, s: &mut State, ret: Ret) {
        s.bor.mdev.op = Op::None;
        if ret == Ret::Ok {
            s.bor.mdev.dma_on = true;
        } else {
            self.unmap(s, self.p.all_pages(), true, Then::FillFailed);
        }
    }

    /// borrower/dma.c `dl_dma_release()` / `dl_dma_lender_unmap()`: have
    /// the lender unmap, if it may map anything of ours.
    fn unmap(&self, s: &mut State, pages: u8, all: bool, then: Then) {
        let m = s.bor.mdev;
        let may_map = m.dma_mapped && !s.lease_settled(m.lease);
        if !may_map {
            return self.unmap_done(s, pages, all, then, Ret::Ok);
        }
        if m.state != VState::Borrowed {
            return self.unmap_done(s, pages, all, then, Ret::Enotconn);
        }
        match s.send(self.p.ring, Slot::Mdev, Kind::DmaUnmap { pages, all }) {
            Ok(_) => s.bor.mdev.op = Op::Unmap { pages, all, then },
            Err(e) => self.unmap_done(s, pages, all, then, e),
        }
    }

    /// borrower/dma.c `dl_dma_release()` after the lender's answer:
    /// `dl_dma_unpin_range()`, quarantining what it did not acknowledge.
    fn unmap_done(&self, s: &mut State, pages: u8, all: bool, then: Then, ret: Ret) {
        s.bor.mdev.op = Op::None;
        let acked = ret == Ret::Ok;
        if !acked {
            s.vdev_lost();
        }
        if all && acked {
            s.bor.mdev.dma_mapped = false;
        }
        let range = if all { self.p.all_pages() } else { pages } & s.bor.mdev.pinned;
        // dl_dma_unpin(): the release work may have settled the lease.
        if !acked && !s.lease_settled(s.bor.mdev.lease) {
            match s.bor.mdev.lease {
                Some(l) => s.lease_mut(l).quarantine |= range,
                None => s.bor.leaked |= range,
            }
        }
        s.bor.mdev.pinned &= !range;
        match then {
            Then::FillFailed | Then::Disable => s.bor.mdev.dma_on = false,
            Then::UnmapRange => {}
            Then::Close => self.release_remote(s),
        }
    }

    /// borrower/session.c `dl_session_release()`.
    fn release_remote(&self, s: &mut State) {
        if s.bor.mdev.lease.is_none() {
            return close_done(s);
        }
        if s.bor.mdev.state != VState::Borrowed {
            return self.release_done(s, Ret::Enotconn);
        }
        s.bor.mdev.state = VState::Returning;
        match s.send(self.p.ring, Slot::Mdev, Kind::Release) {
            Ok(_) => s.bor.mdev.op = Op::Release,
            Err(e) => self.release_done(s, e),
        }
    }

    /// borrower/session.c `dl_session_release()` after DL_MSG_DEV_RELEASE.
    fn release_done(&self, s: &mut State, ret: Ret) {
        s.bor.mdev.op = Op::None;
        let l = s.bor.mdev.lease.take().expect("a lease to return");
        if ret.settles() {
            s.settle(l, Why::Answer(ret));
        }
        s.lease_put(l);
        s.bor.mdev.dma_mapped = false;
        close_done(s);
    }

    /// borrower/lease.c `dl_lease_release_work()` after DL_MSG_DEV_RELEASE.
    fn work_done(&self, s: &mut State, ret: Ret) {
        let l = s.bor.work.take().expect("the release work waits");
        s.lease_mut(l).busy = false;
        if ret.settles() {
            s.settle(l, Why::Answer(ret));
        } else {
            s.free_if_done(l);
        }
    }

    // ---- the lender ----

    /// lender/msg.c `dl_lender_on_dev_msg()`: `dl_lender_open()`, then the
    /// type's `dl_serve_*()`. `None`: answered later by the slow work.
    fn serve(&self, s: &mut State, kind: Kind, tag: Option<Slot>) -> Option<Ret> {
        let l = &mut s.lender;
        if !l.loaded {
            return Some(Ret::Eopnotsupp);
        }
        let Some(d) = l.dev.as_mut() else {
            return Some(Ret::Enodev);
        };
        // dl_lent_get(): not in the xarray.
        if !d.in_table {
            return Some(Ret::Enodev);
        }
        // dl_lent_lock_unless_slow(): -EAGAIN, EIO on the wire.
        if d.slow_holds {
            return Some(Ret::Eio);
        }
        if d.dead {
            return Some(Ret::Enodev);
        }
        // dl_lent_is_holder(): the link is up (requests are served only
        // then) and the incarnation is the one that acquired.
        let holder = d.holder == Holder::Us;
        if !d.allowed && !holder {
            return Some(Ret::Enodev);
        }
        if kind == Kind::Acquire {
            // dl_serve_acquire().
            if d.holder != Holder::Nobody {
                return Some(Ret::Ebusy);
            }
            d.holder = Holder::Us;
            return Some(Ret::Ok);
        }
        if !holder {
            return Some(if d.holder == Holder::Nobody {
                Ret::Einval
            } else {
                Ret::Ebusy
            });
        }
        // lent->slow_busy: a reset, release or take-back is due.
        if d.slow.is_some() || d.reclaim {
            return Some(Ret::Eio);
        }
        match kind {
            Kind::Acquire => unreachable!(),
            Kind::Release => {
                // dl_serve_slow(), dl_lent_slow_take().
                d.slow = Some(tag);
                None
            }
            Kind::DmaMap(pages) => {
                // dl_lent_dma_map(): an overlap is refused, the batch
                // undone (-EEXIST, EINVAL on the wire).
                if d.maps & pages != 0 {
                    Some(Ret::Einval)
                } else {
                    d.maps |= pages;
                    Some(Ret::Ok)
                }
            }
            Kind::DmaUnmap { pages, all } => {
                d.maps &= if all { 0 } else { !pages };
                Some(Ret::Ok)
            }
        }
    }
}

/// borrower/vdev.c `dl_vdev_close()`, its end.
fn close_done(s: &mut State) {
    s.bor.mdev.state = VState::Idle;
    s.bor.mdev.open = false;
    s.bor.mdev.dma_on = false;
}

/// lender/slow.c `dl_lent_reclaim()`: bus mastering off, every mapping
/// removed, reset, available.
fn reclaim(d: &mut Dev) {
    d.maps = 0;
    d.holder = Holder::Nobody;
}

impl Model for Ownership {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        // Steady: the lender lends the device, each side sees the other up,
        // the borrower has listed it, the mdev exists and is closed.
        vec![State {
            lender: Lender {
                inc: 0,
                loaded: true,
                sees_borrower: true,
                dev: Some(Dev::lent()),
                outbox: None,
            },
            reqs: Vec::new(),
            answers: [None; 2],
            bor: Borrower {
                view: View::Up(0),
                entry: Some(Entry {
                    inc: 0,
                    gone: false,
                }),
                scan: None,
                mdev: Mdev {
                    open: false,
                    state: VState::Idle,
                    remote: None,
                    lease: None,
                    pinned: 0,
                    dma_mapped: false,
                    dma_on: false,
                    op: Op::None,
                    borrowed_in_scan: false,
                },
                leases: [None; LEASES],
                work: None,
                leaked: 0,
            },
            last: None,
        }]
    }

    fn actions(&self, s: &State, a: &mut Vec<Action>) {
        let p = &self.p;
        let m = &s.bor.mdev;
        let idle = m.op == Op::None;

        // ---- the mdev ----
        if !m.open && idle {
            let target_ok = match m.remote {
                None => s.bor.entry.is_some_and(|e| !e.gone),
                Some(_) => !s.remote_gone(),
            };
            if target_ok {
                a.push(Action::DlVdevOpen);
            }
            if m.remote.is_some() && s.remote_gone() {
                a.push(Action::MdevRecreate);
            }
        }
        if m.open && idle && m.state == VState::Idle {
            // dl_lease_new() is asked with the entry's incarnation either
            // way; the fix renames the lease once the request went out.
            let inc = m.remote.expect("an open mdev targets an entry").inc;
            if s.lease_new_slot(inc).is_some() {
                a.push(Action::DlVdevBorrow);
            }
        }
        if let (Op::Acquire { .. }, Some(Ret::Eio)) = (m.op, s.answers[Slot::Mdev.idx()]) {
            a.push(Action::DlVdevBorrowRetry);
        }
        if let (Op::Unmap { .. }, Some(Ret::Eio)) = (m.op, s.answers[Slot::Mdev.idx()]) {
            a.push(Action::DlDmaUnmapRequestRetry);
        }
        if m.open
            && idle
            && m.state == VState::Borrowed
            && !m.dma_on
            && !m.dma_mapped
            && m.pinned == 0
        {
            a.push(Action::DlDmaEnable);
        }
        if m.open && idle && (m.dma_mapped || m.pinned != 0) {
            a.push(Action::DlDmaDisable);
        }
        if idle && p.pages > 1 {
            for page in 0..p.pages {
                if m.pinned & (1 << page) != 0 {
                    a.push(Action::DlDmaUnmapRange(page));
                }
            }
        }
        if m.open && idle {
            a.push(Action::DlVdevClose);
        }

        // ---- the release work ----
        if s.bor.work.is_none() {
            if let Some(_up) = s.bor.view.up() {
                for (i, l) in s.bor.leases.iter().enumerate() {
                    if let Some(l) = l {
                        if !l.settled && l.unreturned && !l.busy {
                            a.push(Action::DlLeaseReleaseWork(i as u8));
                        }
                    }
                }
            }
        }

        // ---- the remote table ----
        match s.bor.scan {
            None => {
                if s.bor.view.up().is_some() {
                    a.push(Action::DlRemoteScanPeer);
                }
            }
            Some(pi) => {
                a.push(Action::DlRemoteScanFail);
                if self.scan_answers(s, pi) {
                    a.push(Action::DlRemoteUpdate);
                }
            }
        }

        // ---- the fabric ----
        match s.bor.view {
            View::Up(_) => a.push(Action::DlPeerSetDown),
            View::Down(_) => a.push(Action::DlPeerTryUp),
        }
        for slot in [Slot::Mdev, Slot::Work] {
            let waits = match slot {
                Slot::Mdev => !idle,
                Slot::Work => s.bor.work.is_some(),
            };
            if let Some(ret) = s.answers[slot.idx()] {
                a.push(Action::DlReqComplete(slot, ret));
            }
            if waits {
                a.push(Action::DlFabricReqWaitTimeout(slot));
            }
        }
        if !s.reqs.is_empty() {
            a.push(Action::LoseRequest);
        }

        // ---- the lender ----
        let l = &s.lender;
        if let Some(r) = s.reqs.first() {
            if l.sees_borrower && r.to == l.inc && l.outbox.is_none() {
                a.push(Action::DlLenderOnDevMsg(r.kind));
                let grants = l.loaded
                    && l.dev.is_some_and(|d| {
                        d.in_table
                            && !d.slow_holds
                            && !d.dead
                            && d.allowed
                            && d.holder == Holder::Nobody
                    });
                if p.acquire_race && r.kind == Kind::Acquire && grants {
                    a.push(Action::DlServeAcquireSeesDown);
                }
            }
        }
        if l.outbox.is_some() {
            a.push(Action::DlLenderRespond);
        }
        if l.sees_borrower {
            a.push(Action::DlLenderPeerDown);
        } else {
            a.push(Action::LenderPeerUp);
        }
        if let Some(d) = &l.dev {
            if !d.removing && (d.slow.is_some() || d.reclaim) {
                a.push(Action::DlLentSlowWork);
            }
            if !d.removing {
                a.push(Action::DlLenderRemove);
            } else if !d.dead {
                a.push(Action::DlLenderRemoveReclaim);
            } else if p.fix_remove_order {
                a.push(Action::DlLenderRemoveErase);
            }
            if p.allowed_hosts && !d.removing {
                a.push(Action::AllowedHostsStore(!d.allowed));
            }
            if p.other_host && l.loaded && d.in_table && !d.removing {
                match d.holder {
                    Holder::Nobody => a.push(Action::OtherHostAcquire),
                    Holder::Other => a.push(Action::OtherHostRelease),
                    Holder::Us => {}
                }
            }
        } else if p.unload && l.loaded {
            a.push(Action::DlLenderExit);
        }
        // Bound: a lender restarts while it lends its device (a restart
        // after a removal adds states, not behaviour of interest), unless
        // the deeper bounds ask for it.
        if l.inc < p.restarts && (p.restart_after_removal || l.dev.is_some_and(|d| !d.removing)) {
            a.push(Action::LenderRestart);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        s.last = None;
        let ring = self.p.ring;
        match action {
            Action::DlVdevOpen => {
                if s.bor.mdev.remote.is_none() {
                    let e = s.bor.entry.expect("a listed entry");
                    s.bor.mdev.remote = Some(RemoteRef {
                        inc: e.inc,
                        unlinked: false,
                    });
                }
                s.bor.mdev.open = true;
                s.bor.mdev.state = VState::Idle;
            }
            Action::MdevRecreate => s.bor.mdev.remote = None,
            Action::DlVdevBorrow => {
                // The remote entry's incarnation, maybe stale; fixed, the
                // lease takes the request's peer_inc in borrow_done().
                let inc = s.bor.mdev.remote?.inc;
                let lease = s.lease_new_slot(inc)?;
                s.bor.leases[lease as usize] = Some(Lease {
                    inc,
                    settled: false,
                    unreturned: false,
                    orphaned: false,
                    busy: false,
                    quarantine: 0,
                });
                match s.send(ring, Slot::Mdev, Kind::Acquire) {
                    Ok(to) => s.bor.mdev.op = Op::Acquire { lease, to },
                    Err(e) => self.borrow_done(&mut s, lease, None, e),
                }
            }
            Action::DlVdevBorrowRetry => {
                let Op::Acquire { lease, .. } = s.bor.mdev.op else {
                    unreachable!()
                };
                s.answers[Slot::Mdev.idx()] = None;
                match s.send(ring, Slot::Mdev, Kind::Acquire) {
                    Ok(to) => s.bor.mdev.op = Op::Acquire { lease, to },
                    // Not sent (struct dl_acquire: inc 0): the lender
                    // refused the last one, so nothing was granted.
                    Err(e) => self.borrow_done(&mut s, lease, None, e),
                }
            }
            Action::DlDmaEnable => {
                s.bor.mdev.pinned = self.p.all_pages();
                // bt.sent: the lender may map from now on.
                s.bor.mdev.dma_mapped = true;
                match s.send(ring, Slot::Mdev, Kind::DmaMap(self.p.all_pages())) {
                    Ok(_) => s.bor.mdev.op = Op::Map,
                    Err(e) => self.fill_done(&mut s, e),
                }
            }
            Action::DlDmaDisable => self.unmap(&mut s, self.p.all_pages(), true, Then::Disable),
            Action::DlDmaUnmapRange(page) => self.unmap(&mut s, 1 << page, false, Then::UnmapRange),
            Action::DlDmaUnmapRequestRetry => {
                let Op::Unmap { pages, all, then } = s.bor.mdev.op else {
                    unreachable!()
                };
                s.answers[Slot::Mdev.idx()] = None;
                s.bor.mdev.op = Op::None;
                self.unmap(&mut s, pages, all, then);
            }
            Action::DlVdevClose => {
                let m = s.bor.mdev;
                if m.dma_mapped || m.pinned != 0 {
                    self.unmap(&mut s, self.p.all_pages(), true, Then::Close);
                } else {
                    self.release_remote(&mut s);
                }
            }
            Action::DlLeaseReleaseWork(i) => {
                let up = s.bor.view.up()?;
                if up != s.lease(i).inc {
                    s.settle(i, Why::NewIncarnation);
                } else {
                    s.lease_mut(i).busy = true;
                    s.bor.work = Some(i);
                    if let Err(e) = s.send(ring, Slot::Work, Kind::Release) {
                        self.work_done(&mut s, e);
                    }
                }
            }
            Action::DlRemoteScanPeer => {
                s.bor.scan = Some(s.bor.view.up()?);
                s.bor.mdev.borrowed_in_scan = false;
            }
            Action::DlRemoteScanFail => s.bor.scan = None,
            Action::DlRemoteUpdate => {
                let pi = s.bor.scan.take()?;
                self.remote_update(&mut s, pi);
            }
            Action::DlPeerSetDown => {
                let View::Up(inc) = s.bor.view else {
                    return None;
                };
                s.bor.view = View::Down(inc);
                // dl_req_fail(): every waiter fails with -ENOTCONN.
                s.forget_waiter(Slot::Mdev);
                s.forget_waiter(Slot::Work);
                // dl_remote_peer_down().
                if let Some(e) = s.bor.entry.as_mut() {
                    e.gone = true;
                    if s.mdev_owns_entry() {
                        s.vdev_lost();
                    }
                }
                if s.bor.mdev.op != Op::None {
                    self.complete(&mut s, Slot::Mdev, Ret::Enotconn);
                }
                if s.bor.work.is_some() {
                    self.complete(&mut s, Slot::Work, Ret::Enotconn);
                }
            }
            Action::DlPeerTryUp => s.bor.view = View::Up(s.lender.inc),
            Action::DlReqComplete(slot, ret) => {
                s.answers[slot.idx()] = None;
                self.complete(&mut s, slot, ret);
            }
            Action::DlFabricReqWaitTimeout(slot) => {
                s.forget_waiter(slot);
                self.complete(&mut s, slot, Ret::Etimedout);
            }
            Action::LoseRequest => {
                s.reqs.remove(0);
            }
            Action::DlLenderOnDevMsg(_) => {
                let r = s.reqs.remove(0);
                if let Some(ret) = self.serve(&mut s, r.kind, r.tag) {
                    if let Some(slot) = r.tag {
                        debug_assert!(s.answers[slot.idx()].is_none());
                        s.answers[slot.idx()] = Some(ret);
                    }
                }
            }
            Action::DlServeAcquireSeesDown => {
                let r = s.reqs.remove(0);
                let d = s.lender.dev.as_mut()?;
                d.holder = Holder::Us;
                d.reclaim = true;
                s.lender.sees_borrower = false;
                if !self.p.fix_acquire_silent {
                    s.lender.outbox = Some((r.tag, Ret::Einval));
                }
            }
            Action::DlLenderRespond => {
                let (tag, ret) = s.lender.outbox.take()?;
                if let (Some(slot), true) = (tag, s.lender.sees_borrower) {
                    s.answers[slot.idx()] = Some(ret);
                }
            }
            Action::DlLentSlowWork => {
                let up = s.lender.sees_borrower;
                let d = s.lender.dev.as_mut()?;
                if d.reclaim {
                    d.reclaim = false;
                    if !d.dead && d.holder == Holder::Us && !up {
                        reclaim(d);
                    }
                }
                if let Some(tag) = d.slow.take() {
                    // dl_lent_slow_request().
                    let ret = if d.dead {
                        Ret::Enodev
                    } else if d.holder != Holder::Us || !up {
                        if d.holder == Holder::Nobody {
                            Ret::Einval
                        } else {
                            Ret::Ebusy
                        }
                    } else {
                        reclaim(d);
                        Ret::Ok
                    };
                    // dl_lender_respond(): only through a link that is up.
                    if let (Some(slot), true) = (tag, up) {
                        s.answers[slot.idx()] = Some(ret);
                    }
                }
            }
            Action::DlLenderPeerDown => {
                s.lender.sees_borrower = false;
                if let Some(d) = s.lender.dev.as_mut() {
                    if d.holder == Holder::Us {
                        d.reclaim = true;
                    }
                }
            }
            Action::LenderPeerUp => s.lender.sees_borrower = true,
            Action::DlLenderRemove => {
                let d = s.lender.dev.as_mut()?;
                d.removing = true;
                if self.p.fix_remove_order {
                    d.slow_holds = true;
                } else {
                    d.in_table = false;
                }
            }
            Action::DlLenderRemoveReclaim => {
                let d = s.lender.dev.as_mut()?;
                d.dead = true;
                reclaim(d);
                if !self.p.fix_remove_order {
                    // dl_lent_slow_cancel(): a taken request goes
                    // unanswered; the rest of the removal.
                    s.lender.dev = None;
                }
            }
            Action::DlLenderRemoveErase => {
                // xa_erase(), dl_lent_slow_cancel(), the rest.
                s.lender.dev = None;
            }
            Action::DlLenderExit => s.lender.loaded = false,
            Action::LenderRestart => {
                s.lender = Lender {
                    inc: s.lender.inc + 1,
                    loaded: true,
                    sees_borrower: false,
                    dev: Some(Dev::lent()),
                    outbox: None,
                };
                // Nothing bound to the old incarnation reaches the new one.
                let inc = s.lender.inc;
                s.reqs.retain(|r| r.to == inc);
            }
            Action::AllowedHostsStore(allowed) => s.lender.dev.as_mut()?.allowed = allowed,
            Action::OtherHostAcquire => s.lender.dev.as_mut()?.holder = Holder::Other,
            Action::OtherHostRelease => reclaim(s.lender.dev.as_mut()?),
        }
        s.canonical_leases();
        // The flag means nothing without a scan under way.
        if s.bor.scan.is_none() {
            s.bor.mdev.borrowed_in_scan = false;
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut v = vec![
            Property::<Self>::always(INV_PAGES, |m, s| {
                (0..m.p.pages).all(|p| !(s.given_back(p) && s.lender_maps(p)))
            }),
            Property::<Self>::always(INV_HOLDER, |m, s| {
                let Some(d) = s.lender.dev else { return true };
                let inc = s.lender.inc;
                // A borrow waiting for its DL_MSG_DEV_ACQUIRE: fixed, its
                // lease takes the incarnation asked when the wait ends.
                let asking = m.p.fix_lease_inc
                    && matches!(s.bor.mdev.op, Op::Acquire { lease, to }
                        if to == inc && !s.lease(lease).settled);
                d.removing
                    || d.holder != Holder::Us
                    || asking
                    || s.bor
                        .leases
                        .iter()
                        .flatten()
                        .any(|l| !l.settled && l.inc == inc)
            }),
            Property::<Self>::sometimes(
                "the device is borrowed and DMA-mapped by the lender",
                |_, s| {
                    s.bor.mdev.state == VState::Borrowed
                        && s.bor.mdev.dma_on
                        && s.lender.dev.is_some_and(|d| d.maps != 0)
                },
            ),
            Property::<Self>::sometimes("a page is quarantined", |_, s| {
                s.bor.leases.iter().flatten().any(|l| l.quarantine != 0)
            }),
            Property::<Self>::sometimes("a lease settles on a returned device (0)", |_, s| {
                settled(s, Why::Answer(Ret::Ok), false)
            }),
            Property::<Self>::sometimes("a lease settles on ENODEV", |_, s| {
                settled(s, Why::Answer(Ret::Enodev), false)
            }),
            Property::<Self>::sometimes("a lease settles because the lender restarted", |_, s| {
                settled(s, Why::NewIncarnation, false)
            }),
            Property::<Self>::sometimes("quarantined pages are released", |_, s| {
                matches!(s.last, Some(Note::Settled { freed: true, .. }))
            }),
            Property::<Self>::sometimes("quarantined pages are released on ENODEV", |_, s| {
                settled(s, Why::Answer(Ret::Enodev), true)
            }),
            Property::<Self>::sometimes(
                "quarantined pages are released because the lender restarted",
                |_, s| settled(s, Why::NewIncarnation, true),
            ),
        ];
        if self.p.other_host {
            v.push(Property::<Self>::sometimes(
                "a lease settles on EBUSY",
                |_, s| settled(s, Why::Answer(Ret::Ebusy), false),
            ));
        }
        if self.p.unload {
            v.push(Property::<Self>::sometimes(
                "a lease settles on EOPNOTSUPP",
                |_, s| settled(s, Why::Answer(Ret::Eopnotsupp), false),
            ));
        }
        v
    }
}

/// The last step settled a lease for `why` (and freed pages, if `freed`).
fn settled(s: &State, why: Why, freed: bool) -> bool {
    matches!(s.last, Some(Note::Settled { why: w, freed: f }) if w == why && (f || !freed))
}

impl Ownership {
    /// Whether the scan that read `pi` can get its answers now: the link is
    /// up to the incarnation that is alive and that sees the borrower,
    /// and the device is not held busy by its removal (DEV_INFO would be
    /// answered EAGAIN until the scan gives up). Fixed: a scan whose
    /// lender is no longer `pi` drops its answers (it fails instead).
    fn scan_answers(&self, s: &State, pi: u8) -> bool {
        let Some(now) = s.bor.view.up() else {
            return false;
        };
        if now != s.lender.inc || !s.lender.sees_borrower {
            return false;
        }
        if self.p.fix_lease_inc && now != pi {
            return false;
        }
        !s.lender
            .dev
            .is_some_and(|d| d.in_table && d.slow_holds && s.lender.loaded)
    }

    /// borrower/remote.c `dl_remote_update()` with the answers of the
    /// lender as it is now, under the incarnation `pi` read at the start.
    fn remote_update(&self, s: &mut State, pi: u8) {
        let l = s.lender;
        let listed = l.loaded && l.dev.is_some_and(|d| d.in_table && d.allowed && !d.dead);
        let ours = l.dev.is_some_and(|d| d.holder == Holder::Us);
        // Entries of an earlier incarnation, or no longer listed, leave.
        if let Some(e) = s.bor.entry {
            if e.inc != pi || !listed {
                s.unlink_entry();
            }
        }
        if !listed {
            return;
        }
        match s.bor.entry.as_mut() {
            Some(e) => {
                e.gone = false;
                // dl_remote_check_owner(), unless borrowed since the start.
                if !ours && !s.bor.mdev.borrowed_in_scan && s.mdev_owns_entry() {
                    s.vdev_lost();
                }
            }
            None => {
                s.bor.entry = Some(Entry {
                    inc: pi,
                    gone: false,
                })
            }
        }
    }
}
