// SPDX-License-Identifier: GPL-2.0
/*
 * Message rings: sending into the ring to a peer, receiving from the ring
 * of each peer.
 *
 * Each ordered pair of hosts has a ring of fixed-size slots in the control
 * area. The sender writes a slot, then publishes its producer index and
 * rings the receiver's DL_DB_VEC_MSG doorbell; the receiver copies the slot
 * out, handles the copy and then publishes its consumer index. Each side
 * writes only its own index and keeps the authoritative value locally: the
 * other side's index is read, checked and never trusted.
 *
 * At attach a receiver drops what was left in its rings for an earlier
 * incarnation (cons = prod); a sender continues from the ring's producer
 * index, as the receiver counts from there.
 */
#include <linux/delay.h>
#include <linux/device.h>
#include <linux/jiffies.h>
#include <linux/lockdep.h>
#include <linux/minmax.h>
#include <linux/printk.h>
#include <linux/string.h>

#include "internal.h"

static u8 *dl_ring_slot(struct dl_fabric *fab, struct dl_ring *ring, u32 idx)
{
	return ring->slots +
	       (size_t)(idx & (fab->geom.ring_slots - 1)) * fab->geom.slot_size;
}

/**
 * dl_ring_attach() - take this host's side of the rings to and from a peer.
 * @fab: the fabric, attaching (its host info says INIT).
 * @peer: the peer.
 */
void dl_ring_attach(struct dl_fabric *fab, struct dl_peer *peer)
{
	struct dl_rx_ring *rx = &peer->rx;
	struct dl_tx_ring *tx = &peer->tx;
	unsigned long flags;

	dl_ctl_ring(fab, peer->id, fab->host_id, &rx->ring);
	dl_ctl_ring(fab, fab->host_id, peer->id, &tx->ring);

	/* Messages waiting now were meant for an earlier incarnation. */
	spin_lock_irqsave(&fab->rx_lock, flags);
	rx->cons = le32_to_cpu(READ_ONCE(rx->ring.ctrl->prod));
	WRITE_ONCE(rx->ring.ctrl->cons, cpu_to_le32(rx->cons));
	rx->synced = false;
	spin_unlock_irqrestore(&fab->rx_lock, flags);

	/* The peer's consumer index counts from where we stopped. */
	tx->prod = le32_to_cpu(READ_ONCE(tx->ring.ctrl->prod));
	tx->seq = 0;
}

/**
 * dl_ring_share() - how much of a ring requests and posted messages may use.
 * @fab: the fabric.
 *
 * Half a ring; the other half is kept for responses. A host also has at
 * most this many requests in flight to a peer (dl_fabric_req_submit()),
 * so a ring never holds more responses than that, and a response never
 * has to wait for room. Otherwise two hosts answering each other from
 * their receive work could wait for each other with both rings full.
 *
 * Return: slots.
 */
u32 dl_ring_share(struct dl_fabric *fab)
{
	return max(fab->geom.ring_slots / 2, 1U);
}

/**
 * dl_ring_share_normal() - how much of a ring requests and posted messages
 *	that are not urgent may use.
 * @fab: the fabric.
 *
 * The share less %DL_FABRIC_URGENT_SLOTS (at least one slot), so that a
 * ring or a credit count filled by BAR accesses still lets a DMA unmap or
 * a device release through.
 *
 * Return: slots.
 */
u32 dl_ring_share_normal(struct dl_fabric *fab)
{
	u32 share = dl_ring_share(fab);

	return share > 2 * DL_FABRIC_URGENT_SLOTS ?
	       share - DL_FABRIC_URGENT_SLOTS : max(share / 2, 1U);
}

/*
 * Free slots in the ring to a peer for a message of this kind, 0 if none.
 * Responses may fill the ring, urgent requests its share, and everything
 * else its share less the slots kept for urgent requests.
 *
 * A consumer index that is not within a ring of our producer index was
 * not written by a sane receiver, or the receiver skipped a corrupt ring
 * by taking our published index as it found it. Either way we continue
 * from its index: the receiver counts what was lost as a sequence gap.
 */
