// SPDX-License-Identifier: GPL-2.0
/*
 * The lender's message handlers: what borrowers may ask of lent devices.
 *
 * Handlers run in the fabric's receive work, one message at a time, in
 * ring order; so a BAR read sees the posted BAR writes before it. (Posted
 * BAR writes of the holder are done in the doorbell interrupt when they
 * come first and the device is in a plain state, in the same order: see
 * bar.c.) Requests
 * that reset the device are checked there and done by a work of the
 * device (dl_lent_slow_work()), which answers them. Every
 * payload is copied, its length must be exactly the structure's, reserved
 * fields must be zero, the dev_id must name a lent device, and the sender
 * must be allowed what it asks:
 *  - anyone: DEV_LIST, DEV_INFO, DEV_ACQUIRE;
 *  - anyone while nobody holds the device, else the holder: CFG_READ;
 *  - the holder only (host id and incarnation of the acquire): the rest.
 * A refused request is answered with an error status and counted by
 * reason (debugfs); logs about it are rate-limited.
 */
#include <linux/delay.h>
#include <linux/io.h>
#include <linux/pci.h>
#include <linux/string.h>
#include <linux/unaligned.h>

#include "internal.h"

/* Who may do what to a device. */
enum dl_access {
	DL_ACC_ANY,		/* list, info, acquire */
	DL_ACC_READ,		/* config reads: nobody else holds it */
	DL_ACC_HOLDER,		/* everything else */
};

static bool dl_lent_is_holder(struct dl_lent *lent, struct dl_fabric *fab,
			      u32 peer)
{
	struct dl_fabric_peer_info info;

	lockdep_assert_held(&lent->lock);

	if (lent->state != DL_LENT_BORROWED || lent->borrower != peer ||
	    lent->fab != fab)
		return false;
	/* A new incarnation of the holder holds nothing. */
	return !dl_fabric_peer_info(fab, peer, &info) && info.up &&
	       info.incarnation == lent->borrower_inc;
}

/*
 * Take the device's locks, unless a reset or a take-back holds them: the
 * receive work serves every peer and must not wait that out (up to a
 * minute for a reset). Other holders of the locks are brief.
 */
static bool dl_lent_lock_unless_slow(struct dl_lent *lent)
{
	struct device *dev = &lent->pdev->dev;

	while (!device_trylock(dev)) {
		if (atomic_read(&lent->slow_holds))
			return false;
		usleep_range(50, 100);
	}
	mutex_lock(&lent->lock);
	return true;
}

/*
 * Find the device a request names and lock it: device lock, then
 * lent->lock. Return it, or NULL with *err set (and the refusal counted).
 */
static struct dl_lent *dl_lender_open(struct dl_fabric *fab,
				      const struct dl_fabric_msg *msg,
				      __le32 dev_id, enum dl_access acc,
				      int *err)
{
	struct dl_lent *lent;

	lent = dl_lent_get(le32_to_cpu(dev_id));
	if (!lent) {
		dl_lent_reject(NULL, DL_REJ_NODEV);
		*err = -ENODEV;
		return NULL;
	}
	if (!dl_lent_lock_unless_slow(lent)) {
		/* Nothing reaches the device while it resets. */
		dl_lent_reject(lent, DL_REJ_BUSY);
		*err = -EAGAIN;
		dl_lent_put(lent);
		return NULL;
	}
	if (lent->dead) {
		dl_lent_reject(NULL, DL_REJ_NODEV);
		*err = -ENODEV;
		goto err_unlock;
	}
	if (acc == DL_ACC_ANY)
		return lent;
	if (dl_lent_is_holder(lent, fab, msg->peer)) {
		if (!READ_ONCE(lent->slow_busy))
			return lent;
		/* Nothing reaches the device while it resets. */
		dl_lent_reject(lent, DL_REJ_BUSY);
		*err = -EAGAIN;
		goto err_unlock;
	}
	if (acc == DL_ACC_READ && lent->state == DL_LENT_AVAILABLE)
		return lent;

	dl_lent_reject(lent, DL_REJ_NOT_HOLDER);
	dev_dbg_ratelimited(&lent->pdev->dev,
			    "lender: host %u is not the holder of device %u (message %u)\n",
			    msg->peer, lent->dev_id, msg->type);
	/* Held by someone else: busy; held by nobody: acquire first. */
	*err = lent->state == DL_LENT_AVAILABLE ? -EINVAL : -EBUSY;
err_unlock:
	mutex_unlock(&lent->lock);
	device_unlock(&lent->pdev->dev);
	dl_lent_put(lent);
	return NULL;
}

