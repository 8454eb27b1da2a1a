/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Fabric core internals, shared by the files of fabric/ and by nothing else.
 *
 * Locking, outermost first (fabric.h says where the clients' locks go):
 *  - dl_clients_lock (client.c): started fabrics, registered clients,
 *    which clients a fabric serves (with fab->lock).
 *  - fab->lock (mutex): peer liveness tracking and link transitions, window
 *    binding. Held by the liveness work, the stop path and window removal.
 *  - peer->link_lock (spinlock): the link snapshot (up, proto, epoch,
 *    incarnation, window, layout, name) that senders, the receiver and the
 *    API read; written under fab->lock too.
 *  - peer->tx.lock (spinlock): the peer's transmit ring, and every store
 *    into the peer's inbox (the receive side's consumer index too).
 *  - the xarray lock of fab->reqs: requests in flight.
 *  - fab->inbound_lock (mutex): the inbound windows' allocators; held
 *    around allocator calls only, never around a backend call.
 * The receive state of a ring (struct dl_rx_ring) is touched only by the
 * receive work, which never runs twice at once.
 */
#ifndef DL_FABRIC_INTERNAL_H
#define DL_FABRIC_INTERNAL_H

#include <linux/atomic.h>
#include <linux/mutex.h>
#include <linux/rwsem.h>
#include <linux/spinlock.h>
#include <linux/timer.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>

#include "devlend_wire.h"
#include "backend.h"
#include "fabric.h"

struct dentry;
struct kobject;
struct seq_file;

/* How long a sender waits for room in a full ring. */
#define DL_TX_FULL_WAIT_MS	1000
/*
 * How long a host that leaves waits for its peers to stop writing into its
 * inbox before it gives up and leaks the inbox instead of freeing it.
 */
#define DL_LEAVE_ACK_MS		(4 * DL_HEARTBEAT_MS + 1000)

/* Per-peer counters, shown in debugfs. */
enum dl_peer_counter {
	DL_CNT_TX_MSGS,
	DL_CNT_RX_MSGS,
	DL_CNT_TX_RING_FULL,
	DL_CNT_RX_SEQ_ERRORS,
	DL_CNT_RX_BAD_MSGS,
	DL_CNT_RX_CORRUPT_RING,
	DL_CNT_RX_STALE,
	DL_CNT_LATE_RESPONSES,
	DL_CNT_PING_RX,
	DL_CNT_PING_CRC_ERRORS,
	DL_CNT_PING_ORDER_ERRORS,
	DL_CNT_LINK_UPS,
	DL_CNT_LINK_DOWNS,
	DL_CNT_RX_HELD_BACK,
	DL_CNT_RX_UNKNOWN,
	DL_CNT_RX_IN_IRQ,
	DL_CNT_ANSWERS,		/* answers to this host's requests */
	DL_CNT_ANSWER_NS,	/* their round trips, summed */
	DL_CNT_TX_FENCED,	/* stores refused: its slot no longer vouches */
	DL_CNT_STALE_ANSWERS,	/* answers owed to an incarnation that is over */
	DL_CNT_NR
};

extern const char * const dl_peer_counter_names[DL_CNT_NR];

/**
 * struct dl_ctl_geom - the validated geometry of the control area; copied
 * once from the header, never re-read from shared memory.
 * @max_hosts: host info slots, and entries of an inbox.
 * @ring_slots: slots per ring, a power of two.
 * @slot_size: bytes per slot, message header included.
 * @hosts_off: offset of host info slot 0.
 * @host_stride: bytes between host info slots.
 * @inbox_size: bytes of each host's inbox.
 * @ring_stride: bytes between inbox entries.
 * @total_size: bytes of the area the header describes.
 * @fabric_id: the fabric instance, for logs.
 */
struct dl_ctl_geom {
	u32 max_hosts;
	u32 ring_slots;
	u32 slot_size;
	u32 hosts_off;
	u32 host_stride;
	u32 inbox_size;
	u32 ring_stride;
	u64 total_size;
	u64 fabric_id;
};

