// SPDX-License-Identifier: GPL-2.0
/*
 * Messages: posted sends, responses, and the per-type handler table that
 * received requests and posted messages are dispatched through. The
 * receive engine (rx.c) hands each checked message to dl_msg_dispatch():
 * responses go on to request.c, the rest to the handler of their type.
 */
#include <linux/device.h>
#include <linux/rwsem.h>

#include "internal.h"

/**
 * dl_msg_dispatch() - hand a received, checked message to its consumer.
 * @fab: the fabric.
 * @peer: the sender.
 * @msg: the message; its payload is the receive buffer.
 * @flags: the message's flags.
 * @status: the message's status (responses only).
 *
 * Called by the receive work only.
 */
void dl_msg_dispatch(struct dl_fabric *fab, struct dl_peer *peer,
		     const struct dl_fabric_msg *msg, u16 flags, u32 status)
{
	struct dl_handler h = {};

	if (flags & DL_MSG_F_RESPONSE) {
		if (!msg->req_id) {
			dl_peer_count(peer, DL_CNT_RX_BAD_MSGS);
			dev_warn_ratelimited(fab->dev,
					     "peer %u: response without request id\n",
					     peer->id);
			return;
		}
		dl_req_complete(fab, peer, msg, status);
		return;
	}

	down_read(&fab->handlers_lock);
	if (msg->type < DL_FABRIC_MAX_TYPES)
		h = fab->handlers[msg->type];
	if (h.fn)
		h.fn(fab, msg, h.priv);
	up_read(&fab->handlers_lock);
	if (h.fn)
		return;

	if (msg->req_id) {
		/* Counted: a peer may speak a newer protocol, or probe. */
		dl_peer_count(peer, DL_CNT_RX_UNKNOWN);
		dl_fabric_respond(fab, msg, -EOPNOTSUPP, NULL, 0);
	} else {
		dl_peer_count(peer, DL_CNT_RX_BAD_MSGS);
		dev_dbg_ratelimited(fab->dev,
				    "peer %u: posted message of unknown type %u\n",
				    peer->id, msg->type);
	}
}

/**
 * dl_msg_is_atomic() - whether a message may be handled in the doorbell
 *	interrupt: a posted message whose handler said it never sleeps.
 * @fab: the fabric; its @rx_lock held.
 * @type: the message's type.
 * @flags: its header flags.
 * @req_id: its request id (0: posted).
 *
 * Return: true if dl_msg_dispatch_atomic() may hand it over.
 */
bool dl_msg_is_atomic(struct dl_fabric *fab, u16 type, u16 flags, u64 req_id)
{
	lockdep_assert_held(&fab->rx_lock);

	return !(flags & DL_MSG_F_RESPONSE) && !req_id &&
	       type < DL_FABRIC_MAX_TYPES && fab->handlers[type].atomic_fn;
}

/**
 * dl_msg_dispatch_atomic() - offer a message dl_msg_is_atomic() accepted to
 *	its atomic handler, in the doorbell interrupt.
 * @fab: the fabric; its @rx_lock held, which keeps the handler registered.
 * @msg: the message, checked.
 *
 * Return: true if the handler took it; false to leave it to the receive
 * work.
 */
bool dl_msg_dispatch_atomic(struct dl_fabric *fab,
			    const struct dl_fabric_msg *msg)
{
	struct dl_handler *h = &fab->handlers[msg->type];

	lockdep_assert_held(&fab->rx_lock);
	return h->atomic_fn(fab, msg, h->priv);
}

static int dl_fabric_set_handler(struct dl_fabric *fab, u16 type,
				 dl_fabric_msg_fn fn,
				 dl_fabric_msg_atomic_fn atomic_fn, void *priv)
{
	unsigned long flags;
	int ret = 0;

	if (!type || type >= DL_FABRIC_MAX_TYPES || !fn)
		return -EINVAL;

	down_write(&fab->handlers_lock);
	spin_lock_irqsave(&fab->rx_lock, flags);
	if (fab->handlers[type].fn) {
		ret = -EBUSY;
	} else {
		fab->handlers[type].fn = fn;
		fab->handlers[type].atomic_fn = atomic_fn;
		fab->handlers[type].priv = priv;
	}
	spin_unlock_irqrestore(&fab->rx_lock, flags);
	up_write(&fab->handlers_lock);
	return ret;
}

/**
 * dl_fabric_register_handler() - receive messages of one type.
 * @fab: the fabric.
 * @type: the message type, nonzero and below %DL_FABRIC_MAX_TYPES.
 * @fn: called for each request or posted message of @type.
 * @priv: passed to @fn.
 *
 * Requests of a type nobody handles are answered with
 * %DL_STATUS_ENOTSUPP. Must not be called from a handler.
 *
 * Return: 0, -EINVAL for a bad type, -EBUSY if @type has a handler.
 */
int dl_fabric_register_handler(struct dl_fabric *fab, u16 type,
			       dl_fabric_msg_fn fn, void *priv)
{
	return dl_fabric_set_handler(fab, type, fn, NULL, priv);
}
EXPORT_SYMBOL_GPL(dl_fabric_register_handler);

