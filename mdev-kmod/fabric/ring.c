// SPDX-License-Identifier: GPL-2.0
/*
 * Message rings: sending into the ring to a peer, receiving from the ring
 * of each peer.
 *
 * The ring from a peer lives in this host's inbox, the ring to a peer in
 * the peer's (devlend_wire.h): the sender writes a slot through its window
 * onto the receiver's RAM, then publishes its producer index there and
 * rings the receiver's DL_DB_VEC_MSG doorbell; the receiver copies the
 * slot out of its own RAM, handles the copy and then publishes its
 * consumer index into the sender's inbox. So every read is local. Each
 * side keeps its own index authoritatively: the other side's is read,
 * checked and never trusted.
 *
 * A ring pair is bound to one incarnation of each host and its indices
 * start at 0 (dl_ring_bind()). Before every store into a peer's inbox the
 * sender checks, under the ring's lock, that the peer's slot still vouches
 * for the inbox (dl_ring_vouched()): a peer that left, re-attached or
 * restarted gets no more stores from the moment its slot says so.
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
 * dl_ring_init() - find the peer's entry in this host's inbox.
 * @fab: the fabric, its inbox allocated.
 * @peer: the peer.
 */
void dl_ring_init(struct dl_fabric *fab, struct dl_peer *peer)
{
	dl_inbox_entry(fab, fab->inbox, peer->id, &peer->rx.in);
}

/**
 * dl_ring_bind() - start a ring pair with a new incarnation of a peer.
 * @fab: the fabric.
 * @peer: the peer, its link down; fab->lock held.
 *
 * Zeroes the peer's entry in our inbox and restarts both indices at 0.
 * The caller then says so in our bound[] entry for the peer, which the
 * peer waits for before its first store; the receive side restarts its
 * consumer index when it sees the new binding generation.
 */
void dl_ring_bind(struct dl_fabric *fab, struct dl_peer *peer)
{
	struct dl_tx_ring *tx = &peer->tx;
	unsigned long flags;

	memset(peer->rx.in.ctrl, 0, fab->geom.ring_stride);

	spin_lock_irqsave(&tx->lock, flags);
	tx->prod = 0;
	tx->seq = 0;
	spin_unlock_irqrestore(&tx->lock, flags);
	WRITE_ONCE(peer->bind_gen, peer->bind_gen + 1);
}

/**
 * dl_ring_open() - let stores into the peer's inbox begin.
 * @fab: the fabric.
 * @peer: the peer, bound; fab->lock held.
 * @map: our entry in its inbox, mapped.
 * @incarnation: the incarnation its slot must show for stores to go on.
 */
void dl_ring_open(struct dl_fabric *fab, struct dl_peer *peer, void *map,
		  u64 incarnation)
{
	struct dl_tx_ring *tx = &peer->tx;
	unsigned long flags;

	spin_lock_irqsave(&tx->lock, flags);
	tx->map = map;
	dl_inbox_entry(fab, map, 0, &tx->out);
	tx->peer_inc = incarnation;
	tx->open = true;
	spin_unlock_irqrestore(&tx->lock, flags);
}

/**
 * dl_ring_close() - stop storing into the peer's inbox.
 * @fab: the fabric.
 * @peer: the peer; fab->lock held.
 *
 * Return: the mapping given to dl_ring_open(), which nobody uses any more,
 * or NULL.
 */
void *dl_ring_close(struct dl_fabric *fab, struct dl_peer *peer)
{
	struct dl_tx_ring *tx = &peer->tx;
	unsigned long flags;
	void *map;

	spin_lock_irqsave(&tx->lock, flags);
	tx->open = false;
	map = tx->map;
	tx->map = NULL;
	tx->out.ctrl = NULL;
	tx->out.slots = NULL;
	spin_unlock_irqrestore(&tx->lock, flags);
	return map;
}

/**
 * dl_ring_is_open() - whether stores into the peer's inbox may go on.
 * @peer: the peer.
 *
 * Return: false once dl_ring_close() ran or a check of the peer's slot
 * before a store failed.
 */
