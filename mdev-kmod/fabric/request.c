// SPDX-License-Identifier: GPL-2.0
/*
 * Requests: ids, waiting for responses, failing them.
 *
 * A request in flight sits in an xarray under the low 32 bits of its wire
 * id; the high 32 bits count how often the id space wrapped, so a late
 * response to an earlier user of the same slot is recognized. Responses
 * are looked up by (peer, id) and checked against the entry: a peer never
 * gets to name a pointer.
 *
 * Whoever removes a request from the xarray finishes it: the receive work
 * (response), a link going down (-ENOTCONN), the fabric going away
 * (-ENODEV) or the waiter itself (-ETIMEDOUT). A waiter that finds its
 * request already removed waits for the completion, which then comes
 * promptly, so the request (often on the waiter's stack) is never used
 * after the waiter returns.
 */
#include <linux/completion.h>
#include <linux/device.h>
#include <linux/minmax.h>
#include <linux/string.h>
#include <linux/wait.h>
#include <linux/xarray.h>

#include "internal.h"

/**
 * dl_req_init() - set up the table of requests in flight.
 * @fab: the fabric being created.
 */
void dl_req_init(struct dl_fabric *fab)
{
	xa_init_flags(&fab->reqs, XA_FLAGS_ALLOC);
}

/*
 * A request holds one of the peer's credits from submit until it leaves
 * the table; see dl_ring_share() for why they are limited. Requests that
 * are not urgent leave %DL_FABRIC_URGENT_SLOTS of them to urgent ones.
 */
static bool dl_req_take_credit(struct dl_peer *peer, int limit)
{
	int out = atomic_read(&peer->reqs_out);

	do {
		if (out >= limit)
			return false;
	} while (!atomic_try_cmpxchg(&peer->reqs_out, &out, out + 1));
	return true;
}

static int dl_req_get_credit(struct dl_fabric *fab, struct dl_peer *peer,
			     bool urgent)
{
	int limit = urgent ? dl_ring_share(fab) : dl_ring_share_normal(fab);

	if (!wait_event_timeout(peer->req_wq, dl_req_take_credit(peer, limit),
				msecs_to_jiffies(DL_TX_FULL_WAIT_MS)))
		return -EAGAIN;
	return 0;
}

static void dl_req_put_credit(struct dl_fabric *fab, u32 peer)
{
	struct dl_peer *p = &fab->peers[peer];

	atomic_dec(&p->reqs_out);
	wake_up(&p->req_wq);
}

/* Take @req out of the table if it is still there; true if we did. */
static bool dl_req_remove(struct dl_fabric *fab, struct dl_fabric_req *req)
{
	if (xa_cmpxchg(&fab->reqs, lower_32_bits(req->wire_id), req, NULL,
		       0) != req)
		return false;
	dl_req_put_credit(fab, req->peer);
	return true;
}

/**
 * dl_fabric_req_submit() - send a request without waiting for its response.
 * @fab: the fabric.
 * @peer: the receiver's host id.
 * @type: the message type, nonzero.
 * @data: the payload.
 * @len: bytes at @data, at most dl_fabric_max_payload().
 * @req: the caller's request; @req->resp and @req->resp_size set.
 *
 * On success the caller must call dl_fabric_req_wait() on @req. Might
 * sleep.
 *
 * At most dl_ring_share() requests are in flight to one peer, and at most
 * dl_ring_share_normal() unless @req->urgent; a further one waits up to
 * %DL_TX_FULL_WAIT_MS for one of them to finish.
 *
 * Return: 0, -EINVAL, -ENOMEM, -EBUSY if all ids are in use, -EAGAIN if
 * too many requests stayed in flight, or an error of dl_fabric_send(); on
 * error the fabric does not reference @req.
 */
int dl_fabric_req_submit(struct dl_fabric *fab, u32 peer, u16 type,
			 const void *data, size_t len,
			 struct dl_fabric_req *req)
{
	struct dl_peer *p = dl_fabric_peer(fab, peer);
	struct dl_fabric_msg msg = {
		.type = type,
		.data = data,
		.len = len,
		.urgent = req->urgent,
	};
	u32 idx;
	int ret;

	if (!p || !type || (req->resp_size && !req->resp))
		return -EINVAL;