/* Unlock a device dl_lender_open() returned; its state may have changed. */
static void dl_lender_close(struct dl_lent *lent)
{
	dl_lent_fast_update(lent);
	mutex_unlock(&lent->lock);
	device_unlock(&lent->pdev->dev);
	dl_lent_put(lent);
}

/* Copy a fixed-size payload; false (and counted) if the length is wrong. */
static bool dl_lender_payload(const struct dl_fabric_msg *msg, void *buf,
			      size_t size)
{
	if (msg->len != size) {
		dl_lent_reject(NULL, DL_REJ_MALFORMED);
		return false;
	}
	memcpy(buf, msg->data, size);
	return true;
}

/*
 * Copy a struct dl_dev_ref payload; false (and counted) if its length is
 * wrong or its reserved field is set.
 */
static bool dl_lender_ref(const struct dl_fabric_msg *msg,
			  struct dl_dev_ref *ref)
{
	if (!dl_lender_payload(msg, ref, sizeof(*ref)))
		return false;
	if (ref->reserved) {
		dl_lent_reject(NULL, DL_REJ_MALFORMED);
		return false;
	}
	return true;
}

static void dl_lender_respond(struct dl_fabric *fab,
			      const struct dl_fabric_msg *msg, int err,
			      const void *data, size_t len)
{
	if (!msg->req_id)
		return;
	if (dl_fabric_respond(fab, msg, err, err ? NULL : data, err ? 0 : len))
		dev_dbg_ratelimited(dl_fabric_device(fab),
				    "lender: response to host %u not sent\n",
				    msg->peer);
}

static void dl_lender_on_dev_list(struct dl_fabric *fab,
				  const struct dl_fabric_msg *msg, void *priv)
{
	struct dl_dev_list list = {};
	struct dl_dev_ref ref;
	struct dl_lent *lent;
	unsigned long idx;
	u32 total = 0, count = 0;

	if (!dl_lender_ref(msg, &ref)) {
		dl_lender_respond(fab, msg, -EINVAL, NULL, 0);
		return;
	}
	xa_lock(&dl_lender.devs);
	xa_for_each(&dl_lender.devs, idx, lent) {
		total++;
		if (idx >= le32_to_cpu(ref.dev_id) && count < DL_DEV_LIST_MAX)
			list.ids[count++] = cpu_to_le32(idx);
	}
	xa_unlock(&dl_lender.devs);
	list.total = cpu_to_le32(total);
	list.count = cpu_to_le32(count);
	dl_lender_respond(fab, msg, 0, &list, sizeof(list));
}

static void dl_lender_fill_info(struct dl_lent *lent, struct dl_dev_info *info)
{
	struct pci_dev *pdev = lent->pdev;
	u32 flags = 0;
	int i, n;

	info->dev_id = cpu_to_le32(lent->dev_id);
	info->vendor = cpu_to_le16(pdev->vendor);
	info->device = cpu_to_le16(pdev->device);
	info->subsys_vendor = cpu_to_le16(pdev->subsystem_vendor);
	info->subsys_device = cpu_to_le16(pdev->subsystem_device);
	info->class_rev = cpu_to_le32(pdev->class << 8 | pdev->revision);
	info->state = cpu_to_le16(lent->state);
	info->borrower = cpu_to_le16(lent->borrower);
	if (pdev->msix_cap)
		flags |= DL_DEV_F_MSIX;
	if (pdev->msi_cap)
		flags |= DL_DEV_F_MSI;
	if (lent->intx_ok)
		flags |= DL_DEV_F_INTX;
	if (pci_is_pcie(pdev))
		flags |= DL_DEV_F_PCIE;
	info->flags = cpu_to_le32(flags);
	n = pci_msix_vec_count(pdev);
	info->msix_count = cpu_to_le16(n > 0 ? n : 0);
	n = pci_msi_vec_count(pdev);
	info->msi_count = cpu_to_le16(n > 0 ? n : 0);
	info->cfg_size = cpu_to_le32(lent->cfg_size);
	for (i = 0; i < DL_NUM_BARS; i++) {
		/* I/O BARs are not served (not mapped): not offered either. */
		if (lent->bars[i].flags & DL_BAR_F_IO)
			continue;
		info->bars[i].size = cpu_to_le64(lent->bars[i].size);
		info->bars[i].flags = cpu_to_le32(lent->bars[i].flags);
	}
	strscpy_pad(info->name, pci_name(pdev), sizeof(info->name));
}