static u32 dl_ring_tx_room(struct dl_fabric *fab, struct dl_peer *peer,
			   bool response, bool urgent)
{
	u32 limit = response ? fab->geom.ring_slots :
		    urgent ? dl_ring_share(fab) : dl_ring_share_normal(fab);
	struct dl_tx_ring *tx = &peer->tx;
	u32 cons, used;

	lockdep_assert_held(&tx->lock);

	/*
	 * Acquire: the peer is done reading a slot before it publishes the
	 * consumer index that frees it, so we may overwrite it after this.
	 */
	cons = le32_to_cpu(smp_load_acquire(&tx->ring.ctrl->cons));
	used = tx->prod - cons;
	if (used > fab->geom.ring_slots) {
		dev_warn_ratelimited(fab->dev,
				     "peer %u: consumer index %u out of ring (producer %u), resyncing\n",
				     peer->id, cons, tx->prod);
		tx->prod = cons;
		/* Release: pairs with the receiver's acquire of prod. */
		smp_store_release(&tx->ring.ctrl->prod,
				  cpu_to_le32(tx->prod));
		used = 0;
	}
	return used < limit ? limit - used : 0;
}

static void dl_ring_tx_write(struct dl_fabric *fab, struct dl_tx_ring *tx,
			     const struct dl_fabric_msg *msg, u16 proto,
			     u16 flags, u32 status)
{
	u8 *slot = dl_ring_slot(fab, &tx->ring, tx->prod);
	struct dl_msg_hdr hdr = {
		.type = cpu_to_le16(msg->type),
		.proto = cpu_to_le16(proto),
		.len = cpu_to_le16(msg->len),
		.flags = cpu_to_le16(flags),
		.src = cpu_to_le32(fab->host_id),
		.epoch = cpu_to_le32(lower_32_bits(fab->incarnation)),
		.seq = cpu_to_le32(tx->seq),
		.status = cpu_to_le32(status),
		.req_id = cpu_to_le64(msg->req_id),
	};

	lockdep_assert_held(&tx->lock);

	memcpy(slot, &hdr, sizeof(hdr));
	if (msg->len)
		memcpy(slot + DL_MSG_HDR_SIZE, msg->data, msg->len);
	tx->seq++;
	tx->prod++;
	/* Release: the slot is complete before the index says it is there. */
	smp_store_release(&tx->ring.ctrl->prod, cpu_to_le32(tx->prod));
}

/**
 * dl_ring_send() - put one message into the ring to a peer and ring it.
 * @fab: the fabric.
 * @peer: the receiver.
 * @msg: type, request id and payload; @msg->peer and @msg->proto are
 *	ignored (the peer's negotiated version is used).
 * @flags: %DL_MSG_F_RESPONSE or 0.
 * @status: an &enum dl_msg_status for responses, else 0.
 *
 * If the ring is full (for requests and posted messages: half full, see
 * dl_ring_share()), waits for room for up to %DL_TX_FULL_WAIT_MS; but a
 * response from the receive work never waits: the receive work takes a
 * peer's messages only while there is room for the answers
 * (dl_ring_rx_peer()), so a response that finds none is owed to a peer
 * that does not take its answers, and waiting for it would hold up every
 * other peer. Might sleep.
 *
 * Return: 0, -EMSGSIZE if the payload does not fit a slot, -ENOTCONN if
 * the peer is not up, -EAGAIN if the ring stayed full.
 */
