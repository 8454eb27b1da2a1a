/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Fabric core internals, shared by the files of fabric/ and by nothing else.
 *
 * Locking, outermost first:
 *  - fab->lock (mutex): peer liveness tracking and link transitions, window
 *    binding. Held by the liveness work, the stop path and window removal.
 *  - peer->link_lock (spinlock): the link snapshot (up, proto, epoch,
 *    window, layout) that senders, the receiver and the API read.
 *  - peer->tx.lock (spinlock): the peer's transmit ring.
 *  - the xarray lock of fab->reqs: requests in flight.
 * The receive state of a ring (struct dl_rx_ring) is touched only by the
 * receive work, which never runs twice at once.
 */
#ifndef DL_FABRIC_INTERNAL_H
#define DL_FABRIC_INTERNAL_H

#include <linux/atomic.h>
#include <linux/mutex.h>
#include <linux/rwsem.h>
#include <linux/spinlock.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>

#include "devlend_wire.h"
#include "backend.h"
#include "fabric.h"

struct dentry;
struct kobject;

/* How long a sender waits for room in a full ring. */
#define DL_TX_FULL_WAIT_MS	1000

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
	DL_CNT_NR
};

extern const char * const dl_peer_counter_names[DL_CNT_NR];

/**
 * struct dl_ctl_geom - the validated geometry of the control area; copied
 * once from the header, never re-read from shared memory.
 */
struct dl_ctl_geom {
	u32 max_hosts;
	u32 ring_slots;
	u32 slot_size;
	u32 hosts_off;
	u32 host_stride;
	u32 rings_off;
	u32 ring_stride;
	u64 total_size;
	u64 fabric_id;
};

/**
 * struct dl_ram_layout - how a host's physical RAM maps onto a window.
 */
struct dl_ram_layout {
	u64 ram_size;
	u64 ram_low_size;
	u64 ram_high_base;
};

/**
 * struct dl_peer_snap - one consistent read of a peer's host info,
 * decoded to CPU byte order.
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
	char name[sizeof_field(struct dl_host_info, name) + 1];
};

/* One ring in the control area. */
struct dl_ring {
	struct dl_ring_ctrl *ctrl;
	u8 *slots;
};

/* Our side of the ring to a peer. */
struct dl_tx_ring {
	spinlock_t lock;	/* serializes senders */
	struct dl_ring ring;
	u32 prod;		/* ours; the shared copy is never read back */
	u32 seq;
};

/* Our side of the ring from a peer; receive work only. */
struct dl_rx_ring {
	struct dl_ring ring;
	u32 cons;		/* ours; the shared copy is never read back */
	bool synced;		/* @epoch and @next_seq are valid */
	u32 epoch;
	u32 next_seq;
};

/* Ping responder state, per peer; receive work only. */
struct dl_ping_rx {
	bool valid;
	u64 nonce;
	u32 next_seq;
};

/**
 * struct dl_peer - everything this host keeps about one other host.
 */
struct dl_peer {
	struct dl_fabric *fab;
	u32 id;

	/*
	 * Link snapshot: written under fab->lock and link_lock, so it can be
	 * read under either.
	 */
	spinlock_t link_lock;
	bool up;
	u16 proto;
	u32 epoch;		/* low 32 bits of @incarnation */
	u64 incarnation;
	struct dl_fabric_window *win;
	struct dl_ram_layout layout;
	char name[sizeof_field(struct dl_host_info, name) + 1];

	/* Liveness tracking: fab->lock. */
	bool known;		/* its info was valid at least once */
	bool tracking;		/* watching @incarnation */
	u64 last_hb;
	unsigned long hb_jiffies;
	bool hb_moved;
	bool warned;		/* logged why it cannot come up */
	bool ident_ok;
	struct dl_fabric_ident ident;
	u16 proto_min;
	u16 proto_max;

	struct dl_tx_ring tx;
	struct dl_rx_ring rx;
	struct dl_ping_rx ping;

	struct kobject *kobj;
	atomic64_t cnt[DL_CNT_NR];
};

/* A registered handler. */
struct dl_handler {
	dl_fabric_msg_fn fn;
	void *priv;
};

/* A registered doorbell callback. */
struct dl_db_handler {
	dl_fabric_db_fn fn;
	void *priv;
};

/**
 * struct dl_selftest_result - the last self-test run.
 */
struct dl_selftest_result {
	bool valid;
	u32 peer;
	u32 count;
	u32 ok;
	u32 errors;
	u32 timeouts;
	u64 p50_ns;
	u64 p99_ns;
	u64 max_ns;
	bool pass;
};