bool dl_ring_is_open(struct dl_peer *peer)
{
	unsigned long flags;
	bool open;

	spin_lock_irqsave(&peer->tx.lock, flags);
	open = peer->tx.open;
	spin_unlock_irqrestore(&peer->tx.lock, flags);
	return open;
}

/*
 * Whether we may store into the peer's inbox now: the ring is open and the
 * peer's slot still says UP, with the incarnation we bound to and a binding
 * to ours. Read before every batch of stores, under the ring's lock, which
 * dl_ring_close() takes too. When the slot stops vouching, the ring stays
 * shut until the liveness work has taken the link down and up again.
 */
static bool dl_ring_vouched(struct dl_fabric *fab, struct dl_peer *peer)
{
	const struct dl_host_info *hi = dl_ctl_host(fab, peer->id);
	struct dl_tx_ring *tx = &peer->tx;

	lockdep_assert_held(&tx->lock);

	if (!tx->open)
		return false;
	if (le32_to_cpu(READ_ONCE(hi->state)) == DL_HOST_UP &&
	    le64_to_cpu(READ_ONCE(hi->incarnation)) == tx->peer_inc &&
	    le64_to_cpu(READ_ONCE(hi->bound[fab->host_id])) ==
	    fab->incarnation)
		return true;
	tx->open = false;
	dl_peer_count(peer, DL_CNT_TX_FENCED);
	dev_warn_ratelimited(fab->dev,
			     "peer %u: its slot no longer vouches for its inbox, stores stopped\n",
			     peer->id);
	return false;
}

/*
 * Publish how far we consumed the ring from the peer, into its inbox.
 * Not done while the slot does not vouch: the peer gets a new binding,
 * which starts at 0, before it may send again.
 */
static void dl_ring_rx_publish(struct dl_fabric *fab, struct dl_peer *peer)
{
	struct dl_tx_ring *tx = &peer->tx;
	unsigned long flags;

	spin_lock_irqsave(&tx->lock, flags);
	if (dl_ring_vouched(fab, peer)) {
		/* Our reads of the slot are done before the peer reuses it. */
		mb();
		WRITE_ONCE(tx->out.ctrl->cons, cpu_to_le32(peer->rx.cons));
	}
	spin_unlock_irqrestore(&tx->lock, flags);
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
	 * The peer mirrors its consumer index into its entry of our inbox.
	 * Acquire: it is done reading a slot before it publishes the index
	 * that frees it, so we may overwrite the slot after this.
	 */
	cons = le32_to_cpu(smp_load_acquire(&peer->rx.in.ctrl->cons));
	used = tx->prod - cons;
	if (used > fab->geom.ring_slots) {
		dev_warn_ratelimited(fab->dev,
				     "peer %u: consumer index %u out of ring (producer %u), resyncing\n",
				     peer->id, cons, tx->prod);
		tx->prod = cons;
		/* Callers checked dl_ring_vouched() under this lock. */
		WRITE_ONCE(tx->out.ctrl->prod, cpu_to_le32(tx->prod));
		used = 0;
	}
	return used < limit ? limit - used : 0;
}

static void dl_ring_tx_write(struct dl_fabric *fab, struct dl_tx_ring *tx,
			     const struct dl_fabric_msg *msg, u16 proto,
			     u16 flags, u32 status)
{
	u8 *slot = dl_ring_slot(fab, &tx->out, tx->prod);
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
	/*
	 * The slot is complete before the index says it is there. A full
	 * barrier, not a release: the peer's inbox may be mapped
	 * write-combining, whose stores a release does not order.
	 */
	wmb();
	WRITE_ONCE(tx->out.ctrl->prod, cpu_to_le32(tx->prod));
}

