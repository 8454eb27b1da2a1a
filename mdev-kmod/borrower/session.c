// SPDX-License-Identifier: GPL-2.0
/*
 * The session of an mdev with the lender of its remote device: claiming
 * the remote entry at open, borrowing the device (DL_MSG_DEV_ACQUIRE,
 * under a lease), the requests made about it, losing it, and giving it
 * back at close (DL_MSG_DEV_RELEASE).
 *
 * The session is the layer below the mdev's config space (config.c), DMA
 * (dma.c) and interrupts (irq.c): they borrow and make their requests
 * through it, and tell it when the device is to be given up
 * (dl_session_lost()); it calls none of them. When the device is lost it
 * tells the layers above through the &struct dl_session_ops that vdev.c
 * registered; the remote table (remote.c), below it, tells it that the
 * device is no longer this host's through the &struct dl_remote_owner
 * callback it set at open.
 *
 * Each borrow has a lease (lease.c) from before DL_MSG_DEV_ACQUIRE is sent
 * until the lender has said it holds nothing of ours: the lease, not the
 * session, is what keeps the DMA ownership rule once the session let go.
 */
#include <linux/delay.h>

#include "internal.h"

/* Sets the state; the caller holds b->lock. */
static void dl_session_set_state(struct dl_vdev *v, enum dl_vdev_state state)
{
	lockdep_assert_held(&v->b->lock);

	spin_lock_irq(&v->b->fire_lock);
	WRITE_ONCE(v->sess.state, state);
	spin_unlock_irq(&v->b->fire_lock);
}

/**
 * dl_session_lost() - the mdev no longer holds its remote device.
 * @v: the mdev; caller holds b->lock.
 * @why: for the log.
 *
 * Tells the layers above (&dl_session_ops.lost: REQ or ERR is signalled);
 * device accesses fail from now on. The device is returned to the lender
 * as soon as it can be reached (lease.c).
 */
void dl_session_lost(struct dl_vdev *v, const char *why)
{
	lockdep_assert_held(&v->b->lock);

	if (READ_ONCE(v->sess.state) != DL_VDEV_BORROWED)
		return;
	dl_session_set_state(v, DL_VDEV_LOST);
	v->b->lost++;
	dev_err_ratelimited(dl_vdev_dev(v), "lost remote device %u:%u: %s\n",
			    v->sess.host, v->sess.dev_id, why);
	/* Whatever the lender still does with it, it is to stop. */
	if (v->sess.lease)
		dl_lease_return_later(v->b, v->sess.lease);
	v->session_ops->lost(v);
}

/*
 * The remote table says the entry @r is no longer this host's (remote.c,
 * under b->lock): the borrow of it is lost.
 */
static void dl_session_remote_lost(struct dl_remote_owner *o,
				   struct dl_remote *r, const char *why)
{
	struct dl_vdev *v = container_of(o, struct dl_vdev, sess.remote_owner);

	if (READ_ONCE(v->sess.state) == DL_VDEV_BORROWED && v->remote == r)
		dl_session_lost(v, why);
}

/**
 * dl_session_refused() - a request about the mdev's remote device failed:
 *	if it was refused as only the holder's to make, check that this host
 *	still holds the device.
 * @v: the mdev.
 * @err: the request's result.
 */
void dl_session_refused(struct dl_vdev *v, int err)
{
	if ((err == -EINVAL || err == -EBUSY || err == -ENODEV) &&
	    READ_ONCE(v->sess.state) == DL_VDEV_BORROWED)
		dl_remote_check(v->b, v->sess.host);
}

/**
 * dl_session_request() - a request about the mdev's remote device.
 * @v: the mdev, open.
 * @type: the message type.
 * @data: the payload.
 * @len: its bytes.
 * @resp: where the response goes.
 * @resp_size: bytes the response must have.
 *
 * Return: 0, -EPROTO for a short response, or an error of
 * dl_fabric_request().
 */