/**
 * struct dl_win - an allocator of one peer's bounded inbound window, by
 *	pages (window.c).
 * @map: bit i: page i is handed out or reserved.
 * @pages: pages in the window.
 * @reserved: pages at its start never handed out (ident page, inbox).
 * @used: pages set in @map, @reserved included.
 * @next: where the next search starts (next fit).
 * @refused: allocations that found no room.
 */
struct dl_win {
	unsigned long *map;
	unsigned long pages;
	unsigned long reserved;
	unsigned long used;
	unsigned long next;
	u64 refused;
};

/**
 * struct dl_ram_layout - how a host's physical RAM maps onto a window.
 * @ram_size: bytes of RAM, the size of the window onto it.
 * @ram_low_size: RAM at physical 0, at the same window offset.
 * @ram_high_base: physical base of the rest, which follows in the window.
 */
struct dl_ram_layout {
	u64 ram_size;
	u64 ram_low_size;
	u64 ram_high_base;
};

/**
 * struct dl_peer_snap - one consistent read of a peer's host info, decoded.
 * @state: an &enum dl_host_state; the rest is valid only if UP.
 * @incarnation: the peer's incarnation.
 * @heartbeat: its heartbeat counter.
 * @proto_min: lowest protocol version it speaks.
 * @proto_max: highest protocol version it speaks.
 * @layout: its RAM layout.
 * @ident_phys: physical address of its ident page.
 * @ident_token: what the ident page holds.
 * @inbound: %DL_INBOUND_RAM or %DL_INBOUND_WINDOW.
 * @inbox_phys: address of its inbox (see @inbound).
 * @bound_me: the incarnation of this host it has bound to, or 0.
 * @name: its host name, made printable.
 */
struct dl_peer_snap {
	u32 state;
	u64 incarnation;
	u64 heartbeat;
	u16 proto_min;
	u16 proto_max;
	struct dl_ram_layout layout;
	u64 ident_phys;
	u64 ident_token;
	u32 inbound;
	u64 inbox_phys;
	u64 bound_me;
	char name[sizeof_field(struct dl_host_info, name) + 1];
};

/**
 * struct dl_ring - one entry of an inbox: indices and slots.
 * @ctrl: its indices (see struct dl_ring_ctrl).
 * @slots: its first slot.
 */
struct dl_ring {
	struct dl_ring_ctrl *ctrl;
	u8 *slots;
};

/**
 * struct dl_tx_ring - this host's side of the ring to a peer, which lives
 *	in the peer's inbox.
 * @lock: serializes senders and every store into the peer's inbox; taken
 *	with interrupts off, as interrupt handlers send
 *	(dl_ring_send_atomic()).
 * @open: @out may be written: the link is up (@lock).
 * @map: the mapping of our entry in the peer's inbox, through the window
 *	onto its RAM, while @open or until the link goes down (@lock and
 *	fab->lock to set, either to read).
 * @out: our entry in the peer's inbox, in @map.
 * @peer_inc: the incarnation the peer's slot must show while @open.
 * @prod: the producer index; the shared copy is never read back.
 * @seq: sequence number of the next message.
 */
struct dl_tx_ring {
	spinlock_t lock;		/* senders, stores into the peer's inbox */
	bool open;
	void *map;
	struct dl_ring out;
	u64 peer_inc;
	u32 prod;
	u32 seq;
};

/**
 * struct dl_rx_ring - this host's side of the ring from a peer, in this
 * host's inbox; used by the receive work only.
 * @in: the peer's entry in this host's inbox.
 * @gen: the binding (dl_peer.bind_gen) @cons counts for.
 * @cons: the consumer index; the shared copy is never read back.
 * @synced: @epoch and @next_seq are valid.
 * @epoch: the sender epoch of the last message taken.
 * @next_seq: the sequence number expected next.
 * @held_back: its messages wait in the ring because the ring to it has no
 *	room for an answer (dl_rx_peer()).
 */
