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
 * reason (debugfs); logs about it are rate-limited. One table row per
 * message type (struct dl_lender_op) says what differs; one skeleton
 * (dl_lender_on_dev_msg()) does the rest for all of them.
 */
#include <linux/delay.h>
#include <linux/io.h>
#include <linux/pci.h>
#include <linux/string.h>
#include <linux/unaligned.h>

#include "../include/dl_dma_rules.h"
#include "../include/dl_mig_rules.h"
#include "internal.h"

/* Who may do what to a device. */
enum dl_access {
	DL_ACC_ANY,		/* list, info, acquire */
	DL_ACC_READ,		/* config reads: any host it is lent to */
	DL_ACC_HOLDER,		/* everything else */
};

/* The longest the receive work waits for a device's locks. */
#define DL_LENT_LOCK_WAIT_MS	100

/*
 * Take the device's locks, unless a reset or a take-back holds them: the
 * receive work serves every peer and must not wait that out (up to a
 * minute for a reset). Other holders are brief, but one that is not (a
 * reset through sysfs, which holds the device lock) is not waited out
 * either: after %DL_LENT_LOCK_WAIT_MS the request is answered busy, as
 * during a reset of ours, and a posted one is dropped as then.
 */
static bool dl_lent_lock_unless_slow(struct dl_lent *lent)
{
	unsigned long deadline = jiffies + msecs_to_jiffies(DL_LENT_LOCK_WAIT_MS);
	struct device *dev = &lent->pdev->dev;

	while (!device_trylock(dev)) {
		if (atomic_read(&lent->slow_holds) ||
		    time_after(jiffies, deadline))
			return false;
		usleep_range(50, 100);
	}
	while (!mutex_trylock(&lent->lock)) {
		if (atomic_read(&lent->slow_holds) ||
		    time_after(jiffies, deadline)) {
			device_unlock(dev);
			return false;
		}
		usleep_range(50, 100);
	}
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
	/*
	 * A host the device is not lent to is told it does not exist; one
	 * that holds it keeps it until it returns it.
	 */
	if (!dl_lent_allows(lent, msg->peer) &&
	    !dl_lent_is_holder(lent, fab, msg->peer)) {
		dl_lent_reject(lent, DL_REJ_NOT_ALLOWED);
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
	/*
	 * Config reads have no side effects; a migration's destination reads
	 * config space before it takes the device over (migrate.c).
	 */
	if (acc == DL_ACC_READ)
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

/* A struct dl_dev_ref's flags must be zero ... */
static bool dl_ref_ok(const struct dl_fabric_msg *msg)
{
	const struct dl_dev_ref *ref = msg->data;

	return !ref->flags;
}

/* ... but DEV_INFO's may ask for the extension. */
static bool dl_info_ref_ok(const struct dl_fabric_msg *msg)
{
	const struct dl_dev_ref *ref = msg->data;

	return !(le32_to_cpu(ref->flags) & ~DL_DEV_REF_F_INFO_EXT);
}

static void dl_lender_on_dev_list(struct dl_fabric *fab,
				  const struct dl_fabric_msg *msg, void *priv)
{
	struct dl_dev_list list = {};
	struct dl_dev_ref ref;
	struct dl_lent *lent;
	unsigned long idx;
	u32 total = 0, count = 0;

	if (msg->len != sizeof(ref) || !dl_ref_ok(msg)) {
		dl_lent_reject(NULL, DL_REJ_MALFORMED);
		dl_lender_respond(fab, msg, -EINVAL, NULL, 0);
		return;
	}
	memcpy(&ref, msg->data, sizeof(ref));
	xa_lock(&dl_lender.devs);
	xa_for_each(&dl_lender.devs, idx, lent) {
		if (!dl_lent_allows(lent, msg->peer))
			continue;
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
	if (pdev->is_virtfn)
		flags |= DL_DEV_F_VF;
	if (lent->grp && !lent->resets_alone)
		flags |= DL_DEV_F_NO_RESET;
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

/*
 * Every message but DEV_LIST names a device, and is served the same way:
 * check the payload, find and lock the device for what the sender may do
 * (dl_lender_open()), serve, unlock, answer. struct dl_lender_op says what
 * differs between message types; dl_lender_on_dev_msg() is the rest.
 */

/* A fixed-size request, copied: the ring is the peer's to rewrite. */
union dl_lender_req {
	struct dl_dev_ref ref;
	struct dl_cfg_access cfg;
	struct dl_cfg_block_req block;
	struct dl_bar_access bar;
	struct dl_dma_unmap unmap;
	struct dl_irq_set irq;
	struct dl_irq_mask irq_mask;
	struct dl_irq_direct irq_direct;
	struct dl_bar_window bar_window;
	struct dl_bar_dma bar_dma;
	struct dl_p2p_dma p2p_dma;
	struct dl_p2p_export p2p_export;
	struct dl_mig_quiesce mig_quiesce;
	struct dl_mig_takeover mig_takeover;
};

union dl_lender_resp {
	struct dl_dev_ref ref;
	struct dl_dev_info info;
	struct dl_dev_info_full full;
	struct dl_cfg_access cfg;
	struct dl_cfg_block block;
	struct dl_bar_access bar;
	struct dl_bar_window bar_window;
};

/**
 * struct dl_lender_call - one message being served.
 * @fab: the fabric it came on.
 * @msg: the message; @msg->data is this host's copy of the payload.
 * @lent: the device it names, locked.
 * @req: the fixed-size payload, copied (variable ones: @msg->data).
 * @resp: the answer's payload, sent when the status is 0.
 * @resp_len: its length; 0 for a status alone.
 */
struct dl_lender_call {
	struct dl_fabric *fab;
	const struct dl_fabric_msg *msg;
	struct dl_lent *lent;
	union dl_lender_req req;
	union dl_lender_resp resp;
	size_t resp_len;
};

/*
 * dl_lender_op.serve: the device's slow work answers (dl_lent_slow_take()),
 * or nobody does (an ACQUIRE that raced its sender's down).
 */
#define DL_LENDER_LATER	1

/**
 * struct dl_lender_op - how the lender serves one type of message that
 *	names a device.
 * @type: the message type.
 * @size: the payload's exact length; 0 if it varies (@payload_ok checks).
 * @acc: who may send it (dl_lender_open()).
 * @posted: the sender expects no answer; a refusal is logged instead
 *	(rate-limited).
 * @payload_ok: further checks of the payload before the device is looked
 *	up (reserved fields, counts); a failure counts as malformed.
 * @serve: the work, on the locked device: 0, -errno, or %DL_LENDER_LATER.
 * @atomic: the handler from the doorbell interrupt, if any (bar.c).
 *
 * Every payload begins with the __le32 dev_id it names.
 */
struct dl_lender_op {
	u16 type;
	u16 size;
	enum dl_access acc;
	bool posted;
	bool (*payload_ok)(const struct dl_fabric_msg *msg);
	int (*serve)(struct dl_lender_call *c);
	dl_fabric_msg_atomic_fn atomic;
};

static int dl_serve_dev_info(struct dl_lender_call *c)
{
	struct pci_dev *pdev = c->lent->pdev;
	struct dl_dev_info_ext *ext = &c->resp.full.ext;

	dl_lender_fill_info(c->lent, &c->resp.info);
	c->resp_len = sizeof(c->resp.info);
	if (!(le32_to_cpu(c->req.ref.flags) & DL_DEV_REF_F_INFO_EXT))
		return 0;
	memset(ext, 0, sizeof(*ext));
	if (pdev->is_virtfn)
		strscpy_pad(ext->pf_name, pci_name(pci_physfn(pdev)),
			    sizeof(ext->pf_name));
	ext->group = cpu_to_le32(dl_lent_group_id(c->lent));
	c->resp_len = sizeof(c->resp.full);
	return 0;
}

static int dl_serve_acquire(struct dl_lender_call *c)
{
	struct dl_fabric_peer_info pinfo;
	struct dl_lent *lent = c->lent;
	u32 peer = c->msg->peer;

	if (lent->state == DL_LENT_FAILED) {
		dl_lent_reject(lent, DL_REJ_BUSY);
		dev_dbg_ratelimited(&lent->pdev->dev,
				    "lender: host %u asked for device %u, whose reset failed\n",
				    peer, lent->dev_id);
		return -EBUSY;
	}
	if (lent->state != DL_LENT_AVAILABLE || lent->unlending) {
		dl_lent_reject(lent, DL_REJ_BUSY);
		dev_dbg_ratelimited(&lent->pdev->dev,
				    "lender: host %u asked for device %u, held by host %u\n",
				    peer, lent->dev_id, lent->borrower);
		return -EBUSY;
	}
	/* A lender it was shown to may still reach its BARs (p2p_remote.c). */
	if (dl_lent_p2p_fence_check(lent)) {
		dev_dbg_ratelimited(&lent->pdev->dev,
				    "lender: host %u asked for device %u, which another lender may still reach\n",
				    peer, lent->dev_id);
		return -EBUSY;
	}
	if (dl_fabric_peer_info(c->fab, peer, &pinfo) || !pinfo.up)
		return -EINVAL;
	/* Never a group split between holders (group.c); until published. */
	if (dl_lent_group_lock(lent, c->fab, peer, pinfo.incarnation)) {
		dl_lent_reject(lent, DL_REJ_GROUP);
		return -EBUSY;
	}
	lent->state = DL_LENT_BORROWED;
	/*
	 * A borrowed VF is assigned, as KVM's and Xen's device assignment
	 * mark theirs: PF drivers (igb, ixgbe, i40e, ...) then refuse to
	 * remove their VFs (sriov_numvfs, unbind) until it is back.
	 */
	if (lent->pdev->is_virtfn)
		pci_set_dev_assigned(lent->pdev);
	lent->borrower = peer;
	lent->borrower_inc = pinfo.incarnation;
	lent->fab = c->fab;
	/*
	 * The peer may have gone down since we read it up: its take-back
	 * (dl_lender_peer_down()) walked the devices before we named it
	 * holder, and nothing else would ever take this one back. Read the
	 * link again only after the holder is visible; the walk reads the
	 * holder only after the link reads down (barriers paired there).
	 */
	smp_mb();
	if (dl_fabric_peer_info(c->fab, peer, &pinfo) || !pinfo.up ||
	    pinfo.incarnation != lent->borrower_inc) {
		dl_lent_slow_mark(lent, DL_LENT_SLOW_RECLAIM);
		dl_lent_slow_queue(lent);
		/*
		 * No answer: the device is held until the slow work takes
		 * it back, and a refusal would let a borrower that comes
		 * back up as the same incarnation settle its lease while it
		 * is held for it (found by the ownership model). Unanswered,
		 * it returns the device later, as after any lost answer.
		 */
		dl_lent_group_unlock(lent);
		return DL_LENDER_LATER;
	}
	dl_lent_holder_publish(lent);
	dl_lent_group_unlock(lent);
	dl_lent_changed_queue(lent);
	dl_lent_count(lent, DL_LCNT_ACQUIRES);
	pci_info_ratelimited(lent->pdev,
			     "lender: device %u borrowed by host %u (%s)\n",
			     lent->dev_id, peer, pinfo.name);
	c->resp.ref = c->req.ref;
	c->resp_len = sizeof(c->resp.ref);
	return 0;
}

/* DEV_RELEASE and DEV_RESET: checked here, done and answered by the slow work. */
static int dl_serve_slow(struct dl_lender_call *c)
{
	/* A reset would restore bus mastering behind the migration's back. */
	if (c->msg->type == DL_MSG_DEV_RESET && c->lent->mig_quiesced)
		return -EBUSY;
	dl_lent_slow_take(c->lent, c->fab, c->msg);
	return DL_LENDER_LATER;
}

static bool dl_mig_quiesce_ok(const struct dl_fabric_msg *msg)
{
	return dl_settle_args_ok(msg->data);
}

/* MIG_QUIESCE: it waits for the device, so the slow work does it. */
static int dl_serve_mig_quiesce(struct dl_lender_call *c)
{
	c->lent->mig_req = c->req.mig_quiesce;
	return dl_serve_slow(c);
}

static int dl_serve_mig_resume(struct dl_lender_call *c)
{
	return dl_lent_mig_resume(c->lent);
}

static int dl_serve_mig_takeover(struct dl_lender_call *c)
{
	int err;

	err = dl_lent_mig_takeover(c->lent, c->fab, c->msg->peer,
				   &c->req.mig_takeover);
	/* Held for a peer that went down: taken back, unanswered (acquire). */
	if (err == -ENOTCONN) {
		dl_lent_slow_mark(c->lent, DL_LENT_SLOW_RECLAIM);
		dl_lent_slow_queue(c->lent);
		return DL_LENDER_LATER;
	}
	if (!err) {
		c->resp.ref.dev_id = c->req.mig_takeover.dev_id;
		c->resp.ref.flags = 0;
		c->resp_len = sizeof(c->resp.ref);
	}
	return err;
}

static int dl_serve_cfg_read(struct dl_lender_call *c)
{
	struct dl_cfg_access *a = &c->req.cfg;
	u32 val;

	if (!dl_cfg_access_ok(c->lent, a))
		return -EINVAL;
	dl_lent_count(c->lent, DL_LCNT_CFG_READS);
	if (dl_lent_cfg_read(c->lent, le16_to_cpu(a->offset), a->size, &val))
		return -EIO;
	c->resp.cfg = *a;
	c->resp.cfg.value = cpu_to_le32(val);
	c->resp_len = sizeof(c->resp.cfg);
	return 0;
}

/*
 * A run of config space in one answer: at open the borrower copies all of
 * it, which dword by dword took a thousand round trips. Each dword is read
 * as a 4-byte DL_MSG_CFG_READ would be (virtual bits included).
 */
static int dl_serve_cfg_read_block(struct dl_lender_call *c)
{
	const struct dl_cfg_block_req *req = &c->req.block;
	struct dl_cfg_block *blk = &c->resp.block;
	unsigned int off = le16_to_cpu(req->offset);
	unsigned int len = le16_to_cpu(req->len);
	unsigned int i;
	u32 val;

	if (off % 4 || len % 4 || !len || len > DL_CFG_BLOCK_MAX ||
	    off + len > c->lent->cfg_size) {
		dl_lent_reject(c->lent, DL_REJ_CFG_RANGE);
		return -EINVAL;
	}
	memset(blk, 0, sizeof(*blk));
	for (i = 0; i < len; i += 4) {
		if (dl_lent_cfg_read(c->lent, off + i, 4, &val))
			return -EIO;
		put_unaligned_le32(val, &blk->data[i]);
	}
	dl_lent_count(c->lent, DL_LCNT_CFG_READS);
	blk->dev_id = req->dev_id;
	blk->offset = req->offset;
	blk->len = req->len;
	c->resp_len = sizeof(*blk);
	return 0;
}

static int dl_serve_cfg_write(struct dl_lender_call *c)
{
	struct dl_cfg_access *a = &c->req.cfg;
	int ret;

	if (!dl_cfg_access_ok(c->lent, a))
		return -EINVAL;
	/* Bus mastering stays off until the migration resumes it. */
	if (c->lent->mig_quiesced)
		return -EBUSY;
	dl_lent_count(c->lent, DL_LCNT_CFG_WRITES);
	ret = dl_lent_cfg_write(c->lent, le16_to_cpu(a->offset), a->size,
				le32_to_cpu(a->value));
	if (ret < 0)
		return -EIO;
	if (ret & DL_CFG_WRITE_FILTERED)
		dl_lent_count(c->lent, DL_LCNT_CFG_FILTERED);
	if (ret & DL_CFG_WRITE_RESET)
		return dl_serve_slow(c);	/* answered once reset */
	return 0;
}

static int dl_serve_bar_read(struct dl_lender_call *c)
{
	struct dl_bar_access *a = &c->req.bar;
	int err;

	err = dl_bar_access_check(c->lent, a);
	if (err)
		return err;
	c->resp.bar = *a;
	c->resp.bar.value = cpu_to_le64(dl_lent_bar_read(c->lent, a));
	c->resp_len = sizeof(c->resp.bar);
	dl_lent_count(c->lent, DL_LCNT_BAR_READS);
	dl_lent_intx_bar_access(c->lent);
	return 0;
}

static int dl_serve_bar_write(struct dl_lender_call *c)
{
	int err;

	err = dl_bar_access_check(c->lent, &c->req.bar);
	if (err)
		return err;
	dl_lent_bar_write(c->lent, &c->req.bar);
	dl_lent_count(c->lent, DL_LCNT_BAR_WRITES);
	dl_lent_intx_bar_access(c->lent);
	return 0;
}

/* A DMA_MAP's count must match its length exactly. */
static bool dl_dma_map_ok(const struct dl_fabric_msg *msg)
{
	const struct dl_dma_map *req = msg->data;
	u32 count;

	if (msg->len < sizeof(*req))
		return false;
	/* msg->data is this host's copy: reading it twice is safe. */
	count = le32_to_cpu(req->count);
	return count &&
	       count <= (msg->len - sizeof(*req)) / sizeof(req->ranges[0]) &&
	       msg->len == sizeof(*req) + count * sizeof(req->ranges[0]);
}

static int dl_serve_dma_map(struct dl_lender_call *c)
{
	const struct dl_dma_map *req = c->msg->data;
	int err;

	err = dl_lent_dma_map(c->lent, c->fab, c->msg->peer, req->ranges,
			      le32_to_cpu(req->count));
	/* Overlap and budget are out-of-range requests too, on the wire. */
	if (err == -EEXIST || err == -ENOSPC)
		err = -EINVAL;
	return err;
}

static int dl_serve_dma_unmap(struct dl_lender_call *c)
{
	const struct dl_dma_unmap *u = &c->req.unmap;
	u32 flags = le32_to_cpu(u->flags);
	u64 iova = le64_to_cpu(u->iova);
	u64 len = le64_to_cpu(u->len);
	int err;

	switch (dl_unmap_check(flags, iova, len)) {
	case DL_UNMAP_ALL:
		dl_lent_unmap_all(c->lent);
		err = 0;
		break;
	case DL_UNMAP_RANGE:
		err = dl_lent_dma_unmap(c->lent, iova, len);
		break;
	case -ERANGE:
		dl_lent_reject(c->lent, DL_REJ_DMA_RANGE);
		return -EINVAL;
	default:
		dl_lent_reject(c->lent, DL_REJ_MALFORMED);
		return -EINVAL;
	}
	if (!err)
		dl_lent_count(c->lent, DL_LCNT_DMA_UNMAPS);
	return err;
}

static bool dl_irq_set_ok(const struct dl_fabric_msg *msg)
{
	const struct dl_irq_set *s = msg->data;
	u16 flags = le16_to_cpu(s->flags);

	if (!flags)
		return true;
	return !(flags & ~DL_IRQ_SET_F_UNMASK_MSG) &&
	       le16_to_cpu(s->type) == DL_IRQ_INTX;
}

static int dl_serve_irq_set(struct dl_lender_call *c)
{
	const struct dl_irq_set *s = &c->req.irq;
	int err;

	err = dl_lent_irq_set(c->lent, c->fab, c->msg->peer,
			      le16_to_cpu(s->type), le32_to_cpu(s->count),
			      le16_to_cpu(s->flags));
	if (err) {
		dl_lent_reject(c->lent, DL_REJ_IRQ);
		pci_info_ratelimited(c->lent->pdev,
				     "lender: %u vectors of type %u for host %u: %d\n",
				     le32_to_cpu(s->count), le16_to_cpu(s->type),
				     c->msg->peer, err);
		return err;
	}
	dl_lent_count(c->lent, DL_LCNT_IRQ_SETS);
	return 0;
}

/* Only INTx is masked by the holder, and it has one vector. */
static bool dl_irq_mask_ok(const struct dl_fabric_msg *msg)
{
	const struct dl_irq_mask *m = msg->data;

	return le16_to_cpu(m->type) == DL_IRQ_INTX && !m->vector &&
	       m->mask <= 1 && !memchr_inv(m->reserved, 0, sizeof(m->reserved));
}

static int dl_serve_irq_mask(struct dl_lender_call *c)
{
	int err;

	err = dl_lent_intx_set_masked(c->lent, c->req.irq_mask.mask);
	if (err)
		dl_lent_reject(c->lent, DL_REJ_IRQ);
	return err;
}

static bool dl_irq_direct_ok(const struct dl_fabric_msg *msg)
{
	const struct dl_irq_direct *d = msg->data;

	return !memchr_inv(d->reserved, 0, sizeof(d->reserved));
}

static int dl_serve_irq_direct(struct dl_lender_call *c)
{
	const struct dl_irq_direct *d = &c->req.irq_direct;
	int err;

	err = dl_lent_irq_direct(c->lent, c->fab, c->msg->peer,
				 le16_to_cpu(d->type), le16_to_cpu(d->vector),
				 le16_to_cpu(d->db_vector));
	/* Not for the backend's or the domain's inability: that is a no. */
	if (err && err != -EOPNOTSUPP)
		dl_lent_reject(c->lent, DL_REJ_IRQ);
	return err;
}

static bool dl_bar_window_ok(const struct dl_fabric_msg *msg)
{
	const struct dl_bar_window *w = msg->data;

	return !memchr_inv(w->reserved, 0, sizeof(w->reserved)) &&
	       !w->token && !w->offset && !w->len;
}

static int dl_serve_bar_window(struct dl_lender_call *c)
{
	const struct dl_bar_window *w = &c->req.bar_window;
	struct dl_bar_window *r = &c->resp.bar_window;
	u64 token, len;
	int err;

	err = dl_lent_bar_window(c->lent, c->fab, c->msg->peer, w->bar,
				 &token, &len);
	if (err == -EINVAL) {
		dl_lent_reject(c->lent, DL_REJ_BAR_RANGE);
		return err;
	}
	/* No window room or a backend that cannot: relayed, not refused. */
	if (err)
		return -EOPNOTSUPP;
	memset(r, 0, sizeof(*r));
	r->dev_id = w->dev_id;
	r->bar = w->bar;
	r->token = cpu_to_le64(token);
	r->offset = 0;
	r->len = cpu_to_le64(len);
	c->resp_len = sizeof(*r);
	return 0;
}

/* A map names where; an unmap names nothing but the BAR. */
static bool dl_bar_dma_ok(const struct dl_fabric_msg *msg)
{
	const struct dl_bar_dma *d = msg->data;

	if (d->flags & ~DL_BAR_DMA_F_MAP || d->reserved)
		return false;
	return (d->flags & DL_BAR_DMA_F_MAP) || !d->iova;
}

static int dl_serve_bar_dma(struct dl_lender_call *c)
{
	const struct dl_bar_dma *d = &c->req.bar_dma;
	int err;

	/* Not in a group's shared domain yet (group.c): the DMA faults. */
	if (c->lent->grp)
		return d->flags & DL_BAR_DMA_F_MAP ? -EOPNOTSUPP : 0;
	err = dl_lent_bar_dma(c->lent, c->fab, c->msg->peer, d->bar,
			      d->flags & DL_BAR_DMA_F_MAP,
			      le64_to_cpu(d->iova));
	/* Not a BAR this host can map there: the DMA faults, as before. */
	if (err == -EOPNOTSUPP || err == -EIO || err == -ENOMEM)
		return err;
	if (err) {
		dl_lent_reject(c->lent, DL_REJ_BAR_DMA);
		return -EINVAL;
	}
	return 0;
}

/* As for BAR DMA; the target names a host. */
static bool dl_p2p_dma_ok(const struct dl_fabric_msg *msg)
{
	const struct dl_p2p_dma *d = msg->data;

	if (d->flags & ~DL_P2P_DMA_F_MAP || d->reserved)
		return false;
	return (d->flags & DL_P2P_DMA_F_MAP) || !d->iova;
}

static int dl_serve_p2p_dma(struct dl_lender_call *c)
{
	const struct dl_p2p_dma *d = &c->req.p2p_dma;
	int err;

	if (c->lent->grp)
		return d->flags & DL_P2P_DMA_F_MAP ? -EOPNOTSUPP : 0;
	/* A target on another lender: its answer first (p2p_remote.c). */
	if (le32_to_cpu(d->target_host) != dl_fabric_host_id(c->fab)) {
		err = dl_lent_p2p_dma_remote(c->lent, c->fab, c->msg, d);
		if (err == 1)
			return DL_LENDER_LATER;
		if (err == -EINVAL)
			dl_lent_reject(c->lent, DL_REJ_P2P_DMA);
		return err;
	}
	err = dl_lent_p2p_dma(c->lent, c->fab, c->msg->peer,
			      le32_to_cpu(d->target_id), d->bar,
			      d->flags & DL_P2P_DMA_F_MAP,
			      le64_to_cpu(d->iova));
	if (err == -EOPNOTSUPP || err == -EIO || err == -ENOMEM)
		return err;
	if (err) {
		dl_lent_reject(c->lent, DL_REJ_P2P_DMA);
		return -EINVAL;
	}
	return 0;
}

static bool dl_p2p_export_ok(const struct dl_fabric_msg *msg)
{
	const struct dl_p2p_export *e = msg->data;

	return !e->reserved[0] && !e->reserved[1] && !e->reserved[2] &&
	       !e->reserved2;
}

static int dl_serve_p2p_export(struct dl_lender_call *c)
{
	const struct dl_p2p_export *e = &c->req.p2p_export;
	int err;

	err = dl_lent_p2p_export(c->lent, c->fab, c->msg->peer, e->bar,
				 le32_to_cpu(e->to_host));
	if (err == -EINVAL)
		dl_lent_reject(c->lent, DL_REJ_P2P_DMA);
	return err;
}

static const struct dl_lender_op dl_lender_ops[] = {
	{ DL_MSG_DEV_INFO, sizeof(struct dl_dev_ref), DL_ACC_ANY, false,
	  dl_info_ref_ok, dl_serve_dev_info },
	{ DL_MSG_DEV_ACQUIRE, sizeof(struct dl_dev_ref), DL_ACC_ANY, false,
	  dl_ref_ok, dl_serve_acquire },
	{ DL_MSG_DEV_RELEASE, sizeof(struct dl_dev_ref), DL_ACC_HOLDER, false,
	  dl_ref_ok, dl_serve_slow },
	{ DL_MSG_DEV_RESET, sizeof(struct dl_dev_ref), DL_ACC_HOLDER, false,
	  dl_ref_ok, dl_serve_slow },
	{ DL_MSG_CFG_READ, sizeof(struct dl_cfg_access), DL_ACC_READ, false,
	  NULL, dl_serve_cfg_read },
	{ DL_MSG_CFG_READ_BLOCK, sizeof(struct dl_cfg_block_req), DL_ACC_READ,
	  false, NULL, dl_serve_cfg_read_block },
	{ DL_MSG_CFG_WRITE, sizeof(struct dl_cfg_access), DL_ACC_HOLDER, false,
	  NULL, dl_serve_cfg_write },
	{ DL_MSG_BAR_READ, sizeof(struct dl_bar_access), DL_ACC_HOLDER, false,
	  NULL, dl_serve_bar_read },
	/* Device doorbells: in the doorbell interrupt when they can (bar.c). */
	{ DL_MSG_BAR_WRITE, sizeof(struct dl_bar_access), DL_ACC_HOLDER, true,
	  NULL, dl_serve_bar_write, dl_lender_on_bar_write_atomic },
	{ DL_MSG_DMA_MAP, 0, DL_ACC_HOLDER, false,
	  dl_dma_map_ok, dl_serve_dma_map },
	{ DL_MSG_DMA_UNMAP, sizeof(struct dl_dma_unmap), DL_ACC_HOLDER, false,
	  NULL, dl_serve_dma_unmap },
	{ DL_MSG_IRQ_SET, sizeof(struct dl_irq_set), DL_ACC_HOLDER, false,
	  dl_irq_set_ok, dl_serve_irq_set },
	{ DL_MSG_IRQ_MASK, sizeof(struct dl_irq_mask), DL_ACC_HOLDER, true,
	  dl_irq_mask_ok, dl_serve_irq_mask },
	{ DL_MSG_IRQ_DIRECT, sizeof(struct dl_irq_direct), DL_ACC_HOLDER,
	  false, dl_irq_direct_ok, dl_serve_irq_direct },
	{ DL_MSG_BAR_WINDOW, sizeof(struct dl_bar_window), DL_ACC_HOLDER,
	  false, dl_bar_window_ok, dl_serve_bar_window },
	{ DL_MSG_BAR_DMA, sizeof(struct dl_bar_dma), DL_ACC_HOLDER,
	  false, dl_bar_dma_ok, dl_serve_bar_dma },
	{ DL_MSG_P2P_DMA, sizeof(struct dl_p2p_dma), DL_ACC_HOLDER,
	  false, dl_p2p_dma_ok, dl_serve_p2p_dma },
	{ DL_MSG_P2P_EXPORT, sizeof(struct dl_p2p_export), DL_ACC_HOLDER,
	  false, dl_p2p_export_ok, dl_serve_p2p_export },
	{ DL_MSG_MIG_QUIESCE, sizeof(struct dl_mig_quiesce), DL_ACC_HOLDER,
	  false, dl_mig_quiesce_ok, dl_serve_mig_quiesce },
	{ DL_MSG_MIG_RESUME, sizeof(struct dl_dev_ref), DL_ACC_HOLDER, false,
	  dl_ref_ok, dl_serve_mig_resume },
	/* From a host that holds nothing yet: dl_lent_mig_takeover() checks. */
	{ DL_MSG_MIG_TAKEOVER, sizeof(struct dl_mig_takeover), DL_ACC_ANY,
	  false, NULL, dl_serve_mig_takeover },
};

static const struct dl_lender_op *dl_lender_op_find(u16 type)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(dl_lender_ops); i++)
		if (dl_lender_ops[i].type == type)
			return &dl_lender_ops[i];
	return NULL;
}

/* Every message type that names a device (struct dl_lender_op). */
static void dl_lender_on_dev_msg(struct dl_fabric *fab,
				 const struct dl_fabric_msg *msg, void *priv)
{
	const struct dl_lender_op *op = dl_lender_op_find(msg->type);
	struct dl_lender_call c = { .fab = fab, .msg = msg };
	int err = -EINVAL;

	/* Every payload starts with the dev_id it names. */
	BUILD_BUG_ON(offsetof(struct dl_dev_ref, dev_id) ||
		     offsetof(struct dl_cfg_access, dev_id) ||
		     offsetof(struct dl_cfg_block_req, dev_id) ||
		     offsetof(struct dl_bar_access, dev_id) ||
		     offsetof(struct dl_dma_map, dev_id) ||
		     offsetof(struct dl_dma_unmap, dev_id) ||
		     offsetof(struct dl_irq_set, dev_id) ||
		     offsetof(struct dl_irq_mask, dev_id) ||
		     offsetof(struct dl_irq_direct, dev_id) ||
		     offsetof(struct dl_bar_window, dev_id) ||
		     offsetof(struct dl_bar_dma, dev_id) ||
		     offsetof(struct dl_p2p_dma, dev_id) ||
		     offsetof(struct dl_p2p_export, dev_id) ||
		     offsetof(struct dl_mig_quiesce, dev_id) ||
		     offsetof(struct dl_mig_takeover, dev_id));

	if (WARN_ON_ONCE(!op))
		goto out_respond;
	if ((op->size && msg->len != op->size) ||
	    (op->payload_ok && !op->payload_ok(msg))) {
		dl_lent_reject(NULL, DL_REJ_MALFORMED);
		goto out_respond;
	}
	if (op->size)
		memcpy(&c.req, msg->data, op->size);
	c.lent = dl_lender_open(fab, msg, get_unaligned((__le32 *)msg->data),
				op->acc, &err);
	if (!c.lent)
		goto out_respond;
	err = op->serve(&c);
	dl_lender_close(c.lent);
	if (err == DL_LENDER_LATER)
		return;
out_respond:
	if (err && op && op->posted)
		dev_dbg_ratelimited(dl_fabric_device(fab),
				    "lender: message %u from host %u dropped: %d\n",
				    msg->type, msg->peer, err);
	/* Posted ones too, if the peer asked for an answer anyway. */
	dl_lender_respond(fab, msg, err, &c.resp, c.resp_len);
}

/**
 * dl_lender_register_handlers() - answer borrowers on a fabric.
 * @fab: the fabric.
 *
 * Return: 0 or -errno (then none is registered).
 */
int dl_lender_register_handlers(struct dl_fabric *fab)
{
	const struct dl_lender_op *op;
	int i, ret;

	ret = dl_fabric_register_handler(fab, DL_MSG_DEV_LIST,
					 dl_lender_on_dev_list, NULL);
	if (ret)
		return ret;
	for (i = 0; i < ARRAY_SIZE(dl_lender_ops); i++) {
		op = &dl_lender_ops[i];
		if (op->atomic)
			ret = dl_fabric_register_handler_atomic(fab, op->type,
								dl_lender_on_dev_msg,
								op->atomic,
								NULL);
		else
			ret = dl_fabric_register_handler(fab, op->type,
							 dl_lender_on_dev_msg,
							 NULL);
		if (ret)
			goto err_unregister;
	}
	return 0;

err_unregister:
	while (--i >= 0)
		dl_fabric_unregister_handler(fab, dl_lender_ops[i].type);
	dl_fabric_unregister_handler(fab, DL_MSG_DEV_LIST);
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

	for (i = 0; i < ARRAY_SIZE(dl_lender_ops); i++)
		dl_fabric_unregister_handler(fab, dl_lender_ops[i].type);
	dl_fabric_unregister_handler(fab, DL_MSG_DEV_LIST);
}