int dl_session_request(struct dl_vdev *v, u16 type, const void *data,
		       size_t len, void *resp, size_t resp_size)
{
	size_t resp_len = 0;
	int ret;

	ret = dl_fabric_request(v->b->fab, v->sess.host, type, data, len, resp,
				resp_size, &resp_len, DL_B_TIMEOUT_MS);
	if (!ret && resp_len < resp_size)
		ret = -EPROTO;
	dl_session_refused(v, ret);
	return ret;
}

/**
 * struct dl_acquire - how one DL_MSG_DEV_ACQUIRE went.
 * @inc: the lender incarnation the request went to, 0 if it was not sent:
 *	a grant is that incarnation's, and so is the lease.
 * @refused: the lender answered with a refusal: it granted nothing.
 */
struct dl_acquire {
	u64 inc;
	bool refused;
};

/*
 * Asks for the device once, with @type (DEV_ACQUIRE, or MIG_TAKEOVER) and
 * its payload @req of @len bytes, which starts with the dev_id; the grant
 * is a struct dl_dev_ref. See struct dl_acquire for what is learnt.
 */
static int dl_session_acquire(struct dl_vdev *v, u16 type, const void *req,
			      size_t len, struct dl_acquire *a)
{
	__le32 dev_id = cpu_to_le32(v->sess.dev_id);
	struct dl_dev_ref resp;
	struct dl_fabric_req fr = {
		.resp = &resp,
		.resp_size = sizeof(resp),
	};
	int ret;

	ret = dl_fabric_req_submit(v->b->fab, v->sess.host, type, req, len,
				   &fr);
	if (!ret)
		ret = dl_fabric_req_wait(v->b->fab, &fr, DL_B_TIMEOUT_MS);
	/* A grant of another device is no grant of this one; nor a refusal. */
	if (!ret && (fr.resp_len < sizeof(resp) || resp.dev_id != dev_id))
		ret = -EPROTO;
	a->inc = fr.peer_inc;
	/*
	 * Only a status the lender chose is a refusal; a malformed grant is
	 * still a grant, and no answer may hide one.
	 */
	a->refused = fr.done && (ret == -EINVAL || ret == -EOPNOTSUPP ||
				 ret == -EBUSY || ret == -ENODEV ||
				 ret == -EIO);
	dl_session_refused(v, ret);
	return ret;
}

/*
 * Borrows the device, under a new lease, with @type (DEV_ACQUIRE, or
 * MIG_TAKEOVER) and its payload; caller holds v->lock and checked the
 * state.
 */