struct dl_rx_ring {
	struct dl_ring in;
	u32 gen;
	u32 cons;
	bool synced;
	u32 epoch;
	u32 next_seq;
	bool held_back;
};

/**
 * struct dl_ping_rx - ping responder state of one peer; receive work only.
 * @valid: @nonce and @next_seq are valid.
 * @nonce: the self-test run seen last.
 * @next_seq: the ping number expected next in that run.
 */
struct dl_ping_rx {
	bool valid;
	u64 nonce;
	u32 next_seq;
};

/**
 * struct dl_peer - everything this host keeps about one other host.
 * @fab: the fabric.
 * @id: the peer's host id.
 * @link_lock: the link snapshot (@up to @name) is written under fab->lock
 *	and @link_lock, so it can be read under either.
 * @up: the link is up.
 * @proto: the negotiated protocol version while up.
 * @epoch: the low 32 bits of @incarnation while up.
 * @incarnation: the incarnation being watched.
 * @win: the window onto its RAM, once found.
 * @layout: its RAM layout.
 * @name: its host name.
 * @known: its info was valid at least once (fab->lock).
 * @tracking: an incarnation is being watched (fab->lock).
 * @last_hb: its heartbeat as last seen (fab->lock).
 * @hb_jiffies: when the heartbeat was last seen to move (fab->lock).
 * @hb_moved: it moved since watching began or since a timeout (fab->lock).
 * @warned: logged why it cannot come up (fab->lock).
 * @info_bad: its host info was malformed at the last scan (fab->lock).
 * @ident_ok: @ident is usable (fab->lock).
 * @ident: how to recognize its window (fab->lock).
 * @proto_min: lowest version it speaks (fab->lock).
 * @proto_max: highest version it speaks (fab->lock).
 * @inbox_phys: address of its inbox, as it handed it out (fab->lock).
 * @inbound: how it hands out addresses, DL_INBOUND_* (fab->lock).
 * @bound: a ring pair is bound to @bound_inc: our bound[] entry for it
 *	says so, and our entry in its inbox may be written (fab->lock).
 * @bound_inc: the incarnation bound to (fab->lock).
 * @bind_gen: bumped at each binding, before the link comes up; the
 *	receive side restarts its indices when it changes.
 * @tx: the ring to it.
 * @rx: the ring from it.
 * @ping: ping responder state.
 * @reqs_out: requests in flight to it, at most dl_ring_share().
 * @req_wq: where requesters wait for @reqs_out to drop.
 * @kobj: its sysfs directory.
 * @cnt: counters, indexed by &enum dl_peer_counter.
 */
struct dl_peer {
	struct dl_fabric *fab;
	u32 id;

	spinlock_t link_lock;	/* the link snapshot */
	bool up;
	u16 proto;
	u32 epoch;
	u64 incarnation;
	struct dl_fabric_window *win;
	struct dl_ram_layout layout;
	char name[sizeof_field(struct dl_host_info, name) + 1];

	bool known;
	bool tracking;
	u64 last_hb;
	unsigned long hb_jiffies;
	bool hb_moved;
	bool warned;
	bool info_bad;
	bool ident_ok;
	struct dl_fabric_ident ident;
	u16 proto_min;
	u16 proto_max;
	u64 inbox_phys;
	u32 inbound;
	bool bound;
	u64 bound_inc;
	u32 bind_gen;

	struct dl_tx_ring tx;
	struct dl_rx_ring rx;
	struct dl_ping_rx ping;

	atomic_t reqs_out;
	wait_queue_head_t req_wq;

	struct kobject *kobj;
	atomic64_t cnt[DL_CNT_NR];
};

/**
 * struct dl_handler - a registered message handler.
 * @fn: the handler, in the receive work.
 * @atomic_fn: if not NULL, tries posted messages first in the doorbell
 *	interrupt.
 * @priv: their argument.
 */
