// SPDX-License-Identifier: GPL-2.0
/*
 * Message rings: the slots and indices of each ring pair, binding them,
 * and sending into the ring to a peer. Taking messages out of the rings
 * from the peers is the receive engine's (rx.c); it uses the slot
 * helpers and dl_ring_rx_publish() here, and calls nothing else back.
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

/**
 * dl_ring_rx_publish() - publish how far we consumed the ring from the
 *	peer, into its inbox.
 * @fab: the fabric.
 * @peer: the peer; the receive engine's.
 *
 * Not done while the slot does not vouch: the peer gets a new binding,
 * which starts at 0, before it may send again.
 */
void dl_ring_rx_publish(struct dl_fabric *fab, struct dl_peer *peer)
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
 * (dl_rx_peer()), so a response that finds none is owed to a peer
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

/**
 * dl_ring_can_answer() - whether the ring to a peer has room for an
 *	answer now.
 * @fab: the fabric.
 * @peer: the peer.
 *
 * Return: true if a response would find a slot and the peer's slot
 * vouches for its inbox.
 */
bool dl_ring_can_answer(struct dl_fabric *fab, struct dl_peer *peer)
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