static void dl_lender_on_dev_info(struct dl_fabric *fab,
				  const struct dl_fabric_msg *msg, void *priv)
{
	struct dl_dev_info info = {};
	struct dl_dev_ref ref;
	struct dl_lent *lent;
	int err = -EINVAL;

	if (!dl_lender_ref(msg, &ref))
		goto out_respond;
	lent = dl_lender_open(fab, msg, ref.dev_id, DL_ACC_ANY, &err);
	if (!lent)
		goto out_respond;
	dl_lender_fill_info(lent, &info);
	dl_lender_close(lent);
	err = 0;
out_respond:
	dl_lender_respond(fab, msg, err, &info, sizeof(info));
}

static void dl_lender_on_acquire(struct dl_fabric *fab,
				 const struct dl_fabric_msg *msg, void *priv)
{
	struct dl_fabric_peer_info pinfo;
	struct dl_dev_ref ref;
	struct dl_lent *lent;
	int err = -EINVAL;

	if (!dl_lender_ref(msg, &ref))
		goto out_respond;
	lent = dl_lender_open(fab, msg, ref.dev_id, DL_ACC_ANY, &err);
	if (!lent)
		goto out_respond;

	if (lent->state != DL_LENT_AVAILABLE || lent->unlending) {
		dl_lent_reject(lent, DL_REJ_BUSY);
		dev_dbg_ratelimited(&lent->pdev->dev,
				    "lender: host %u asked for device %u, held by host %u\n",
				    msg->peer, lent->dev_id, lent->borrower);
		err = -EBUSY;
	} else if (dl_fabric_peer_info(fab, msg->peer, &pinfo) || !pinfo.up) {
		err = -EINVAL;
	} else {
		lent->state = DL_LENT_BORROWED;
		lent->borrower = msg->peer;
		lent->borrower_inc = pinfo.incarnation;
		lent->fab = fab;
		dl_lent_changed_queue(lent);
		dl_lent_count(lent, DL_LCNT_ACQUIRES);
		pci_info_ratelimited(lent->pdev,
				     "lender: device %u borrowed by host %u (%s)\n",
				     lent->dev_id, msg->peer, pinfo.name);
		err = 0;
	}
	dl_lender_close(lent);
out_respond:
	dl_lender_respond(fab, msg, err, &ref, sizeof(ref));
}

/*
 * DEV_RELEASE, DEV_RESET and a config write asking for function-level
 * reset each reset the function, which may take long (up to a minute on real
 * hardware). Done in the receive work, that held up every message of
 * every peer, this host's own responses among them. So the handler only
 * checks the request (in ring order, under the device's locks) and hands
 * it to the device's slow_work, which answers when done. Until then the
 * device takes no other holder request (-EAGAIN), so nothing reaches it
 * while it resets and nobody learns "not yours" before its mappings are
 * gone.
 */
static void dl_lent_slow_take(struct dl_lent *lent, struct dl_fabric *fab,
			      const struct dl_fabric_msg *msg)
{
	lockdep_assert_held(&lent->lock);

	dl_lent_slow_mark(lent, DL_LENT_SLOW_BUSY);
	lent->slow_fab = fab;
	lent->slow_msg = *msg;
	lent->slow_msg.data = NULL;
	lent->slow_msg.len = 0;
	dl_lent_slow_queue(lent);
}

static void dl_lender_on_slow(struct dl_fabric *fab,
			      const struct dl_fabric_msg *msg, void *priv)
{
	struct dl_dev_ref ref;
	struct dl_lent *lent;
	int err = -EINVAL;

	if (!dl_lender_ref(msg, &ref))
		goto out_respond;
	lent = dl_lender_open(fab, msg, ref.dev_id, DL_ACC_HOLDER, &err);
	if (!lent)
		goto out_respond;
	dl_lent_slow_take(lent, fab, msg);
	dl_lender_close(lent);
	return;

out_respond:
	dl_lender_respond(fab, msg, err, NULL, 0);
}

/**
 * dl_lent_slow_queue() - queue the device's slow work, with a reference
 *	for it.
 * @lent: the device.
 */