int dl_ring_send(struct dl_fabric *fab, struct dl_peer *peer,
		 const struct dl_fabric_msg *msg, u16 flags, u32 status)
{
	unsigned long deadline = jiffies + msecs_to_jiffies(DL_TX_FULL_WAIT_MS);
	bool nowait = (flags & DL_MSG_F_RESPONSE) &&
		      current_work() == &fab->rx_work;
	struct dl_tx_ring *tx = &peer->tx;
	unsigned long irqflags;
	bool waited = false;
	u16 proto;

	might_sleep();

	if (msg->len > fab->geom.slot_size - DL_MSG_HDR_SIZE)
		return -EMSGSIZE;

	for (;;) {
		if (!dl_peer_link(peer, &proto, NULL))
			return -ENOTCONN;
		spin_lock_irqsave(&tx->lock, irqflags);
		if (dl_ring_tx_room(fab, peer, flags & DL_MSG_F_RESPONSE,
				    msg->urgent))
			break;
		spin_unlock_irqrestore(&tx->lock, irqflags);

		if (!waited)
			dl_peer_count(peer, DL_CNT_TX_RING_FULL);
		waited = true;
		if (nowait || time_after(jiffies, deadline))
			return -EAGAIN;
		/* The receiver frees slots without telling us: poll. */
		usleep_range(100, 200);
	}
	dl_ring_tx_write(fab, tx, msg, proto, flags, status);
	spin_unlock_irqrestore(&tx->lock, irqflags);

	dl_peer_count(peer, DL_CNT_TX_MSGS);
	fab->ops->peer_db_set(fab, peer->id, DL_DB_VEC_MSG);
	return 0;
}

/**
 * dl_ring_send_atomic() - put one posted message into the ring to a peer
 *	and ring it, without waiting: from an interrupt handler.
 * @fab: the fabric.
 * @peer: the receiver.
 * @msg: type and payload, as for dl_ring_send(); not urgent, no request id.
 *
 * The ring's lock is taken with interrupts off everywhere, so this may run
 * in a hard interrupt handler; the backend's doorbell must not sleep.
 *
 * Return: 0, -EMSGSIZE, -ENOTCONN, or -EAGAIN if the ring has no room now
 * (the caller sends from a context that may wait instead).
 */
int dl_ring_send_atomic(struct dl_fabric *fab, struct dl_peer *peer,
			const struct dl_fabric_msg *msg)
{
	struct dl_tx_ring *tx = &peer->tx;
	unsigned long irqflags;
	u16 proto;

	if (msg->len > fab->geom.slot_size - DL_MSG_HDR_SIZE)
		return -EMSGSIZE;
	if (!dl_peer_link(peer, &proto, NULL))
		return -ENOTCONN;
	spin_lock_irqsave(&tx->lock, irqflags);
	if (!dl_ring_tx_room(fab, peer, false, false)) {
		spin_unlock_irqrestore(&tx->lock, irqflags);
		dl_peer_count(peer, DL_CNT_TX_RING_FULL);
		return -EAGAIN;
	}
	dl_ring_tx_write(fab, tx, msg, proto, 0, DL_STATUS_OK);
	spin_unlock_irqrestore(&tx->lock, irqflags);

	dl_peer_count(peer, DL_CNT_TX_MSGS);
	fab->ops->peer_db_set(fab, peer->id, DL_DB_VEC_MSG);
	return 0;
}