	init_completion(&req->completion);
	req->peer = peer;
	req->type = type;
	req->status = -EINPROGRESS;
	req->resp_len = 0;
	req->peer_inc = 0;

	ret = dl_req_get_credit(fab, p, req->urgent);
	if (ret)
		return ret;

	xa_lock(&fab->reqs);
	ret = __xa_alloc_cyclic(&fab->reqs, &idx, req, XA_LIMIT(1, U32_MAX),
				&fab->req_next, GFP_KERNEL);
	if (ret == 1)
		fab->req_gen++;
	if (ret >= 0)
		req->wire_id = (u64)fab->req_gen << 32 | idx;
	xa_unlock(&fab->reqs);
	if (ret < 0) {
		dl_req_put_credit(fab, peer);
		return ret;
	}

	/*
	 * dl_ring_send() checks the link only now that the request is in
	 * the table: a link going down marks itself down before it fails
	 * the table, so either we see it down or it sees our request.
	 */
	msg.req_id = req->wire_id;
	req->sent = ktime_get();
	ret = dl_ring_send(fab, p, &msg, 0, DL_STATUS_OK, &req->peer_inc);
	if (!ret)
		return 0;

	if (!dl_req_remove(fab, req))
		wait_for_completion(&req->completion);
	return ret;
}
EXPORT_SYMBOL_GPL(dl_fabric_req_submit);

/**
 * dl_fabric_req_wait() - wait for the result of a submitted request.
 * @fab: the fabric.
 * @req: a request dl_fabric_req_submit() accepted.
 * @timeout_ms: how long to wait from now.
 *
 * Might sleep. Afterwards the fabric no longer references @req.
 *
 * Return: @req->status: 0 or -errno from the response's status,
 * -EMSGSIZE if the response did not fit, -EPROTO if it was of another
 * type, -ETIMEDOUT, -ENOTCONN if the peer went down, -ENODEV if the fabric
 * went away.
 */
int dl_fabric_req_wait(struct dl_fabric *fab, struct dl_fabric_req *req,
		       unsigned int timeout_ms)
{
	if (!wait_for_completion_timeout(&req->completion,
					 msecs_to_jiffies(timeout_ms))) {
		if (dl_req_remove(fab, req)) {
			req->status = -ETIMEDOUT;
			return req->status;
		}
		/* Someone else is finishing it right now. */
		wait_for_completion(&req->completion);
	}
	return req->status;
}
EXPORT_SYMBOL_GPL(dl_fabric_req_wait);

/**
 * dl_fabric_request() - send a request and wait for its response.
 * @fab: the fabric.
 * @peer: the receiver's host id.
 * @type: the message type, nonzero.
 * @data: the payload.
 * @len: bytes at @data, at most dl_fabric_max_payload().
 * @resp: where the response payload goes.
 * @resp_size: bytes available at @resp.
 * @resp_len: if not NULL, set to the bytes the response carried.
 * @timeout_ms: how long to wait for the response.
 *
 * Might sleep.
 *
 * Return: as dl_fabric_req_submit(), then as dl_fabric_req_wait().
 */
int dl_fabric_request(struct dl_fabric *fab, u32 peer, u16 type,
		      const void *data, size_t len, void *resp,
		      size_t resp_size, size_t *resp_len,
		      unsigned int timeout_ms)
{
	struct dl_fabric_req req = {
		.resp = resp,
		.resp_size = resp_size,
	};
	int ret;

	ret = dl_fabric_req_submit(fab, peer, type, data, len, &req);
	if (ret)
		return ret;
	ret = dl_fabric_req_wait(fab, &req, timeout_ms);
	if (resp_len)
		*resp_len = req.resp_len;
	return ret;
}
EXPORT_SYMBOL_GPL(dl_fabric_request);

/**
 * dl_fabric_request_urgent() - send an urgent request that expects an
 *	empty response, and wait for it.
 * @fab: the fabric.
 * @peer: the receiver's host id.
 * @type: the message type, nonzero.
 * @data: the payload.
 * @len: bytes at @data, at most dl_fabric_max_payload().
 * @timeout_ms: how long to wait for the response.
 *
 * For requests that give something back (unmapping DMA, returning a
 * device): they may use the credits and ring slots that other requests
 * and posted messages leave free (%DL_FABRIC_URGENT_SLOTS). Might sleep.
 *
 * Return: as dl_fabric_request().
 */