void dl_lent_slow_queue(struct dl_lent *lent)
{
	kref_get(&lent->ref);
	if (!queue_work(system_unbound_wq, &lent->slow_work))
		dl_lent_put(lent);	/* queued already, with its own */
}

/*
 * The slow request, under the device's locks; true if the device changed
 * hands. Its holder may have gone (and the device been taken back) since
 * it was queued: then the answer says it holds nothing.
 */
static bool dl_lent_slow_request(struct dl_lent *lent, int *err)
{
	const struct dl_fabric_msg *msg = &lent->slow_msg;

	if (lent->dead) {
		*err = -ENODEV;
		return false;
	}
	if (!dl_lent_is_holder(lent, lent->slow_fab, msg->peer)) {
		*err = lent->state == DL_LENT_AVAILABLE ? -EINVAL : -EBUSY;
		return false;
	}
	if (msg->type == DL_MSG_DEV_RELEASE) {
		dl_lent_count(lent, DL_LCNT_RELEASES);
		pci_info_ratelimited(lent->pdev,
				     "lender: device %u returned by host %u\n",
				     lent->dev_id, msg->peer);
		dl_lent_reclaim(lent, "released");
		*err = 0;
		return true;
	}
	/* DEV_RESET, or a config write with function-level reset. */
	*err = dl_lent_reset(lent);
	if (*err) {
		dev_warn_ratelimited(&lent->pdev->dev,
				     "lender: reset failed: %d\n", *err);
		*err = -EIO;
	}
	return false;
}

/**
 * dl_lent_slow_work() - take the device back from a holder that went
 *	down, and do a queued DEV_RELEASE or DEV_RESET and answer it.
 * @work: &dl_lent.slow_work, queued by dl_lent_slow_queue().
 *
 * If the device lock is taken (the device is being removed, which cancels
 * this work, or a sysfs write), it queues itself again rather than wait.
 */
void dl_lent_slow_work(struct work_struct *work)
{
	struct dl_lent *lent = container_of(work, struct dl_lent, slow_work);
	bool changed = false, answer;
	int err = 0;

	if (!device_trylock(&lent->pdev->dev)) {
		usleep_range(1000, 2000);
		dl_lent_slow_queue(lent);
		dl_lent_put(lent);
		return;
	}
	mutex_lock(&lent->lock);
	if (test_and_clear_bit(DL_LENT_SLOW_RECLAIM, &lent->slow_busy) &&
	    !lent->dead && lent->state != DL_LENT_AVAILABLE &&
	    !dl_lent_is_holder(lent, lent->fab, lent->borrower)) {
		dl_lent_count(lent, DL_LCNT_RECLAIMS);
		dl_lent_reclaim(lent, "borrower went down");
		changed = true;
	}
	answer = test_bit(DL_LENT_SLOW_BUSY, &lent->slow_busy);
	if (answer)
		changed |= dl_lent_slow_request(lent, &err);
	clear_bit(DL_LENT_SLOW_BUSY, &lent->slow_busy);
	dl_lent_fast_update(lent);
	mutex_unlock(&lent->lock);
	device_unlock(&lent->pdev->dev);

	if (answer)
		dl_lender_respond(lent->slow_fab, &lent->slow_msg, err, NULL, 0);
	if (changed)
		dl_lender_broadcast_changed(lent->dev_id);
	dl_lent_put(lent);
}

/**
 * dl_lent_slow_cancel() - forget what the slow work was to do (a queued
 *	request goes unanswered: its requester times out) and wait for it.
 * @lent: the device, going away; its device lock held.
 */
void dl_lent_slow_cancel(struct dl_lent *lent)
{
	if (cancel_work_sync(&lent->slow_work))
		dl_lent_put(lent);
	if (cancel_work_sync(&lent->changed_work))
		dl_lent_put(lent);
	WRITE_ONCE(lent->slow_busy, 0);
}

static bool dl_cfg_access_ok(struct dl_lent *lent,
			     const struct dl_cfg_access *a)
{
	unsigned int off = le16_to_cpu(a->offset);

	if (a->reserved || (a->size != 1 && a->size != 2 && a->size != 4) ||
	    off % a->size || off + a->size > lent->cfg_size) {
		dl_lent_reject(lent, DL_REJ_CFG_RANGE);
		return false;
	}
	return true;
}

