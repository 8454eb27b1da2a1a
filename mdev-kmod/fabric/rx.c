// SPDX-License-Identifier: GPL-2.0
/*
 * The receive engine: takes the messages of every up peer out of the
 * rings in this host's inbox (ring.c keeps the slots), checks them and
 * hands them to msg.c's dispatch, in ring order.
 *
 * It runs in the receive work (dl_rx_work()), queued by the DL_DB_VEC_MSG
 * doorbell and by the liveness work; and, for the messages of atomic
 * handlers at the head of a ring, in the doorbell interrupt itself
 * (dl_rx_fast()). Everything a peer wrote is copied before it is parsed,
 * and checked: length, source, epoch, protocol and sequence number. A
 * peer's messages are taken only while the ring back to it has room for
 * their answers, so that no handler waits for ring room.
 */
#include <linux/device.h>
#include <linux/jiffies.h>
#include <linux/printk.h>
#include <linux/string.h>
#include <linux/timer.h>
#include <linux/workqueue.h>

#include "internal.h"

/* Count a malformed message; log it, as anything a peer can cause, rate-limited. */
static __printf(3, 4) void dl_rx_bad(struct dl_fabric *fab,
				     struct dl_peer *peer,
				     const char *fmt, ...)
{
	struct va_format vaf;
	va_list args;

	dl_peer_count(peer, DL_CNT_RX_BAD_MSGS);

	va_start(args, fmt);
	vaf.fmt = fmt;
	vaf.va = &args;
	dev_warn_ratelimited(fab->dev, "peer %u: %pV", peer->id, &vaf);
	va_end(args);
}

/* The epoch of the incarnation the peer's slot shows right now. */
static u32 dl_rx_slot_epoch(struct dl_fabric *fab, struct dl_peer *peer)
{
	const struct dl_host_info *hi = dl_ctl_host(fab, peer->id);

	return lower_32_bits(le64_to_cpu(READ_ONCE(hi->incarnation)));
}

/*
 * Copy, check and dispatch the message in the slot at rx->cons. Returns
 * false if the message must stay in the ring for now: with @atomic (in the
 * doorbell interrupt), also if it is not for an atomic handler or that
 * handler left it.
 */
static bool dl_rx_one(struct dl_fabric *fab, struct dl_peer *peer,
		      u16 proto, u32 epoch, bool atomic)
{
	struct dl_rx_ring *rx = &peer->rx;
	const u8 *slot = dl_ring_slot(fab, &rx->in, rx->cons);
	const struct dl_msg_hdr *hdr = (const void *)fab->rx_buf;
	struct dl_fabric_msg msg = {};
	u32 seq, msg_epoch;
	u16 len;

	/* Parse only our copy: the peer can rewrite the slot at any time. */
	memcpy(fab->rx_buf, slot, DL_MSG_HDR_SIZE);
	if (atomic && !dl_msg_is_atomic(fab, le16_to_cpu(hdr->type),
					le16_to_cpu(hdr->flags),
					le64_to_cpu(hdr->req_id)))
		return false;
	len = le16_to_cpu(hdr->len);
	if (len > fab->geom.slot_size - DL_MSG_HDR_SIZE) {
		dl_rx_bad(fab, peer, "message length %u too large\n", len);
		return true;
	}
	memcpy(fab->rx_buf + DL_MSG_HDR_SIZE, slot + DL_MSG_HDR_SIZE, len);

	if (le32_to_cpu(hdr->src) != peer->id) {
		dl_rx_bad(fab, peer, "message claims source %u\n",
			  le32_to_cpu(hdr->src));
		return true;
	}
	msg_epoch = le32_to_cpu(hdr->epoch);
	if (msg_epoch != epoch) {
		/*
		 * From the incarnation the peer's slot shows now, which the
		 * liveness work has not taken in yet: wait until it has (it
		 * queues this work when the peer is up again). Else from an
		 * earlier incarnation: drop it, it must not be answered.
		 */
		if (msg_epoch == dl_rx_slot_epoch(fab, peer))
			return false;
		dl_peer_count(peer, DL_CNT_RX_STALE);
		return true;
	}
	if (le16_to_cpu(hdr->proto) != proto) {
		dl_rx_bad(fab, peer, "message in protocol %u, agreed %u\n",
			  le16_to_cpu(hdr->proto), proto);
		return true;
	}

	msg.peer = peer->id;
	msg.type = le16_to_cpu(hdr->type);
	msg.proto = proto;
	msg.epoch = msg_epoch;
	msg.req_id = le64_to_cpu(hdr->req_id);
	msg.data = fab->rx_buf + DL_MSG_HDR_SIZE;
	msg.len = len;
	/* Left by the interrupt: the work sees it as if nobody had looked. */
	if (atomic && !dl_msg_dispatch_atomic(fab, &msg))
		return false;

	seq = le32_to_cpu(hdr->seq);
	if (!rx->synced || rx->epoch != msg_epoch) {
		/* A new sender incarnation starts a new sequence. */
		rx->synced = true;
		rx->epoch = msg_epoch;
	} else if (seq != rx->next_seq) {
		dl_peer_count(peer, DL_CNT_RX_SEQ_ERRORS);
		dev_warn_ratelimited(fab->dev,
				     "peer %u: message sequence %u, expected %u\n",
				     peer->id, seq, rx->next_seq);
	}
	rx->next_seq = seq + 1;
	dl_peer_count(peer, DL_CNT_RX_MSGS);

	if (!atomic)
		dl_msg_dispatch(fab, peer, &msg, le16_to_cpu(hdr->flags),
				le32_to_cpu(hdr->status));
	return true;
}