struct dl_handler {
	dl_fabric_msg_fn fn;
	dl_fabric_msg_atomic_fn atomic_fn;
	void *priv;
};

/**
 * struct dl_db_handler - a registered doorbell callback.
 * @fn: the callback.
 * @priv: its argument.
 */
struct dl_db_handler {
	dl_fabric_db_fn fn;
	void *priv;
};

/**
 * struct dl_fabric - one fabric adapter and the peers behind it.
 * @dev: the adapter.
 * @ops: its backend.
 * @backend_priv: the backend's data.
 * @db_vectors: doorbell vectors the adapter receives.
 * @ctl: the control area.
 * @geom: its validated geometry.
 * @host_id: this host's id.
 * @self: this host's info slot.
 * @incarnation: this incarnation, random.
 * @ident_token: what @ident_page holds, random.
 * @ident_page: the page peers look for through their windows.
 * @inbox: this host's inbox, zeroed at allocation, physically contiguous.
 * @inbox_leaked: a peer may still write into @inbox: never free it.
 * @layout: this host's RAM layout, as published: with a bounded inbound
 *	window, the identity of its offsets.
 * @inbound_size: bytes of each peer's bounded window onto this host, 0
 *	when peers see all of its RAM (window.c).
 * @ident_addr: the address of @ident_page peers are given.
 * @inbox_addr: the address of @inbox peers are given.
 * @inbound_lock: @inbound's allocators.
 * @inbound: by host id: the allocator of that peer's window, when this
 *	host hands out window space.
 * @inbound_refused: inbound maps refused (window full, or unreachable).
 * @inbound_high_bytes: bytes of RAM above 4 GiB handed out window space.
 * @heartbeat: this host's heartbeat counter (@beat_timer only).
 * @lock: see the top of this file.
 * @stopping: the fabric is being stopped (@lock).
 * @peers: by host id; this host's entry is unused.
 * @wq: runs @rx_work and @live_work.
 * @rx_work: drains the receive rings.
 * @rx_poll: queues @rx_work again while a peer's messages are held back:
 *	a peer that frees ring slots does not ring a doorbell.
 * @rx_lock: the receive state (every peer's @rx and @rx_buf) between
 *	@rx_work and the doorbell interrupt's fast path (dl_rx_fast());
 *	also held while atomic handlers change.
 * @rx_busy: @rx_work owns the receive state (@rx_lock).
 * @live_work: peer scan.
 * @beat_timer: bumps @heartbeat every %DL_HEARTBEAT_MS (hostinfo.c).
 * @rx_buf: one slot's worth, for @rx_work only.
 * @reqs: requests in flight, by the low 32 bits of their wire id.
 * @req_next: next id to try (xarray lock).
 * @req_gen: how often the id space wrapped (xarray lock).
 * @handlers_lock: handler calls against handler changes.
 * @handlers: by message type.
 * @db_lock: doorbell callbacks against changes.
 * @db_handlers: by doorbell vector.
 * @sysfs_fabric: the fabric/ directory.
 * @sysfs_peers: the fabric/peers/ directory.
 * @debugfs_files: peers and status.
 */
struct dl_fabric {
	struct device *dev;
	const struct dl_fabric_backend_ops *ops;
	void *backend_priv;
	unsigned int db_vectors;

	void *ctl;
	struct dl_ctl_geom geom;
	u32 host_id;
	struct dl_host_info *self;

	u64 incarnation;
	u64 ident_token;
	struct page *ident_page;
	void *inbox;
	bool inbox_leaked;
	struct dl_ram_layout layout;
	u64 inbound_size;
	u64 ident_addr;
	u64 inbox_addr;
	struct mutex inbound_lock;	/* the allocators of @inbound */
	struct dl_win inbound[DL_MAX_HOSTS];
	atomic64_t inbound_refused;
	atomic64_t inbound_high_bytes;
	atomic_t peer_bar_gen;	/* windows onto peers' BARs gone */
	u64 heartbeat;