int dl_fabric_request_urgent(struct dl_fabric *fab, u32 peer, u16 type,
			     const void *data, size_t len,
			     unsigned int timeout_ms)
{
	struct dl_fabric_req req = { .urgent = true };
	int ret;

	ret = dl_fabric_req_submit(fab, peer, type, data, len, &req);
	if (ret)
		return ret;
	return dl_fabric_req_wait(fab, &req, timeout_ms);
}
EXPORT_SYMBOL_GPL(dl_fabric_request_urgent);

/**
 * dl_req_complete() - finish the request a response answers.
 * @fab: the fabric.
 * @peer: the peer the response came from.
 * @msg: the response.
 * @status: its status from the wire.
 *
 * Responses nobody waits for (any more) are counted and dropped.
 */
void dl_req_complete(struct dl_fabric *fab, struct dl_peer *peer,
		     const struct dl_fabric_msg *msg, u32 status)
{
	u32 idx = lower_32_bits(msg->req_id);
	ktime_t now = ktime_get();
	struct dl_fabric_req *req;

	xa_lock(&fab->reqs);
	req = xa_load(&fab->reqs, idx);
	/*
	 * Only the incarnation the request went to answers it: ids start
	 * again in every incarnation of ours, and an answer that an earlier
	 * incarnation of the peer owed us must not finish a request that a
	 * later one never saw (nor tell a borrower who granted what).
	 */
	if (req && (req->wire_id != msg->req_id || req->peer != peer->id ||
		    msg->epoch != lower_32_bits(req->peer_inc)))
		req = NULL;
	if (req) {
		__xa_erase(&fab->reqs, idx);
		dl_req_put_credit(fab, req->peer);
	}
	xa_unlock(&fab->reqs);
	if (req) {
		/* Round trips, for `devlend stats` (sysfs answers, answer_ns). */
		dl_peer_count(peer, DL_CNT_ANSWERS);
		atomic64_add(ktime_to_ns(ktime_sub(now, req->sent)),
			     &peer->cnt[DL_CNT_ANSWER_NS]);
	}

	if (!req) {
		dl_peer_count(peer, DL_CNT_LATE_RESPONSES);
		dev_dbg_ratelimited(fab->dev,
				    "peer %u: response to unknown request %#llx\n",
				    peer->id, msg->req_id);
		return;
	}

	req->resp_len = msg->len;
	if (req->resp_size)
		memcpy(req->resp, msg->data, min(msg->len, req->resp_size));
	req->status = dl_status_to_errno(status);
	if (!req->status && msg->len > req->resp_size)
		req->status = -EMSGSIZE;
	if (msg->type != req->type) {
		dl_peer_count(peer, DL_CNT_RX_BAD_MSGS);
		dev_warn_ratelimited(fab->dev,
				     "peer %u: response of type %u to a request of type %u\n",
				     peer->id, msg->type, req->type);
		req->status = -EPROTO;
	}
	req->done = now;
	complete(&req->completion);
}

/**
 * dl_req_fail() - fail requests in flight.
 * @fab: the fabric.
 * @peer: fail only the requests to this host id; U32_MAX for all.
 * @err: the -errno they fail with.
 */
void dl_req_fail(struct dl_fabric *fab, u32 peer, int err)
{
	struct dl_fabric_req *req;
	unsigned long idx;

	xa_lock(&fab->reqs);
	xa_for_each(&fab->reqs, idx, req) {
		if (peer != U32_MAX && req->peer != peer)
			continue;
		__xa_erase(&fab->reqs, idx);
		dl_req_put_credit(fab, req->peer);
		req->status = err;
		complete(&req->completion);
	}
	xa_unlock(&fab->reqs);
}

/**
 * dl_req_destroy() - fail whatever is left and free the table.
 * @fab: the fabric, with nothing left that could submit or respond.
 */
void dl_req_destroy(struct dl_fabric *fab)
{
	dl_req_fail(fab, U32_MAX, -ENODEV);
	xa_destroy(&fab->reqs);
}