/* A new binding restarts the ring from the peer at index 0. */
static void dl_rx_sync_gen(struct dl_peer *peer)
{
	struct dl_rx_ring *rx = &peer->rx;
	u32 gen = READ_ONCE(peer->bind_gen);

	if (rx->gen == gen)
		return;
	rx->gen = gen;
	rx->cons = 0;
	rx->synced = false;
	rx->held_back = false;
}

/*
 * Handle up to one ring's worth of messages; true if more are waiting.
 * *held is set if the peer's messages wait for it to take its answers.
 */
static bool dl_rx_peer(struct dl_fabric *fab, struct dl_peer *peer,
		       bool *held)
{
	struct dl_rx_ring *rx = &peer->rx;
	u32 prod, n;
	u16 proto;
	u32 epoch;

	/* Leave messages of a peer not up yet where they are. */
	if (!dl_peer_link(peer, &proto, &epoch))
		return false;
	dl_rx_sync_gen(peer);

	/* Acquire: the slots up to prod are complete once we see prod. */
	prod = le32_to_cpu(smp_load_acquire(&rx->in.ctrl->prod));
	if (prod - rx->cons > fab->geom.ring_slots) {
		dl_peer_count(peer, DL_CNT_RX_CORRUPT_RING);
		dev_warn_ratelimited(fab->dev,
				     "peer %u: corrupt ring (prod %u, cons %u), skipping it\n",
				     peer->id, prod, rx->cons);
		rx->cons = prod;
		rx->synced = false;
		dl_ring_rx_publish(fab, peer);
		return false;
	}

	for (n = 0; rx->cons != prod && n < fab->geom.ring_slots; n++) {
		/*
		 * Backpressure: a message is taken only while its answer
		 * would fit, so no handler waits for ring room. A peer that
		 * keeps requesting without taking its answers only holds up
		 * itself; one that is slow finds its requests served late.
		 */
		if (!dl_ring_can_answer(fab, peer)) {
			if (!rx->held_back)
				dl_peer_count(peer, DL_CNT_RX_HELD_BACK);
			rx->held_back = true;
			*held = true;
			return false;
		}
		rx->held_back = false;
		if (!dl_rx_one(fab, peer, proto, epoch, false))
			return false;
		rx->cons++;
		dl_ring_rx_publish(fab, peer);
	}
	return rx->cons != prod;
}