	struct mutex lock;	/* liveness, link changes, clients served */
	bool stopping;
	struct list_head node;	/* in client.c's list of started fabrics */
	unsigned long clients;	/* slots of the clients served */
	void *client_ctx[DL_FABRIC_MAX_CLIENTS];
	struct dl_peer peers[DL_MAX_HOSTS];

	struct workqueue_struct *wq;
	struct work_struct rx_work;
	struct timer_list rx_poll;
	spinlock_t rx_lock;	/* receive state: work vs. interrupt */
	bool rx_busy;
	struct delayed_work live_work;
	struct timer_list beat_timer;
	u8 *rx_buf;

	struct xarray reqs;
	u32 req_next;
	u32 req_gen;

	struct rw_semaphore handlers_lock;
	struct dl_handler handlers[DL_FABRIC_MAX_TYPES];

	spinlock_t db_lock;	/* db_handlers */
	struct dl_db_handler db_handlers[DL_DB_VECTORS_MAX];

	struct kobject *sysfs_fabric;
	struct kobject *sysfs_peers;
	struct dentry *debugfs_dir;	/* NULL: the files are at the root */
	struct dentry *debugfs_files[2];
};

static inline void dl_peer_count(struct dl_peer *peer, enum dl_peer_counter c)
{
	atomic64_inc(&peer->cnt[c]);
}

static inline bool dl_fabric_is_peer(struct dl_fabric *fab, u32 id)
{
	return id < fab->geom.max_hosts && id != fab->host_id;
}

static inline struct dl_peer *dl_fabric_peer(struct dl_fabric *fab, u32 id)
{
	return dl_fabric_is_peer(fab, id) ? &fab->peers[id] : NULL;
}

/* Slot @idx of a ring, the index wrapped. */
static inline u8 *dl_ring_slot(struct dl_fabric *fab, struct dl_ring *ring,
			       u32 idx)
{
	return ring->slots +
	       (size_t)(idx & (fab->geom.ring_slots - 1)) * fab->geom.slot_size;
}

/* ctl.c */
int dl_ctl_validate(struct device *dev, const void *ctl, size_t size,
		    struct dl_ctl_geom *geom);
struct dl_host_info *dl_ctl_host(struct dl_fabric *fab, u32 id);
void dl_inbox_entry(struct dl_fabric *fab, void *inbox, u32 id,
		    struct dl_ring *ring);

/* hostinfo.c */
int dl_hostinfo_init(struct dl_fabric *fab);
void dl_hostinfo_free(struct dl_fabric *fab);
void dl_hostinfo_begin(struct dl_fabric *fab);
void dl_hostinfo_publish(struct dl_fabric *fab);
void dl_hostinfo_leave(struct dl_fabric *fab);
void dl_hostinfo_set_bound(struct dl_fabric *fab, u32 id, u64 incarnation);
void dl_hostinfo_await_unbound(struct dl_fabric *fab);
void dl_hostinfo_refresh(struct dl_fabric *fab);
void dl_hostinfo_beat_start(struct dl_fabric *fab);
void dl_hostinfo_beat_stop(struct dl_fabric *fab);
int dl_hostinfo_read(struct dl_fabric *fab, u32 id, struct dl_peer_snap *snap);

/* window.c */
int dl_win_init(struct dl_win *w, u64 size, u64 reserved);
void dl_win_destroy(struct dl_win *w);
int dl_win_alloc(struct dl_win *w, u64 len, u64 *off);
int dl_win_free(struct dl_win *w, u64 off, u64 len);
bool dl_win_check(u64 size, u64 off, u64 len);
int dl_layout_xlate(const struct dl_ram_layout *l, u64 addr, u64 len,
		    u64 *offset);