static void dl_lender_on_cfg_read(struct dl_fabric *fab,
				  const struct dl_fabric_msg *msg, void *priv)
{
	struct dl_cfg_access a;
	struct dl_lent *lent;
	int err = -EINVAL;
	u32 val = ~0U;

	if (!dl_lender_payload(msg, &a, sizeof(a)))
		goto out_respond;
	lent = dl_lender_open(fab, msg, a.dev_id, DL_ACC_READ, &err);
	if (!lent)
		goto out_respond;
	err = -EINVAL;
	if (dl_cfg_access_ok(lent, &a)) {
		err = dl_lent_cfg_read(lent, le16_to_cpu(a.offset), a.size,
				       &val) ? -EIO : 0;
		dl_lent_count(lent, DL_LCNT_CFG_READS);
	}
	dl_lender_close(lent);
	a.value = cpu_to_le32(val);
out_respond:
	dl_lender_respond(fab, msg, err, &a, sizeof(a));
}

/*
 * A run of config space in one answer: at open the borrower copies all of
 * it, which dword by dword took a thousand round trips. Each dword is read
 * as a 4-byte DL_MSG_CFG_READ would be (virtual bits included).
 */
static void dl_lender_on_cfg_read_block(struct dl_fabric *fab,
					const struct dl_fabric_msg *msg,
					void *priv)
{
	struct dl_cfg_block_req req;
	struct dl_cfg_block blk = {};
	unsigned int off, len, i;
	struct dl_lent *lent;
	int err = -EINVAL;
	u32 val;

	if (!dl_lender_payload(msg, &req, sizeof(req)))
		goto out_respond;
	lent = dl_lender_open(fab, msg, req.dev_id, DL_ACC_READ, &err);
	if (!lent)
		goto out_respond;
	off = le16_to_cpu(req.offset);
	len = le16_to_cpu(req.len);
	err = 0;
	if (off % 4 || len % 4 || !len || len > DL_CFG_BLOCK_MAX ||
	    off + len > lent->cfg_size) {
		dl_lent_reject(lent, DL_REJ_CFG_RANGE);
		err = -EINVAL;
	}
	for (i = 0; !err && i < len; i += 4) {
		if (dl_lent_cfg_read(lent, off + i, 4, &val))
			err = -EIO;
		else
			put_unaligned_le32(val, &blk.data[i]);
	}
	if (!err)
		dl_lent_count(lent, DL_LCNT_CFG_READS);
	dl_lender_close(lent);
	blk.dev_id = req.dev_id;
	blk.offset = req.offset;
	blk.len = req.len;
out_respond:
	dl_lender_respond(fab, msg, err, &blk, sizeof(blk));
}

static void dl_lender_on_cfg_write(struct dl_fabric *fab,
				   const struct dl_fabric_msg *msg, void *priv)
{
	struct dl_cfg_access a;
	struct dl_lent *lent;
	int err = -EINVAL, ret;

	if (!dl_lender_payload(msg, &a, sizeof(a)))
		goto out_respond;
	lent = dl_lender_open(fab, msg, a.dev_id, DL_ACC_HOLDER, &err);
	if (!lent)
		goto out_respond;
	err = -EINVAL;
	if (dl_cfg_access_ok(lent, &a)) {
		dl_lent_count(lent, DL_LCNT_CFG_WRITES);
		ret = dl_lent_cfg_write(lent, le16_to_cpu(a.offset), a.size,
					le32_to_cpu(a.value));
		err = ret < 0 ? -EIO : 0;
		if (ret > 0 && (ret & DL_CFG_WRITE_FILTERED))
			dl_lent_count(lent, DL_LCNT_CFG_FILTERED);
		if (ret > 0 && (ret & DL_CFG_WRITE_RESET)) {
			/* Answered by the slow work, once reset. */
			dl_lent_slow_take(lent, fab, msg);
			dl_lender_close(lent);
			return;
		}
	}
	dl_lender_close(lent);
out_respond:
	dl_lender_respond(fab, msg, err, NULL, 0);
}

/* Check a BAR access; 0 or -errno (counted). */
static int dl_bar_access_check(struct dl_lent *lent,
			       const struct dl_bar_access *a)
{
	enum dl_lender_reject why;
	int err;

	err = dl_lent_bar_verdict(lent, a, &why);
	if (err)
		dl_lent_reject(lent, why);
	return err;
}