/**
 * dl_ring_send() - put one message into the ring to a peer and ring it.
 * @fab: the fabric.
 * @peer: the receiver.
 * @msg: type, request id and payload; @msg->peer and @msg->proto are
 *	ignored (the peer's negotiated version is used).
 * @flags: %DL_MSG_F_RESPONSE or 0.
 * @status: an &enum dl_msg_status for responses, else 0.
 * @bound_inc: if not NULL, set to the peer's incarnation the ring is bound
 *	to, before the message can be seen: the only one that may answer it.
 *
 * A response goes only to the incarnation that asked: @msg->epoch is the
 * request's, and a ring bound to another incarnation of the requester
 * (it restarted while the request waited for the slow work) does not get
 * it. Request ids start again at 1 in every incarnation, so the answer
 * could otherwise be taken for that of a new request.
 *
 * If the ring is full (for requests and posted messages: half full, see
 * dl_ring_share()), waits for room for up to %DL_TX_FULL_WAIT_MS; but
 * nothing sent from the receive work waits. The receive work takes a
 * peer's messages only while there is room for the answers
 * (dl_ring_rx_peer()), so a response that finds none is owed to a peer
 * that does not take its answers; and a posted message a handler sends
 * (a hello answered, an interrupt fired again) finds none only when that
 * peer holds its consumer index back. Waiting for either would hold up
 * every other peer, a second per message: the handler is told -EAGAIN
 * and leaves the send to a work of its own. Might sleep.
 *
 * Return: 0, -EMSGSIZE if the payload does not fit a slot, -ENOTCONN if
 * the peer is not up or (a response) no longer the incarnation that
 * asked, -EAGAIN if the ring stayed full.
 */
int dl_ring_send(struct dl_fabric *fab, struct dl_peer *peer,
		 const struct dl_fabric_msg *msg, u16 flags, u32 status,
		 u64 *bound_inc)
{
	unsigned long deadline = jiffies + msecs_to_jiffies(DL_TX_FULL_WAIT_MS);
	bool nowait = current_work() == &fab->rx_work;
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
		if (!dl_ring_vouched(fab, peer)) {
			spin_unlock_irqrestore(&tx->lock, irqflags);
			return -ENOTCONN;
		}
		if ((flags & DL_MSG_F_RESPONSE) &&
		    msg->epoch != lower_32_bits(tx->peer_inc)) {
			spin_unlock_irqrestore(&tx->lock, irqflags);
			dl_peer_count(peer, DL_CNT_STALE_ANSWERS);
			return -ENOTCONN;
		}
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
	if (bound_inc)
		*bound_inc = tx->peer_inc;
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
	if (!dl_ring_vouched(fab, peer)) {
		spin_unlock_irqrestore(&tx->lock, irqflags);
		return -ENOTCONN;
	}
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

/* A new binding restarts the ring from the peer at index 0. */
static void dl_ring_rx_sync_gen(struct dl_peer *peer)
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

/* Whether the ring to @peer has room for an answer now. */
static bool dl_ring_can_answer(struct dl_fabric *fab, struct dl_peer *peer)
{
	struct dl_tx_ring *tx = &peer->tx;
	unsigned long irqflags;
	bool room;

	spin_lock_irqsave(&tx->lock, irqflags);
	room = dl_ring_vouched(fab, peer) &&
	       dl_ring_tx_room(fab, peer, true, false);
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
	dl_ring_rx_sync_gen(peer);

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
		if (!dl_ring_rx_one(fab, peer, proto, epoch, false))
			return false;
		rx->cons++;
		dl_ring_rx_publish(fab, peer);
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
	dl_ring_rx_sync_gen(peer);
	/* Acquire: the slots up to prod are complete once we see prod. */
	prod = le32_to_cpu(smp_load_acquire(&rx->in.ctrl->prod));
	if (prod - rx->cons > fab->geom.ring_slots)
		return true;	/* corrupt: the work counts and skips it */
	for (n = 0; rx->cons != prod && n < fab->geom.ring_slots; n++) {
		if (!dl_ring_rx_one(fab, peer, proto, epoch, true))
			return true;
		dl_peer_count(peer, DL_CNT_RX_IN_IRQ);
		rx->cons++;
		dl_ring_rx_publish(fab, peer);
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