int dl_inbound_init(struct dl_fabric *fab);
int dl_inbound_reserve(struct dl_fabric *fab, u64 *ident, u64 *inbox);
void dl_inbound_release(struct dl_fabric *fab);
void dl_inbound_show(struct dl_fabric *fab, struct seq_file *s);

/*
 * The files below are layered: each calls only those listed before it
 * (scripts/call-graph.py checks it), and what happens above reaches
 * below only as return values and the callbacks registered with it.
 */

/* link.c */
bool dl_peer_link(struct dl_peer *peer, u16 *proto, u32 *epoch);
int dl_peer_win_xlate(struct dl_fabric *fab, struct dl_fabric_window *win,
		      u64 size, u64 off, u64 len, phys_addr_t *at, u64 *run);

/* status.c */
int dl_status_to_errno(u32 status);
u32 dl_errno_to_status(int err);

/* ring.c */
u32 dl_ring_share(struct dl_fabric *fab);
u32 dl_ring_share_normal(struct dl_fabric *fab);
void dl_ring_init(struct dl_fabric *fab, struct dl_peer *peer);
void dl_ring_bind(struct dl_fabric *fab, struct dl_peer *peer);
void dl_ring_open(struct dl_fabric *fab, struct dl_peer *peer, void *map,
		  u64 incarnation);
void *dl_ring_close(struct dl_fabric *fab, struct dl_peer *peer);
bool dl_ring_is_open(struct dl_peer *peer);
int dl_ring_send_atomic(struct dl_fabric *fab, struct dl_peer *peer,
			const struct dl_fabric_msg *msg);
int dl_ring_send(struct dl_fabric *fab, struct dl_peer *peer,
		 const struct dl_fabric_msg *msg, u16 flags, u32 status,
		 u64 *bound_inc);
bool dl_ring_can_answer(struct dl_fabric *fab, struct dl_peer *peer);
void dl_ring_rx_publish(struct dl_fabric *fab, struct dl_peer *peer);

/* request.c */
void dl_req_init(struct dl_fabric *fab);
void dl_req_complete(struct dl_fabric *fab, struct dl_peer *peer,
		     const struct dl_fabric_msg *msg, u32 status);
void dl_req_fail(struct dl_fabric *fab, u32 peer, int err);
void dl_req_destroy(struct dl_fabric *fab);

/* msg.c */
bool dl_msg_is_atomic(struct dl_fabric *fab, u16 type, u16 flags, u64 req_id);
bool dl_msg_dispatch_atomic(struct dl_fabric *fab,
			    const struct dl_fabric_msg *msg);
void dl_msg_dispatch(struct dl_fabric *fab, struct dl_peer *peer,
		     const struct dl_fabric_msg *msg, u16 flags, u32 status);

/* rx.c */
void dl_rx_work(struct work_struct *work);
bool dl_rx_fast(struct dl_fabric *fab);
void dl_rx_poll(struct timer_list *t);

/* ping.c */
int dl_ping_init(struct dl_fabric *fab);
void dl_ping_exit(struct dl_fabric *fab);

/* client.c */
void dl_clients_fabric_added(struct dl_fabric *fab);
void dl_clients_fabric_removing(struct dl_fabric *fab);
void dl_fabric_notify(struct dl_fabric *fab, enum dl_fabric_event_type type,
		      u32 peer, u16 proto);

/* peer.c */
void dl_peer_init(struct dl_fabric *fab, struct dl_peer *peer, u32 id);
void dl_peer_live_work(struct work_struct *work);
void dl_peers_down_all(struct dl_fabric *fab);

/* sysfs.c */
int dl_sysfs_add(struct dl_fabric *fab);
void dl_sysfs_remove(struct dl_fabric *fab);

/* debugfs.c */
int dl_debugfs_init(void);
void dl_debugfs_exit(void);
void dl_debugfs_add(struct dl_fabric *fab);
void dl_debugfs_remove(struct dl_fabric *fab);

#endif /* DL_FABRIC_INTERNAL_H */