/**
 * dl_rx_work() - the receive work: drain the rings of all up peers.
 * @work: &dl_fabric.rx_work.
 *
 * Queued by the DL_DB_VEC_MSG doorbell and by the liveness work. A work
 * item never runs concurrently with itself, so the receive state needs no
 * lock.
 */
void dl_rx_work(struct work_struct *work)
{
	struct dl_fabric *fab = container_of(work, struct dl_fabric, rx_work);
	bool more = false, held = false;
	unsigned long flags;
	u32 id;

	/* The receive state is ours until we are done: see rx_fast. */
	spin_lock_irqsave(&fab->rx_lock, flags);
	fab->rx_busy = true;
	spin_unlock_irqrestore(&fab->rx_lock, flags);

	for (id = 0; id < fab->geom.max_hosts; id++)
		if (id != fab->host_id)
			more |= dl_rx_peer(fab, &fab->peers[id], &held);

	spin_lock_irqsave(&fab->rx_lock, flags);
	fab->rx_busy = false;
	spin_unlock_irqrestore(&fab->rx_lock, flags);

	/* Be fair to other work: come back for the rest. */
	if (more)
		queue_work(fab->wq, &fab->rx_work);
	/* A peer taking its answers rings no doorbell: look again soon. */
	if (held)
		mod_timer(&fab->rx_poll, jiffies + 1);
}

/* A peer's messages for atomic handlers, from its ring's head on. */
static bool dl_rx_peer_fast(struct dl_fabric *fab, struct dl_peer *peer)
{
	struct dl_rx_ring *rx = &peer->rx;
	u32 prod, n;
	u16 proto;
	u32 epoch;

	if (!dl_peer_link(peer, &proto, &epoch))
		return false;
	dl_rx_sync_gen(peer);
	/* Acquire: the slots up to prod are complete once we see prod. */
	prod = le32_to_cpu(smp_load_acquire(&rx->in.ctrl->prod));
	if (prod - rx->cons > fab->geom.ring_slots)
		return true;	/* corrupt: the work counts and skips it */
	for (n = 0; rx->cons != prod && n < fab->geom.ring_slots; n++) {
		if (!dl_rx_one(fab, peer, proto, epoch, true))
			return true;
		dl_peer_count(peer, DL_CNT_RX_IN_IRQ);
		rx->cons++;
		dl_ring_rx_publish(fab, peer);
	}
	return rx->cons != prod;
}

/**
 * dl_rx_fast() - in the doorbell interrupt, take the messages at the
 *	head of each ring that atomic handlers take (interrupt relays), so
 *	they do not wait for the receive work to be scheduled.
 * @fab: the fabric.
 *
 * Only while the receive work is not running; it stops at a peer's first
 * other message, so ring order holds (docs/fabric-protocol.md).
 *
 * Return: true if the receive work must run (other messages, or the work
 * owns the rings now).
 */
bool dl_rx_fast(struct dl_fabric *fab)
{
	bool more = false;
	u32 id;

	/* Never spin in an interrupt: whoever holds it, the work will run. */
	if (!spin_trylock(&fab->rx_lock))
		return true;
	if (fab->rx_busy) {
		spin_unlock(&fab->rx_lock);
		return true;
	}
	for (id = 0; id < fab->geom.max_hosts; id++)
		if (id != fab->host_id)
			more |= dl_rx_peer_fast(fab, &fab->peers[id]);
	spin_unlock(&fab->rx_lock);
	return more;
}

/**
 * dl_rx_poll() - look at the rings again while a peer's messages are
 *	held back for want of room for their answers.
 * @t: &dl_fabric.rx_poll.
 */
void dl_rx_poll(struct timer_list *t)
{
	struct dl_fabric *fab = from_timer(fab, t, rx_poll);

	queue_work(fab->wq, &fab->rx_work);
}