static void dl_lender_on_bar_read(struct dl_fabric *fab,
				  const struct dl_fabric_msg *msg, void *priv)
{
	struct dl_bar_access a;
	struct dl_lent *lent;
	int err = -EINVAL;
	u64 val = ~0ULL;

	if (!dl_lender_payload(msg, &a, sizeof(a)))
		goto out_respond;
	lent = dl_lender_open(fab, msg, a.dev_id, DL_ACC_HOLDER, &err);
	if (!lent)
		goto out_respond;
	err = dl_bar_access_check(lent, &a);
	if (!err) {
		val = dl_lent_bar_read(lent, &a);
		dl_lent_count(lent, DL_LCNT_BAR_READS);
		dl_lent_intx_eoi(lent);
	}
	dl_lender_close(lent);
	a.value = cpu_to_le64(val);
out_respond:
	dl_lender_respond(fab, msg, err, &a, sizeof(a));
}

static void dl_lender_on_bar_write(struct dl_fabric *fab,
				   const struct dl_fabric_msg *msg, void *priv)
{
	struct dl_bar_access a;
	struct dl_lent *lent;
	int err = -EINVAL;

	if (!dl_lender_payload(msg, &a, sizeof(a)))
		goto out_log;
	lent = dl_lender_open(fab, msg, a.dev_id, DL_ACC_HOLDER, &err);
	if (!lent)
		goto out_log;
	err = dl_bar_access_check(lent, &a);
	if (!err) {
		dl_lent_bar_write(lent, &a);
		dl_lent_count(lent, DL_LCNT_BAR_WRITES);
		dl_lent_intx_eoi(lent);
	}
	dl_lender_close(lent);
out_log:
	if (err)
		dev_dbg_ratelimited(dl_fabric_device(fab),
				    "lender: BAR write from host %u dropped: %d\n",
				    msg->peer, err);
	/* Posted; but answer a peer that asked for an answer anyway. */
	dl_lender_respond(fab, msg, err, NULL, 0);
}

static void dl_lender_on_dma_map(struct dl_fabric *fab,
				 const struct dl_fabric_msg *msg, void *priv)
{
	const struct dl_dma_map *req = msg->data;
	struct dl_lent *lent;
	int err = -EINVAL;
	u32 count;

	if (msg->len < sizeof(*req)) {
		dl_lent_reject(NULL, DL_REJ_MALFORMED);
		goto out_respond;
	}
	/* msg->data is this host's copy: reading it twice is safe. */
	count = le32_to_cpu(req->count);
	if (!count || count > (msg->len - sizeof(*req)) / sizeof(req->ranges[0]) ||
	    msg->len != sizeof(*req) + count * sizeof(req->ranges[0])) {
		dl_lent_reject(NULL, DL_REJ_MALFORMED);
		goto out_respond;
	}
	lent = dl_lender_open(fab, msg, req->dev_id, DL_ACC_HOLDER, &err);
	if (!lent)
		goto out_respond;
	err = dl_lent_dma_map(lent, fab, msg->peer, req->ranges, count);
	/* Overlap and budget are out-of-range requests too, on the wire. */
	if (err == -EEXIST || err == -ENOSPC)
		err = -EINVAL;
	dl_lender_close(lent);
out_respond:
	dl_lender_respond(fab, msg, err, NULL, 0);
}

static void dl_lender_on_dma_unmap(struct dl_fabric *fab,
				   const struct dl_fabric_msg *msg, void *priv)
{
	struct dl_dma_unmap u;
	struct dl_lent *lent;
	int err = -EINVAL;
	u64 iova, len;
	u32 flags;

	if (!dl_lender_payload(msg, &u, sizeof(u)))
		goto out_respond;
	lent = dl_lender_open(fab, msg, u.dev_id, DL_ACC_HOLDER, &err);
	if (!lent)
		goto out_respond;
	flags = le32_to_cpu(u.flags);
	iova = le64_to_cpu(u.iova);
	len = le64_to_cpu(u.len);
	if (flags & ~DL_DMA_UNMAP_F_ALL) {
		dl_lent_reject(lent, DL_REJ_MALFORMED);
		err = -EINVAL;
	} else if (flags & DL_DMA_UNMAP_F_ALL) {
		dl_lent_dma_unmap_all(lent);
		err = 0;
	} else if (!len || !PAGE_ALIGNED(iova) || !PAGE_ALIGNED(len) ||
		   iova + len - 1 < iova) {
		dl_lent_reject(lent, DL_REJ_DMA_RANGE);
		err = -EINVAL;
	} else {
		err = dl_lent_dma_unmap(lent, iova, len);
	}
	if (!err)
		dl_lent_count(lent, DL_LCNT_DMA_UNMAPS);
	dl_lender_close(lent);
out_respond:
	dl_lender_respond(fab, msg, err, NULL, 0);
}