static int dl_session_take(struct dl_vdev *v, u16 type, const void *req,
			   size_t len)
{
	struct dl_borrower *b = v->b;
	struct dl_acquire acq;
	struct dl_lease *lease;
	unsigned int tries;
	int ret;

	lease = dl_lease_new(b, v->sess.host, v->sess.dev_id, v->remote->incarnation);
	if (IS_ERR(lease)) {
		ret = PTR_ERR(lease);
		if (ret == -EBUSY)
			dev_err_ratelimited(dl_vdev_dev(v),
					    "remote device %u:%u is still being returned to its lender\n",
					    v->sess.host, v->sess.dev_id);
		return ret;
	}
	/* EIO: the lender is still taking it back from its last holder. */
	for (tries = 0; ; tries++) {
		ret = dl_session_acquire(v, type, req, len, &acq);
		if (ret != -EIO || tries >= DL_B_BUSY_TRIES)
			break;
		msleep(DL_B_BUSY_MS);
	}
	/*
	 * The lease is the incarnation's that the request reached, not the
	 * one the remote entry was listed by: a lender that restarted since
	 * the last scan gives out the same dev_ids, and what it grants must
	 * be released to it, never settled as "the lender restarted".
	 */
	mutex_lock(&b->lock);
	if (acq.inc)
		lease->incarnation = acq.inc;
	if (ret) {
		/* Without an answer the lender may have granted it. */
		if (acq.inc && !acq.refused)
			dl_lease_return_later(b, lease);
		else
			dl_lease_settle(b, lease, "not borrowed");
		dl_lease_put(b, lease);
	}
	mutex_unlock(&b->lock);
	if (ret == -EBUSY && type == DL_MSG_DEV_ACQUIRE) {
		dev_err_ratelimited(dl_vdev_dev(v),
				    "remote device %u:%u (%s) is held by another host\n",
				    v->sess.host, v->sess.dev_id, v->info.name);
		return ret;
	}
	if (ret) {
		dev_err_ratelimited(dl_vdev_dev(v),
				    "cannot %s remote device %u:%u: %d\n",
				    type == DL_MSG_DEV_ACQUIRE ? "borrow" : "take over",
				    v->sess.host, v->sess.dev_id, ret);
		return ret;
	}

	mutex_lock(&v->dma.lock);
	mutex_lock(&b->lock);
	v->sess.lease = lease;
	if (v->remote->gone || lease->incarnation != v->remote->incarnation) {
		/*
		 * The lender went down meanwhile, or the entry is of an
		 * incarnation before the one that granted it: give it back.
		 */
		dl_session_set_state(v, DL_VDEV_LOST);
		dl_lease_return_later(b, lease);
		ret = -EIO;
	} else {
		dl_session_set_state(v, DL_VDEV_BORROWED);
		v->remote->info.state = DL_LENT_BORROWED;
		v->remote->info.borrower = b->host_id;
		v->remote->borrow_seq = ++b->borrow_seq;
	}
	mutex_unlock(&b->lock);
	mutex_unlock(&v->dma.lock);
	if (!ret)
		dev_info(dl_vdev_dev(v), "borrowed remote device %u:%u (%s on %s)\n",
			 v->sess.host, v->sess.dev_id, v->info.name, v->remote->lender);
	return ret;
}

/**
 * dl_session_borrow() - acquire the remote device unless held already.
 * @v: the mdev, open; caller holds v->lock.
 *
 * Return: 0, -EIO if the mdev is lost, -EBUSY if someone else holds the
 * device, or another -errno of the request.
 */
int dl_session_borrow(struct dl_vdev *v)
{
	struct dl_dev_ref ref = { .dev_id = cpu_to_le32(v->sess.dev_id) };

	lockdep_assert_held(&v->lock);

	switch (READ_ONCE(v->sess.state)) {
	case DL_VDEV_BORROWED:
		return 0;
	case DL_VDEV_LOST:
		return -EIO;
	case DL_VDEV_RETURNING:
	case DL_VDEV_INCOMING:	/* its migration's source holds it */
		return -EBUSY;
	case DL_VDEV_IDLE:
		break;
	}
	return dl_session_take(v, DL_MSG_DEV_ACQUIRE, &ref, sizeof(ref));
}

/**
 * dl_session_takeover() - take the device over from a migration's source.
 * @v: the mdev, open as a migration's destination; caller holds v->lock.
 * @from: the source's host id, from the migration stream.
 * @ticket: the lender's ticket, from the migration stream.
 *
 * Return: 0 (the mdev holds the device, quiesced), -EINVAL if the mdev is
 * not a destination, or the error of the request (-EBUSY: the lender knows
 * no such quiesce; the mdev stays a destination).
 */
int dl_session_takeover(struct dl_vdev *v, u32 from, u64 ticket)
{
	struct dl_mig_takeover t = {
		.dev_id = cpu_to_le32(v->sess.dev_id),
		.from_host = cpu_to_le32(from),
		.ticket = cpu_to_le64(ticket),
	};

	lockdep_assert_held(&v->lock);

	if (READ_ONCE(v->sess.state) != DL_VDEV_INCOMING)
		return -EINVAL;
	return dl_session_take(v, DL_MSG_MIG_TAKEOVER, &t, sizeof(t));
}