/**
 * dl_fabric_register_handler_atomic() - receive posted messages of one
 *	type, in the doorbell interrupt when they come first.
 * @fab: the fabric.
 * @type: the message type, nonzero and below %DL_FABRIC_MAX_TYPES.
 * @fn: called in the receive work for requests of @type and for the
 *	messages @atomic_fn leaves.
 * @atomic_fn: offered each posted message of @type that reaches the head
 *	of its ring while the receive work is not running; must not sleep
 *	(hard interrupt context, a spinlock held). It returns false to leave
 *	the message to @fn.
 * @priv: passed to both.
 *
 * For messages on the latency path of every I/O (interrupt relays, device
 * doorbells). Ring order holds: the interrupt takes a peer's messages
 * only while no work runs and only while the next one is of an atomic
 * type and its handler takes it; a request, a response, any other message
 * or one left by @atomic_fn stops it, and the receive work takes the rest
 * in order.
 *
 * Return: as dl_fabric_register_handler().
 */
int dl_fabric_register_handler_atomic(struct dl_fabric *fab, u16 type,
				      dl_fabric_msg_fn fn,
				      dl_fabric_msg_atomic_fn atomic_fn,
				      void *priv)
{
	if (!atomic_fn)
		return -EINVAL;
	return dl_fabric_set_handler(fab, type, fn, atomic_fn, priv);
}
EXPORT_SYMBOL_GPL(dl_fabric_register_handler_atomic);

/**
 * dl_fabric_unregister_handler() - stop receiving messages of one type.
 * @fab: the fabric.
 * @type: the message type.
 *
 * When this returns, the handler is not running and will not be called
 * again. Must not be called from a handler.
 */
void dl_fabric_unregister_handler(struct dl_fabric *fab, u16 type)
{
	unsigned long flags;

	if (type >= DL_FABRIC_MAX_TYPES)
		return;
	down_write(&fab->handlers_lock);
	/* Also waits for the doorbell interrupt's fast path to be out. */
	spin_lock_irqsave(&fab->rx_lock, flags);
	fab->handlers[type].fn = NULL;
	fab->handlers[type].atomic_fn = NULL;
	fab->handlers[type].priv = NULL;
	spin_unlock_irqrestore(&fab->rx_lock, flags);
	up_write(&fab->handlers_lock);
}
EXPORT_SYMBOL_GPL(dl_fabric_unregister_handler);

/**
 * dl_fabric_send() - send a posted message (no response expected).
 * @fab: the fabric.
 * @peer: the receiver's host id.
 * @type: the message type.
 * @data: the payload.
 * @len: bytes at @data, at most dl_fabric_max_payload().
 *
 * Messages to one peer arrive in the order they were sent. Might sleep
 * (up to about a second while the peer's ring is full), except in a
 * handler: there it fails with -EAGAIN at once, see dl_ring_send().
 *
 * Return: 0 once the message is in the peer's ring, -EINVAL for a bad
 * peer, or an error of dl_ring_send().
 */
int dl_fabric_send(struct dl_fabric *fab, u32 peer, u16 type,
		   const void *data, size_t len)
{
	struct dl_peer *p = dl_fabric_peer(fab, peer);
	struct dl_fabric_msg msg = {
		.type = type,
		.data = data,
		.len = len,
	};

	if (!p)
		return -EINVAL;
	return dl_ring_send(fab, p, &msg, 0, DL_STATUS_OK, NULL);
}
EXPORT_SYMBOL_GPL(dl_fabric_send);

/**
 * dl_fabric_send_atomic() - send a posted message without waiting.
 * @fab: the fabric.
 * @peer: the receiver's host id.
 * @type: the message type.
 * @data: the payload (may be NULL if @len is 0).
 * @len: bytes at @data.
 *
 * Never sleeps: for hard interrupt handlers, where a wake-up of a thread
 * to send would cost more than the message. Fails rather than wait for
 * ring room; the caller then sends with dl_fabric_send() from a context
 * that may sleep, so nothing is lost.
 *
 * Return: 0, -EINVAL for a bad @peer, or an error of
 * dl_ring_send_atomic() (-EAGAIN: no room now).
 */
int dl_fabric_send_atomic(struct dl_fabric *fab, u32 peer, u16 type,
			  const void *data, size_t len)
{
	struct dl_peer *p = dl_fabric_peer(fab, peer);
	struct dl_fabric_msg msg = {
		.type = type,
		.data = data,
		.len = len,
	};

	if (!p)
		return -EINVAL;
	return dl_ring_send_atomic(fab, p, &msg);
}
EXPORT_SYMBOL_GPL(dl_fabric_send_atomic);

/**
 * dl_fabric_respond() - answer a request received by a handler.
 * @fab: the fabric.
 * @req: the request, as the handler was given it.
 * @err: 0 or -errno; sent as the closest &enum dl_msg_status.
 * @data: the response payload (may be NULL if @len is 0).
 * @len: bytes at @data.
 *
 * Might sleep.
 *
 * Return: 0, -EINVAL if @req was a posted message, or an error of
 * dl_ring_send().
 */
int dl_fabric_respond(struct dl_fabric *fab, const struct dl_fabric_msg *req,
		      int err, const void *data, size_t len)
{
	struct dl_peer *p = dl_fabric_peer(fab, req->peer);
	struct dl_fabric_msg msg = {
		.type = req->type,
		.epoch = req->epoch,
		.req_id = req->req_id,
		.data = data,
		.len = len,
	};

	if (!p || !req->req_id)
		return -EINVAL;
	return dl_ring_send(fab, p, &msg, DL_MSG_F_RESPONSE,
			    dl_errno_to_status(err), NULL);
}
EXPORT_SYMBOL_GPL(dl_fabric_respond);