/**
 * struct dl_fabric - one fabric adapter and the peers behind it.
 */
struct dl_fabric {
	struct device *dev;
	const struct dl_fabric_backend_ops *ops;
	void *backend_priv;
	unsigned int db_vectors;

	/* The control area and this host's place in it. */
	void *ctl;
	struct dl_ctl_geom geom;
	u32 host_id;
	struct dl_host_info *self;

	/* This incarnation. */
	u64 incarnation;
	u64 ident_token;
	struct page *ident_page;
	struct dl_ram_layout layout;
	u64 heartbeat;

	struct mutex lock;	/* see the top of this file */
	bool stopping;
	struct dl_peer peers[DL_MAX_HOSTS];

	struct workqueue_struct *wq;
	struct work_struct rx_work;
	struct delayed_work live_work;
	u8 *rx_buf;		/* one slot; receive work only */

	/* Requests in flight, by the low 32 bits of their wire id. */
	struct xarray reqs;
	u32 req_next;
	u32 req_gen;

	struct rw_semaphore handlers_lock;	/* handler calls vs. changes */
	struct dl_handler handlers[DL_FABRIC_MAX_TYPES];

	spinlock_t db_lock;	/* doorbell callbacks vs. changes */
	struct dl_db_handler db_handlers[DL_DB_VECTORS];

	struct kobject *sysfs_fabric;
	struct kobject *sysfs_peers;
	struct dentry *debugfs_files[3];

	struct mutex selftest_lock;	/* one self-test at a time */
	struct dl_selftest_result selftest;
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

/* ctl.c */
int dl_ctl_validate(struct device *dev, const void *ctl, size_t size,
		    struct dl_ctl_geom *geom);
struct dl_host_info *dl_ctl_host(struct dl_fabric *fab, u32 id);
void dl_ctl_ring(struct dl_fabric *fab, u32 src, u32 dst,
		 struct dl_ring *ring);

/* hostinfo.c */
int dl_hostinfo_init(struct dl_fabric *fab);
void dl_hostinfo_free(struct dl_fabric *fab);
void dl_hostinfo_begin(struct dl_fabric *fab);
void dl_hostinfo_publish(struct dl_fabric *fab);
void dl_hostinfo_leave(struct dl_fabric *fab);
void dl_hostinfo_beat(struct dl_fabric *fab);
int dl_hostinfo_read(struct dl_fabric *fab, u32 id, struct dl_peer_snap *snap);
int dl_layout_xlate(const struct dl_ram_layout *l, u64 addr, u64 len,
		    u64 *offset);

/* peer.c */
void dl_peer_init(struct dl_fabric *fab, struct dl_peer *peer, u32 id);
void dl_peer_live_work(struct work_struct *work);
void dl_peers_down_all(struct dl_fabric *fab);
bool dl_peer_link(struct dl_peer *peer, u16 *proto, u32 *epoch);
void dl_fabric_notify(struct dl_fabric *fab, enum dl_fabric_event_type type,
		      u32 peer, u16 proto);

/* ring.c */
void dl_ring_attach(struct dl_fabric *fab, struct dl_peer *peer);
int dl_ring_send(struct dl_fabric *fab, struct dl_peer *peer,
		 const struct dl_fabric_msg *msg, u16 flags, u32 status);
void dl_ring_rx_work(struct work_struct *work);

/* msg.c */
void dl_msg_dispatch(struct dl_fabric *fab, struct dl_peer *peer,
		     const struct dl_fabric_msg *msg, u16 flags, u32 status);
int dl_status_to_errno(u32 status);

/* request.c */
void dl_req_init(struct dl_fabric *fab);
void dl_req_complete(struct dl_fabric *fab, struct dl_peer *peer,
		     const struct dl_fabric_msg *msg, u32 status);
void dl_req_fail(struct dl_fabric *fab, u32 peer, int err);
void dl_req_destroy(struct dl_fabric *fab);

/* selftest.c */
int dl_selftest_init(struct dl_fabric *fab);
void dl_selftest_exit(struct dl_fabric *fab);
int dl_selftest_run(struct dl_fabric *fab, char *args);
int dl_selftest_show(struct dl_fabric *fab, char *buf, size_t size);

/* sysfs.c */
int dl_sysfs_add(struct dl_fabric *fab);
void dl_sysfs_remove(struct dl_fabric *fab);

/* debugfs.c */
int dl_debugfs_init(void);
void dl_debugfs_exit(void);
void dl_debugfs_add(struct dl_fabric *fab);
void dl_debugfs_remove(struct dl_fabric *fab);

#endif /* DL_FABRIC_INTERNAL_H */