/**
 * dl_session_incoming() - whether the mdev is a migration's destination
 *	that has not taken its device over: nothing may reach the device,
 *	which its migration's source holds.
 * @v: the mdev.
 *
 * Return: true if so.
 */
bool dl_session_incoming(struct dl_vdev *v)
{
	return READ_ONCE(v->sess.state) == DL_VDEV_INCOMING;
}

/**
 * dl_session_set_incoming() - make an open mdev that holds nothing a
 *	migration's destination, or an ordinary one again (its migration
 *	stream said the source held nothing).
 * @v: the mdev; caller holds v->lock.
 * @incoming: which.
 */
void dl_session_set_incoming(struct dl_vdev *v, bool incoming)
{
	enum dl_vdev_state from = incoming ? DL_VDEV_IDLE : DL_VDEV_INCOMING;

	lockdep_assert_held(&v->lock);

	mutex_lock(&v->b->lock);
	if (READ_ONCE(v->sess.state) == from)
		dl_session_set_state(v, incoming ? DL_VDEV_INCOMING :
					 DL_VDEV_IDLE);
	mutex_unlock(&v->b->lock);
}

/**
 * dl_session_quiesce() - ask the lender to stop the device once it
 *	settles, for this host's guest's migration.
 * @v: the mdev, holding the device; caller holds v->lock.
 * @settle_ms: quiet time asked for.
 * @timeout_ms: most time the lender waits.
 * @ticket: set to the lender's ticket.
 * @waited_ms: set to how long it waited.
 *
 * Return: 0; -ETIMEDOUT if the device did not settle (it runs on), -EPROTO
 * for a malformed answer, or another error of the request.
 */
int dl_session_quiesce(struct dl_vdev *v, u32 settle_ms, u32 timeout_ms,
		       u64 *ticket, u32 *waited_ms)
{
	struct dl_mig_quiesce q = {
		.dev_id = cpu_to_le32(v->sess.dev_id),
		.settle_ms = cpu_to_le32(settle_ms),
		.timeout_ms = cpu_to_le32(timeout_ms),
	};
	struct dl_mig_ticket t;
	size_t len = 0;
	int ret;

	lockdep_assert_held(&v->lock);

	if (READ_ONCE(v->sess.state) != DL_VDEV_BORROWED)
		return -EIO;
	/* The lender answers after its wait. */
	ret = dl_fabric_request(v->b->fab, v->sess.host, DL_MSG_MIG_QUIESCE,
				&q, sizeof(q), &t, sizeof(t), &len,
				DL_B_TIMEOUT_MS + timeout_ms);
	if (!ret && (len < sizeof(t) || t.dev_id != q.dev_id || !t.ticket))
		ret = -EPROTO;
	dl_session_refused(v, ret);
	if (ret)
		return ret;
	*ticket = le64_to_cpu(t.ticket);
	*waited_ms = le32_to_cpu(t.waited_ms);
	return 0;
}

/**
 * dl_session_resume() - bus mastering back at the lender after a quiesce.
 * @v: the mdev, holding the device; caller holds v->lock.
 *
 * Return: 0 or an error of the request.
 */
int dl_session_resume(struct dl_vdev *v)
{
	struct dl_dev_ref ref = { .dev_id = cpu_to_le32(v->sess.dev_id) };

	lockdep_assert_held(&v->lock);

	if (READ_ONCE(v->sess.state) != DL_VDEV_BORROWED)
		return -EIO;
	return dl_session_request(v, DL_MSG_MIG_RESUME, &ref, sizeof(ref),
				  NULL, 0);
}

/**
 * dl_session_release() - give the remote device back, or leave that to
 *	the release work, and let go of the lease.
 * @v: the mdev, closing, its DMA disabled; caller holds v->lock.
 *
 * What the lender may still map of this host is the lease's business
 * afterwards; the caller tells the DMA layer so.
 */