/* Count a malformed message; log it, as anything a peer can cause, rate-limited. */
static __printf(3, 4) void dl_ring_bad(struct dl_fabric *fab,
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
static u32 dl_ring_slot_epoch(struct dl_fabric *fab, struct dl_peer *peer)
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
static bool dl_ring_rx_one(struct dl_fabric *fab, struct dl_peer *peer,
			   u16 proto, u32 epoch, bool atomic)
{
	struct dl_rx_ring *rx = &peer->rx;
	const u8 *slot = dl_ring_slot(fab, &rx->ring, rx->cons);
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
		dl_ring_bad(fab, peer, "message length %u too large\n", len);
		return true;
	}
	memcpy(fab->rx_buf + DL_MSG_HDR_SIZE, slot + DL_MSG_HDR_SIZE, len);

	if (le32_to_cpu(hdr->src) != peer->id) {
		dl_ring_bad(fab, peer, "message claims source %u\n",
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
		if (msg_epoch == dl_ring_slot_epoch(fab, peer))
			return false;
		dl_peer_count(peer, DL_CNT_RX_STALE);
		return true;
	}
	if (le16_to_cpu(hdr->proto) != proto) {
		dl_ring_bad(fab, peer, "message in protocol %u, agreed %u\n",
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

/* Whether the ring to @peer has room for an answer now. */
static bool dl_ring_can_answer(struct dl_fabric *fab, struct dl_peer *peer)
{
	struct dl_tx_ring *tx = &peer->tx;
	unsigned long irqflags;
	bool room;

	spin_lock_irqsave(&tx->lock, irqflags);
	room = dl_ring_tx_room(fab, peer, true, false);
	spin_unlock_irqrestore(&tx->lock, irqflags);
	return room;
}

/*
 * Handle up to one ring's worth of messages; true if more are waiting.
 * *held is set if the peer's messages wait for it to take its answers.
 */
static bool dl_ring_rx_peer(struct dl_fabric *fab, struct dl_peer *peer,
			    bool *held)
{
	struct dl_rx_ring *rx = &peer->rx;
	u32 prod, n;
	u16 proto;
	u32 epoch;

	/* Leave messages of a peer not up yet where they are. */
	if (!dl_peer_link(peer, &proto, &epoch))
		return false;

	/* Acquire: the slots up to prod are complete once we see prod. */
	prod = le32_to_cpu(smp_load_acquire(&rx->ring.ctrl->prod));
	if (prod - rx->cons > fab->geom.ring_slots) {
		dl_peer_count(peer, DL_CNT_RX_CORRUPT_RING);
		dev_warn_ratelimited(fab->dev,
				     "peer %u: corrupt ring (prod %u, cons %u), skipping it\n",
				     peer->id, prod, rx->cons);
		rx->cons = prod;
		rx->synced = false;
		/* Release: nothing of the skipped slots is read after this. */
		smp_store_release(&rx->ring.ctrl->cons, cpu_to_le32(rx->cons));
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
		if (!dl_ring_rx_one(fab, peer, proto, epoch, false))
			return false;
		rx->cons++;
		/* Release: we are done with the slot before the sender reuses it. */
		smp_store_release(&rx->ring.ctrl->cons, cpu_to_le32(rx->cons));
	}
	return rx->cons != prod;
}

/**
 * dl_ring_rx_work() - the receive work: drain the rings of all up peers.
 * @work: &dl_fabric.rx_work.
 *
 * Queued by the DL_DB_VEC_MSG doorbell and by the liveness work. A work
 * item never runs concurrently with itself, so the receive state needs no
 * lock.
 */
void dl_ring_rx_work(struct work_struct *work)
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
			more |= dl_ring_rx_peer(fab, &fab->peers[id], &held);

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
static bool dl_ring_rx_peer_fast(struct dl_fabric *fab, struct dl_peer *peer)
{
	struct dl_rx_ring *rx = &peer->rx;
	u32 prod, n;
	u16 proto;
	u32 epoch;

	if (!dl_peer_link(peer, &proto, &epoch))
		return false;
	/* Acquire: the slots up to prod are complete once we see prod. */
	prod = le32_to_cpu(smp_load_acquire(&rx->ring.ctrl->prod));
	if (prod - rx->cons > fab->geom.ring_slots)
		return true;	/* corrupt: the work counts and skips it */
	for (n = 0; rx->cons != prod && n < fab->geom.ring_slots; n++) {
		if (!dl_ring_rx_one(fab, peer, proto, epoch, true))
			return true;
		dl_peer_count(peer, DL_CNT_RX_IN_IRQ);
		rx->cons++;
		/* Release: we are done with the slot before the sender reuses it. */
		smp_store_release(&rx->ring.ctrl->cons, cpu_to_le32(rx->cons));
	}
	return rx->cons != prod;
}

/**
 * dl_ring_rx_fast() - in the doorbell interrupt, take the messages at the
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
bool dl_ring_rx_fast(struct dl_fabric *fab)
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
			more |= dl_ring_rx_peer_fast(fab, &fab->peers[id]);
	spin_unlock(&fab->rx_lock);
	return more;
}

/**
 * dl_ring_rx_poll() - look at the rings again while a peer's messages are
 *	held back for want of room for their answers.
 * @t: &dl_fabric.rx_poll.
 */
void dl_ring_rx_poll(struct timer_list *t)
{
	struct dl_fabric *fab = from_timer(fab, t, rx_poll);

	queue_work(fab->wq, &fab->rx_work);
}