static void dl_lender_on_irq_set(struct dl_fabric *fab,
				 const struct dl_fabric_msg *msg, void *priv)
{
	struct dl_irq_set s;
	struct dl_lent *lent;
	int err = -EINVAL;

	if (!dl_lender_payload(msg, &s, sizeof(s)))
		goto out_respond;
	if (s.reserved) {
		dl_lent_reject(NULL, DL_REJ_MALFORMED);
		goto out_respond;
	}
	lent = dl_lender_open(fab, msg, s.dev_id, DL_ACC_HOLDER, &err);
	if (!lent)
		goto out_respond;
	err = dl_lent_irq_set(lent, fab, msg->peer, le16_to_cpu(s.type),
			      le32_to_cpu(s.count));
	if (err) {
		dl_lent_reject(lent, DL_REJ_IRQ);
		pci_info_ratelimited(lent->pdev,
				     "lender: %u vectors of type %u for host %u: %d\n",
				     le32_to_cpu(s.count), le16_to_cpu(s.type),
				     msg->peer, err);
	} else {
		dl_lent_count(lent, DL_LCNT_IRQ_SETS);
	}
	dl_lender_close(lent);
out_respond:
	dl_lender_respond(fab, msg, err, NULL, 0);
}

static const struct {
	u16 type;
	dl_fabric_msg_fn fn;
	dl_fabric_msg_atomic_fn atomic_fn;
} dl_lender_handlers[] = {
	{ DL_MSG_DEV_LIST, dl_lender_on_dev_list },
	{ DL_MSG_DEV_INFO, dl_lender_on_dev_info },
	{ DL_MSG_DEV_ACQUIRE, dl_lender_on_acquire },
	{ DL_MSG_DEV_RELEASE, dl_lender_on_slow },
	{ DL_MSG_DEV_RESET, dl_lender_on_slow },
	{ DL_MSG_CFG_READ, dl_lender_on_cfg_read },
	{ DL_MSG_CFG_READ_BLOCK, dl_lender_on_cfg_read_block },
	{ DL_MSG_CFG_WRITE, dl_lender_on_cfg_write },
	{ DL_MSG_BAR_READ, dl_lender_on_bar_read },
	/* Device doorbells: in the doorbell interrupt when they can (bar.c). */
	{ DL_MSG_BAR_WRITE, dl_lender_on_bar_write,
	  dl_lender_on_bar_write_atomic },
	{ DL_MSG_DMA_MAP, dl_lender_on_dma_map },
	{ DL_MSG_DMA_UNMAP, dl_lender_on_dma_unmap },
	{ DL_MSG_IRQ_SET, dl_lender_on_irq_set },
};

/**
 * dl_lender_register_handlers() - answer borrowers on a fabric.
 * @fab: the fabric.
 *
 * Return: 0 or -errno (then none is registered).
 */
int dl_lender_register_handlers(struct dl_fabric *fab)
{
	int i, ret;

	for (i = 0; i < ARRAY_SIZE(dl_lender_handlers); i++) {
		if (dl_lender_handlers[i].atomic_fn)
			ret = dl_fabric_register_handler_atomic(fab,
								dl_lender_handlers[i].type,
								dl_lender_handlers[i].fn,
								dl_lender_handlers[i].atomic_fn,
								NULL);
		else
			ret = dl_fabric_register_handler(fab,
							 dl_lender_handlers[i].type,
							 dl_lender_handlers[i].fn,
							 NULL);
		if (ret)
			goto err_unregister;
	}
	return 0;

err_unregister:
	while (--i >= 0)
		dl_fabric_unregister_handler(fab, dl_lender_handlers[i].type);
	return ret;
}

/**
 * dl_lender_unregister_handlers() - stop answering on a fabric.
 * @fab: the fabric.
 *
 * When this returns, no lender handler runs on @fab.
 */
void dl_lender_unregister_handlers(struct dl_fabric *fab)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(dl_lender_handlers); i++)
		dl_fabric_unregister_handler(fab, dl_lender_handlers[i].type);
}