void dl_session_release(struct dl_vdev *v)
{
	struct dl_dev_ref ref = { .dev_id = cpu_to_le32(v->sess.dev_id) };
	struct dl_borrower *b = v->b;
	int ret = -ENOTCONN;
	bool held;

	lockdep_assert_held(&v->lock);

	if (!v->sess.lease)
		return;
	/*
	 * Returning, not holding: the lender's DEV_CHANGED and the scan this
	 * release starts must not read "available" as the lender taking it
	 * back from us (dl_remote_check_owner()).
	 */
	mutex_lock(&b->lock);
	held = READ_ONCE(v->sess.state) == DL_VDEV_BORROWED;
	if (held)
		dl_session_set_state(v, DL_VDEV_RETURNING);
	mutex_unlock(&b->lock);
	if (held) {
		ret = dl_fabric_request_urgent(b->fab, v->sess.host,
					       DL_MSG_DEV_RELEASE, &ref,
					       sizeof(ref), DL_B_TIMEOUT_MS);
		if (ret)
			dev_warn(dl_vdev_dev(v), "cannot return remote device %u:%u now: %d\n",
				 v->sess.host, v->sess.dev_id, ret);
		else
			dev_info(dl_vdev_dev(v), "returned remote device %u:%u\n",
				 v->sess.host, v->sess.dev_id);
	}

	mutex_lock(&v->dma.lock);
	mutex_lock(&b->lock);
	if (!ret)
		b->returned++;
	if (dl_lease_answer_settles(ret))
		dl_lease_settle(b, v->sess.lease, "returned");
	dl_lease_put(b, v->sess.lease);
	v->sess.lease = NULL;
	mutex_unlock(&b->lock);
	mutex_unlock(&v->dma.lock);
	/* Its state changes on the lender: read it again. */
	dl_remote_rescan(b, v->sess.host);
}

/**
 * dl_session_open() - claim the remote device the mdev targets.
 * @v: the mdev, opening, with a target; caller holds v->lock.
 *
 * Return: 0, -ENODEV if the entry is gone, -EBUSY if another mdev of this
 * host has it open.
 */
int dl_session_open(struct dl_vdev *v)
{
	struct dl_borrower *b = v->b;
	struct dl_remote_owner *holder;
	int ret;

	lockdep_assert_held(&v->lock);

	mutex_lock(&b->lock);
	holder = v->remote->owner;
	ret = v->remote->gone ? -ENODEV : holder ? -EBUSY : 0;
	if (!ret)
		v->remote->owner = &v->sess.remote_owner;
	v->sess.host = v->remote->host;
	v->sess.dev_id = v->remote->dev_id;
	if (ret == -EBUSY)
		dev_err(dl_vdev_dev(v), "remote device %u:%u is held by mdev %s of this host\n",
			v->sess.host, v->sess.dev_id,
			dev_name(dl_vdev_dev(container_of(holder, struct dl_vdev,
							  sess.remote_owner))));
	mutex_unlock(&b->lock);
	if (ret == -ENODEV)
		dev_err(dl_vdev_dev(v), "remote device %u:%u is gone\n",
			v->sess.host, v->sess.dev_id);
	return ret;
}

/**
 * dl_session_close() - the mdev lets go of the remote entry it claimed:
 *	idle again. At close after dl_session_release(), or when the open
 *	fails after dl_session_open().
 * @v: the mdev; caller holds v->lock.
 */
void dl_session_close(struct dl_vdev *v)
{
	lockdep_assert_held(&v->lock);

	mutex_lock(&v->b->lock);
	dl_session_set_state(v, DL_VDEV_IDLE);
	v->remote->owner = NULL;
	mutex_unlock(&v->b->lock);
}

/**
 * dl_session_init() - set up the session of a new mdev: idle.
 * @v: the mdev, being initialized.
 */
void dl_session_init(struct dl_vdev *v)
{
	v->sess.remote_owner.lost = dl_session_remote_lost;
	v->sess.state = DL_VDEV_IDLE;
}
