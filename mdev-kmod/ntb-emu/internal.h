/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The emulated NTB hardware (devlend_ntb_emu.ko): one ntb_dev per fabric,
 * so that Linux's NTB clients and devlend's own NTB backend run over the
 * emulated fabric as they would over a real adapter.
 *
 * It is a fabric client: every register a peer may touch lives in the
 * port that owns it, and peers reach it by messages (DL_MSG_NTB_*, see
 * devlend_wire.h), in ring order. The port numbers are the fabric's host
 * ids; peer index i is the i-th other host (docs/ntb.md says what is
 * emulated and what is not).
 *
 * Locking: ne->lock (spinlock, any context) guards everything below it in
 * struct dl_ntbe; it is never held while calling into the NTB core
 * (ntb_link_event(), ntb_db_event(), ntb_msg_event()) or the fabric.
 */
#ifndef DL_NTB_EMU_INTERNAL_H
#define DL_NTB_EMU_INTERNAL_H

#include <linux/bits.h>
#include <linux/ntb.h>
#include <linux/spinlock.h>
#include <linux/types.h>
#include <linux/workqueue.h>

#include "devlend_wire.h"
#include "../fabric/fabric.h"

/**
 * struct dl_ntbe_mw - a translation of an inbound memory window.
 * @addr: physical address in the owner's RAM, or with @bus, a bus
 *	address of the owner's adapter (behind a translating IOMMU).
 * @size: bytes; 0 if none.
 * @bus: @addr is a bus address: where each page lands is asked of the
 *	owner (DL_MSG_NTB_XLATE, hook.h).
 */
struct dl_ntbe_mw {
	u64 addr;
	u64 size;
	bool bus;
};

/**
 * struct dl_ntbe_peer - what this port knows of another one.
 * @present: the peer's port is registered (its last hello).
 * @link: the peer's side of the link is enabled.
 * @out: the peer's inbound windows for us: where our outbound window
 *	pidx * mws + w lands in the peer.
 * @in: our inbound windows for the peer, as we set them.
 */
struct dl_ntbe_peer {
	bool present;
	bool link;
	struct dl_ntbe_mw out[DL_NTB_MWS];
	struct dl_ntbe_mw in[DL_NTB_MWS];
};

/**
 * struct dl_ntbe - one emulated NTB port: the ntb_dev of one fabric.
 * @ntb: the NTB device; &ntb.pdev is the fabric adapter.
 * @fab: the fabric.
 * @self: this host's id, the port number.
 * @hosts: hosts of the fabric; ports are 0..@hosts-1.
 * @mws: inbound memory windows per peer (module parameter mw_count).
 * @mw_size_max: the largest translation of one window, bytes.
 * @registered: @ntb is registered with the NTB core.
 * @lock: see the top of this file.
 * @link_on: our side of the link is enabled (ntb_link_enable()).
 * @linked: bit pidx: the link to that peer is up, as last reported.
 * @db: the doorbell register.
 * @db_mask: masked doorbell bits (no event while masked).
 * @spad: the scratchpads.
 * @msg: the inbound message registers.
 * @msg_src: for each, the peer index that wrote it.
 * @msg_sts: bit i: message register i holds an unread message.
 * @msg_mask: masked message status bits.
 * @peers: by host id.
 * @db_pending: by host id: doorbell bits rung while the ring to that
 *	host was full, sent by @db_work (doorbell bits latch; none is lost).
 * @hello_owed: bit host id: that host asked for our hello and
 *	translations; sent by @db_work, not by the handler, which must not
 *	wait for ring room.
 * @db_work: sends @db_pending and @hello_owed.
 * @db_rx: doorbell messages received.
 * @rej: messages refused (malformed, out of range, unknown sender).
 * @xlate_rx: DL_MSG_NTB_XLATE answered.
 * @xlate_tx: DL_MSG_NTB_XLATE asked.
 * @msgs_dropped: messages that found their register full.
 */
struct dl_ntbe {
	struct ntb_dev ntb;
	struct dl_fabric *fab;
	u32 self;
	u32 hosts;
	unsigned int mws;
	u64 mw_size_max;
	bool registered;

	spinlock_t lock;	/* see above */
	bool link_on;
	u64 linked;
	u64 db;
	u64 db_mask;
	u32 spad[DL_NTB_SPADS];
	u32 msg[DL_NTB_MSGS];
	int msg_src[DL_NTB_MSGS];
	u64 msg_sts;
	u64 msg_mask;
	struct dl_ntbe_peer peers[DL_MAX_HOSTS];
	u64 db_pending[DL_MAX_HOSTS];
	u64 hello_owed;
	struct delayed_work db_work;
	u64 db_rx;
	u64 rej;
	u64 msgs_dropped;
	u64 xlate_rx;
	u64 xlate_tx;
};

/* The doorbell bits and message registers a port has. */
#define DL_NTBE_DB_VALID	GENMASK_ULL(DL_NTB_DB_BITS - 1, 0)
#define DL_NTBE_MSG_INBITS	GENMASK_ULL(DL_NTB_MSGS - 1, 0)

static inline struct dl_ntbe *dl_ntbe_of(struct ntb_dev *ntb)
{
	return container_of(ntb, struct dl_ntbe, ntb);
}

/* Peer index <-> host id: the peers are the other hosts, in order. */
static inline u32 dl_ntbe_host(const struct dl_ntbe *ne, int pidx)
{
	return pidx < ne->self ? pidx : pidx + 1;
}

static inline int dl_ntbe_pidx(const struct dl_ntbe *ne, u32 host)
{
	return host < ne->self ? host : host - 1;
}

static inline bool dl_ntbe_pidx_ok(const struct dl_ntbe *ne, int pidx)
{
	return pidx >= 0 && pidx < ne->hosts - 1;
}

/* port.c, below both ops.c and main.c */
void dl_ntbe_link_update(struct dl_ntbe *ne);
int dl_ntbe_hello(struct dl_ntbe *ne, u32 host, u32 flags, bool atomic);
int dl_ntbe_answer_hello(struct dl_ntbe *ne, u32 host);
void dl_ntbe_db_change(struct dl_ntbe *ne, u64 set, u64 clear, u64 mask_set,
		       u64 mask_clear);
void dl_ntbe_msg_change(struct dl_ntbe *ne, u64 set, u64 clear, u64 mask_set,
			u64 mask_clear);
void dl_ntbe_db_work(struct work_struct *work);
bool dl_ntbe_translating(struct dl_ntbe *ne);
int dl_ntbe_bus_walk(struct dl_ntbe *ne, u64 addr, u64 len, phys_addr_t *phys,
		     u64 *run);

/* ops.c: what Linux's NTB clients call */
extern const struct ntb_dev_ops dl_ntbe_ops;

#endif /* DL_NTB_EMU_INTERNAL_H */
