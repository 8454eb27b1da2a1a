// SPDX-License-Identifier: GPL-2.0
/*
 * Interrupts of an mdev: VFIO's SET_IRQS on one side, the lender's
 * DL_MSG_IRQ_SET and DL_MSG_IRQ_FIRE on the other.
 *
 * INTx, MSI and MSI-X: SET_IRQS with eventfds stores one eventfd per
 * vector and asks the lender to take that many vectors of the device
 * (count 0 gives them back). The indices are NORESIZE, so QEMU disables
 * and re-enables an index to change its vector count, and the lender
 * always sees a whole count. DL_MSG_IRQ_FIRE from the lender signals the
 * vector's eventfd (KVM's irqfd then injects it into the guest).
 *
 * INTx is level triggered and AUTOMASKED, as vfio-pci's: the lender masks
 * it at the device when it fires, and VFIO's unmask ends it (SET_IRQS
 * UNMASK, by a VMM at a BAR access, or from an unmask eventfd, which KVM's
 * resampler signals at the guest's EOI); each mask and unmask is a posted
 * DL_MSG_IRQ_MASK, in ring order after the BAR accesses before it. An
 * unmask that finds the lender's ring full (a stalled lender) is owed and
 * sent again until it goes out, since INTx stays masked at the device
 * until it arrives; a mask asked for later cancels it. A lender that does
 * not know DL_IRQ_SET_F_UNMASK_MSG ends INTx at the next BAR access
 * itself, and then mask and unmask are no-ops here.
 *
 * ERR (count 1) is signalled when the mdev loses its remote device, REQ
 * (count 1) from VFIO's request op.
 *
 * Direct MSI-X (module parameter direct_irq): once the lender has taken
 * the vectors, each gets a doorbell vector of this host's adapter
 * (dl_fabric_db_claim(), shared by every mdev on the fabric) and a
 * DL_MSG_IRQ_DIRECT asks the lender to have the device's own message
 * write ring it; the doorbell's callback signals the vector's eventfd
 * from the doorbell interrupt. A vector stays relayed when no doorbell
 * vector is free or the lender says no (its backend or IOMMU cannot, or
 * it does not know the message); both paths signal the same eventfd. The
 * doorbell vectors are given back after the lender released the device's
 * vectors, so a late doorbell finds none or a spurious one at worst. A
 * doorbell does not say who rang it: any peer can ring it, which is a
 * spurious interrupt for the guest (docs/threat-model.md).
 *
 * An eventfd is only signalled under irq.lock, and a replaced or released
 * eventfd is put only after it has left the table under that lock, so a
 * fire racing with SET_IRQS never touches a freed eventfd
 * (CVE-2024-26812).
 */
#include <linux/eventfd.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/vfio.h>

#include "internal.h"

static const u16 dl_irq_wire_type[DL_B_NR_IRQ_TYPES] = {
	[VFIO_PCI_INTX_IRQ_INDEX] = DL_IRQ_INTX,
	[VFIO_PCI_MSI_IRQ_INDEX] = DL_IRQ_MSI,
	[VFIO_PCI_MSIX_IRQ_INDEX] = DL_IRQ_MSIX,
};

/**
 * dl_irq_info() - what VFIO_DEVICE_GET_IRQ_INFO says about an index.
 * @v: the mdev, open.
 * @info: @info->index in, flags and count out.
 *
 * Return: 0 or -EINVAL.
 */
int dl_irq_info(struct dl_vdev *v, struct vfio_irq_info *info)
{
	info->flags = VFIO_IRQ_INFO_EVENTFD;
	info->count = 0;
	switch (info->index) {
	case VFIO_PCI_INTX_IRQ_INDEX:
		if (v->cfg.vconfig && v->cfg.vconfig[PCI_INTERRUPT_PIN])
			info->count = 1;
		info->flags |= VFIO_IRQ_INFO_MASKABLE |
			       VFIO_IRQ_INFO_AUTOMASKED;
		break;
	case VFIO_PCI_MSI_IRQ_INDEX:
		if (dl_config_cap_pos(v, PCI_CAP_ID_MSI))
			info->count = v->info.msi_count;
		info->flags |= VFIO_IRQ_INFO_NORESIZE;
		break;
	case VFIO_PCI_MSIX_IRQ_INDEX:
		if (dl_config_cap_pos(v, PCI_CAP_ID_MSIX))
			info->count = v->info.msix_count;
		info->flags |= VFIO_IRQ_INFO_NORESIZE;
		break;
	case VFIO_PCI_ERR_IRQ_INDEX:
	case VFIO_PCI_REQ_IRQ_INDEX:
		info->count = 1;
		break;
	default:
		return -EINVAL;
	}
	return 0;
}

static int dl_irq_lender_set(struct dl_vdev *v, unsigned int index, u32 count)
{
	struct dl_irq_set set = {
		.dev_id = cpu_to_le32(v->sess.dev_id),
		.type = cpu_to_le16(dl_irq_wire_type[index]),
		.count = cpu_to_le32(count),
	};
	bool intx = index == VFIO_PCI_INTX_IRQ_INDEX && count;
	int ret;

	lockdep_assert_held(&v->lock);

	/* Its migration's source holds it: set up after the takeover. */
	if (dl_session_incoming(v))
		return 0;
	if (count) {
		ret = dl_session_borrow(v);
		if (ret)
			return ret;
	} else if (READ_ONCE(v->sess.state) != DL_VDEV_BORROWED) {
		return 0;
	}
	if (intx)
		set.flags = cpu_to_le16(DL_IRQ_SET_F_UNMASK_MSG);
	ret = dl_session_request(v, DL_MSG_IRQ_SET, &set, sizeof(set), NULL,
				 0);
	if (intx) {
		v->irq.intx_unmask_msg = !ret;
		if (ret == -EINVAL) {
			/* A lender without the flag: it ends INTx itself. */
			set.flags = 0;
			ret = dl_session_request(v, DL_MSG_IRQ_SET, &set,
						 sizeof(set), NULL, 0);
		}
	}
	if (ret)
		dev_err_ratelimited(dl_vdev_dev(v),
				    "the lender refused %u vectors of type %u: %d\n",
				    count, index, ret);
	return ret;
}

/* INTx goes away: an owed unmask is never sent. Might sleep. */
static void dl_intx_forget_unmask(struct dl_vdev *v)
{
	mutex_lock(&v->irq.intx_mask_lock);
	WRITE_ONCE(v->irq.intx_unmask_owed, false);
	mutex_unlock(&v->irq.intx_mask_lock);
	/* Also waits for a run that re-queues itself. */
	cancel_delayed_work_sync(&v->irq.intx_retry);
}

/*
 * Vector @vector of @index fired: its eventfd is signalled, or, while the
 * guest is stopped for a migration, it is noted for later (migrate.c).
 * v->irq.lock held.
 */
static void dl_irq_signal_vec(struct dl_vdev *v, unsigned int index,
			      u32 vector)
{
	struct dl_irq_ctx *ctx = &v->irq.irqs[index];

	if (vector >= ctx->count)
		return;
	if (v->irq.latched) {
		if (vector < DL_MIG_PENDING_VECS)
			set_bit(vector, v->irq.pending[index]);
		return;
	}
	if (ctx->trig[vector])
		eventfd_signal(ctx->trig[vector]);
}

/*
 * A doorbell of a direct vector (hard interrupt, under the fabric's
 * doorbell lock): signal the vector's eventfd, as a relayed fire does.
 */
static void dl_irq_direct_db(struct dl_fabric *fab, unsigned int vector,
			     void *priv)
{
	struct dl_irq_direct_vec *dv = priv;
	struct dl_vdev *v = dv->v;

	spin_lock(&v->irq.lock);
	dl_irq_signal_vec(v, VFIO_PCI_MSIX_IRQ_INDEX, dv->index);
	spin_unlock(&v->irq.lock);
	atomic64_inc(&v->irq.direct_fires);
}

/* Asks the lender to make MSI-X vector @dv->index ring @dv->db_vector. */
static int dl_irq_direct_ask(struct dl_vdev *v, struct dl_irq_direct_vec *dv)
{
	struct dl_irq_direct d = {
		.dev_id = cpu_to_le32(v->sess.dev_id),
		.type = cpu_to_le16(DL_IRQ_MSIX),
		.vector = cpu_to_le16(dv->index),
		.db_vector = cpu_to_le16(dv->db_vector),
	};

	return dl_session_request(v, DL_MSG_IRQ_DIRECT, &d, sizeof(d), NULL,
				  0);
}

/*
 * MSI-X was enabled with @nvec vectors, all relayed: make as many direct
 * as doorbell vectors and the lender allow. Whatever fails stays relayed.
 */
static void dl_irq_direct_setup(struct dl_vdev *v, struct dl_irq_ctx *ctx,
				u32 nvec)
{
	struct dl_fabric *fab = v->b->fab;
	struct dl_irq_direct_vec *dv;
	u32 i;
	int ret;

	lockdep_assert_held(&v->lock);

	dv = kcalloc(nvec, sizeof(*dv), GFP_KERNEL_ACCOUNT);
	if (!dv)
		return;
	ctx->direct = dv;
	for (i = 0; i < nvec; i++) {
		dv[i].v = v;
		dv[i].index = i;
		dv[i].db_vector = -1;
	}
	for (i = 0; i < nvec; i++) {
		ret = dl_fabric_db_claim(fab, dl_irq_direct_db, &dv[i]);
		if (ret < 0)
			break;
		dv[i].db_vector = ret;
		ret = dl_irq_direct_ask(v, &dv[i]);
		if (ret) {
			dl_fabric_db_unregister(fab, dv[i].db_vector);
			dv[i].db_vector = -1;
			dev_dbg_ratelimited(dl_vdev_dev(v),
					    "MSI-X vector %u stays relayed: the lender said %d\n",
					    i, ret);
			break;
		}
		WRITE_ONCE(ctx->ndirect, ctx->ndirect + 1);
	}
	WRITE_ONCE(v->irq.direct_fallbacks,
		   v->irq.direct_fallbacks + nvec - ctx->ndirect);
}

/*
 * The lender let the vectors go (or is gone): give the doorbell vectors
 * back. Their callbacks are not running once this returns.
 */
static void dl_irq_direct_release(struct dl_vdev *v, struct dl_irq_ctx *ctx)
{
	struct dl_irq_direct_vec *dv = ctx->direct;
	u32 i;

	lockdep_assert_held(&v->lock);

	if (!dv)
		return;
	for (i = 0; i < ctx->count; i++)
		if (dv[i].db_vector >= 0)
			dl_fabric_db_unregister(v->b->fab, dv[i].db_vector);
	ctx->direct = NULL;
	WRITE_ONCE(ctx->ndirect, 0);
	kfree(dv);
}

/* Disables an index: the lender lets its vectors go, the eventfds go. */
static void dl_irq_disable(struct dl_vdev *v, unsigned int index)
{
	struct dl_irq_ctx *ctx = &v->irq.irqs[index];
	struct eventfd_ctx **trig;
	u32 i, count;

	lockdep_assert_held(&v->lock);

	if (index == VFIO_PCI_INTX_IRQ_INDEX) {
		/* No unmask is sent once this returns. */
		vfio_virqfd_disable(&v->irq.intx_unmask);
		dl_intx_forget_unmask(v);
		v->irq.intx_unmask_msg = false;
	}
	if (ctx->lender_count) {
		dl_irq_lender_set(v, index, 0);
		ctx->lender_count = 0;
	}
	dl_irq_direct_release(v, ctx);
	spin_lock_irq(&v->irq.lock);
	trig = ctx->trig;
	count = ctx->count;
	ctx->trig = NULL;
	ctx->count = 0;
	spin_unlock_irq(&v->irq.lock);
	for (i = 0; i < count; i++)
		if (trig[i])
			eventfd_ctx_put(trig[i]);
	kfree(trig);
}

/* Enables an index with @nvec vectors, none with an eventfd yet. */
static int dl_irq_enable(struct dl_vdev *v, unsigned int index, u32 nvec)
{
	struct dl_irq_ctx *ctx = &v->irq.irqs[index];
	struct eventfd_ctx **trig;
	int ret;

	lockdep_assert_held(&v->lock);

	trig = kcalloc(nvec, sizeof(*trig), GFP_KERNEL_ACCOUNT);
	if (!trig)
		return -ENOMEM;
	ret = dl_irq_lender_set(v, index, nvec);
	if (ret) {
		kfree(trig);
		return ret;
	}
	spin_lock_irq(&v->irq.lock);
	ctx->trig = trig;
	ctx->count = nvec;
	spin_unlock_irq(&v->irq.lock);
	ctx->lender_count = nvec;
	if (index == VFIO_PCI_MSIX_IRQ_INDEX && READ_ONCE(dl_direct_irq) &&
	    !dl_session_incoming(v))
		dl_irq_direct_setup(v, ctx, nvec);
	return 0;
}

/* Replaces the eventfd in *@slot; fd -1 clears it. */
static int dl_irq_set_eventfd(struct dl_vdev *v, struct eventfd_ctx **slot,
			      s32 fd)
{
	struct eventfd_ctx *new = NULL, *old;

	if (fd >= 0) {
		new = eventfd_ctx_fdget(fd);
		if (IS_ERR(new))
			return PTR_ERR(new);
	}
	spin_lock_irq(&v->irq.lock);
	old = *slot;
	*slot = new;
	spin_unlock_irq(&v->irq.lock);
	if (old)
		eventfd_ctx_put(old);
	return 0;
}

static void dl_irq_signal_slot(struct dl_vdev *v, struct eventfd_ctx **slot)
{
	unsigned long flags;

	spin_lock_irqsave(&v->irq.lock, flags);
	if (*slot)
		eventfd_signal(*slot);
	spin_unlock_irqrestore(&v->irq.lock, flags);
}

/* SET_IRQS ACTION_TRIGGER on INTx, MSI or MSI-X. */
static int dl_irq_set_vectors(struct dl_vdev *v, struct vfio_irq_set *hdr,
			      void *data)
{
	struct dl_irq_ctx *ctx = &v->irq.irqs[hdr->index];
	u32 i, end = hdr->start + hdr->count;
	s32 *fds = data;
	u8 *bools = data;
	int ret;

	if (hdr->flags & VFIO_IRQ_SET_DATA_NONE && !hdr->count) {
		dl_irq_disable(v, hdr->index);
		return 0;
	}
	if (!hdr->count)
		return 0;	/* no data: nothing to do */
	if (!(hdr->flags & VFIO_IRQ_SET_DATA_EVENTFD)) {
		/* Loopback test of the eventfds. */
		if (end > ctx->count)
			return -EINVAL;
		for (i = hdr->start; i < end; i++)
			if (hdr->flags & VFIO_IRQ_SET_DATA_NONE ||
			    bools[i - hdr->start])
				dl_irq_signal_slot(v, &ctx->trig[i]);
		return 0;
	}

	if (!ctx->count) {
		/*
		 * One interrupt type at a time, as vfio-pci: the lender gives
		 * up the vectors of one type to take those of another, so an
		 * enabled MSI-X would go on looking enabled here but be dead.
		 */
		for (i = 0; i < DL_B_NR_IRQ_TYPES; i++)
			if (i != hdr->index && v->irq.irqs[i].count)
				return -EINVAL;
		ret = dl_irq_enable(v, hdr->index, end);
		if (ret)
			return ret;
	} else if (end > ctx->count) {
		return -EINVAL;	/* NORESIZE */
	}
	for (i = hdr->start; i < end; i++) {
		ret = dl_irq_set_eventfd(v, &ctx->trig[i],
					 fds[i - hdr->start]);
		if (ret) {
			dl_irq_disable(v, hdr->index);
			return ret;
		}
	}
	return 0;
}

static void dl_intx_mask_msg(struct dl_vdev *v, bool mask,
			     struct dl_irq_mask *m)
{
	*m = (struct dl_irq_mask){
		.dev_id = cpu_to_le32(READ_ONCE(v->sess.dev_id)),
		.type = cpu_to_le16(DL_IRQ_INTX),
		.mask = mask,
	};
}

/* Masks or unmasks INTx at the lender; may sleep while its ring is full. */
static int dl_intx_send_mask(struct dl_vdev *v, bool mask)
{
	struct dl_irq_mask m;

	dl_intx_mask_msg(v, mask, &m);
	return dl_fabric_send(v->b->fab, READ_ONCE(v->sess.host), DL_MSG_IRQ_MASK,
			      &m, sizeof(m));
}

/* Tests: this unmask is to find the ring full (fault_intx_unmask_every). */
static bool dl_intx_unmask_fault(struct dl_vdev *v)
{
	unsigned int every = READ_ONCE(dl_fault_intx_unmask_every);

	return every && !(atomic_inc_return(&v->irq.intx_fault_seq) % every);
}

/*
 * Sends an unmask; one that found the ring full for DL_TX_FULL_WAIT_MS
 * (or @fault says so) is owed to @v->irq.intx_retry. Any other failure means
 * the peer is gone, and the device with it.
 */
static void dl_intx_unmask_locked(struct dl_vdev *v, bool fault)
{
	int ret;

	lockdep_assert_held(&v->irq.intx_mask_lock);

	ret = fault ? -EAGAIN : dl_intx_send_mask(v, false);
	WRITE_ONCE(v->irq.intx_unmask_owed, ret == -EAGAIN);
	if (ret == -EAGAIN)
		mod_delayed_work(system_wq, &v->irq.intx_retry,
				 msecs_to_jiffies(DL_INTX_RETRY_MS));
	else if (ret)
		dev_dbg_ratelimited(dl_vdev_dev(v),
				    "INTx unmask not sent: %d\n", ret);
}

/* Sends an INTx unmask the lender's full ring refused (&dl_vdev_irq.intx_retry). */
static void dl_intx_retry_work(struct work_struct *work)
{
	struct dl_vdev *v = container_of(to_delayed_work(work), struct dl_vdev,
					 irq.intx_retry);

	mutex_lock(&v->irq.intx_mask_lock);
	if (v->irq.intx_unmask_owed) {
		WRITE_ONCE(v->irq.intx_unmask_retries, v->irq.intx_unmask_retries + 1);
		dl_intx_unmask_locked(v, false);
	}
	mutex_unlock(&v->irq.intx_mask_lock);
}

/*
 * The unmask eventfd was signalled (vfio_virqfd, in the eventfd's wake-up,
 * which must not sleep): unmask from here when the ring has room and no
 * unmask is owed (it must go first), else from dl_intx_unmask_thread().
 * Neither takes @v->lock, which is held while the virqfd is torn down
 * (vfio_virqfd_disable() waits for them).
 */
static int dl_intx_unmask_handler(void *opaque, void *unused)
{
	struct dl_vdev *v = opaque;
	struct dl_irq_mask m;

	if (dl_intx_unmask_fault(v)) {
		WRITE_ONCE(v->irq.intx_fault, true);
		return 1;
	}
	if (READ_ONCE(v->irq.intx_unmask_owed))
		return 1;
	dl_intx_mask_msg(v, false, &m);
	return dl_fabric_send_atomic(v->b->fab, READ_ONCE(v->sess.host),
				     DL_MSG_IRQ_MASK, &m, sizeof(m)) == -EAGAIN;
}

static void dl_intx_unmask_thread(void *opaque, void *unused)
{
	struct dl_vdev *v = opaque;

	mutex_lock(&v->irq.intx_mask_lock);
	dl_intx_unmask_locked(v, xchg(&v->irq.intx_fault, false));
	mutex_unlock(&v->irq.intx_mask_lock);
}

/*
 * SET_IRQS ACTION_MASK and ACTION_UNMASK on INTx, after vfio-pci's
 * vfio_pci_set_intx_mask() and vfio_pci_set_intx_unmask().
 */
static int dl_irq_set_intx_mask(struct dl_vdev *v, struct vfio_irq_set *hdr,
				void *data)
{
	bool mask = (hdr->flags & VFIO_IRQ_SET_ACTION_TYPE_MASK) ==
		    VFIO_IRQ_SET_ACTION_MASK;
	int ret = 0;
	s32 fd;

	if (!v->irq.irqs[VFIO_PCI_INTX_IRQ_INDEX].count || hdr->start ||
	    hdr->count != 1)
		return -EINVAL;
	if (hdr->flags & VFIO_IRQ_SET_DATA_EVENTFD) {
		if (mask)
			return -ENOTTY;	/* as vfio-pci */
		fd = *(s32 *)data;
		if (fd < 0) {
			vfio_virqfd_disable(&v->irq.intx_unmask);
			dl_intx_forget_unmask(v);
			return 0;
		}
		if (!v->irq.intx_unmask_msg)
			return 0;	/* the lender ends INTx itself */
		return vfio_virqfd_enable(v, dl_intx_unmask_handler,
					  dl_intx_unmask_thread, NULL,
					  &v->irq.intx_unmask, fd);
	}
	if (hdr->flags & VFIO_IRQ_SET_DATA_BOOL && !*(u8 *)data)
		return 0;
	if (!v->irq.intx_unmask_msg)
		return 0;
	mutex_lock(&v->irq.intx_mask_lock);
	if (mask) {
		/* Later than an owed unmask: the device stays masked. */
		WRITE_ONCE(v->irq.intx_unmask_owed, false);
		ret = dl_intx_send_mask(v, true);
	} else {
		dl_intx_unmask_locked(v, false);
	}
	mutex_unlock(&v->irq.intx_mask_lock);
	return ret;
}

/* SET_IRQS ACTION_TRIGGER on ERR or REQ. */
static int dl_irq_set_notifier(struct dl_vdev *v, struct eventfd_ctx **slot,
			       struct vfio_irq_set *hdr, void *data)
{
	if (!hdr->count && !(hdr->flags & VFIO_IRQ_SET_DATA_NONE))
		return 0;	/* no data: nothing to do */
	if (hdr->flags & VFIO_IRQ_SET_DATA_EVENTFD)
		return dl_irq_set_eventfd(v, slot, *(s32 *)data);
	if (hdr->flags & VFIO_IRQ_SET_DATA_NONE) {
		if (!hdr->count)
			return dl_irq_set_eventfd(v, slot, -1);
		dl_irq_signal_slot(v, slot);
		return 0;
	}
	if (*(u8 *)data)
		dl_irq_signal_slot(v, slot);
	return 0;
}

/**
 * dl_irq_set() - VFIO_DEVICE_SET_IRQS, validated by
 *	vfio_set_irqs_validate_and_prepare().
 * @v: the mdev, open; caller holds v->lock.
 * @hdr: the request.
 * @data: its data (eventfds or bools), or NULL.
 *
 * Return: 0 or -errno.
 */
int dl_irq_set(struct dl_vdev *v, struct vfio_irq_set *hdr, void *data)
{
	u32 action = hdr->flags & VFIO_IRQ_SET_ACTION_TYPE_MASK;

	lockdep_assert_held(&v->lock);

	switch (hdr->index) {
	case VFIO_PCI_INTX_IRQ_INDEX:
		if (action == VFIO_IRQ_SET_ACTION_MASK ||
		    action == VFIO_IRQ_SET_ACTION_UNMASK)
			return dl_irq_set_intx_mask(v, hdr, data);
		fallthrough;
	case VFIO_PCI_MSI_IRQ_INDEX:
	case VFIO_PCI_MSIX_IRQ_INDEX:
		if (action != VFIO_IRQ_SET_ACTION_TRIGGER)
			return -EINVAL;
		return dl_irq_set_vectors(v, hdr, data);
	case VFIO_PCI_ERR_IRQ_INDEX:
		if (action != VFIO_IRQ_SET_ACTION_TRIGGER)
			return -EINVAL;
		return dl_irq_set_notifier(v, &v->irq.err_trigger, hdr, data);
	case VFIO_PCI_REQ_IRQ_INDEX:
		if (action != VFIO_IRQ_SET_ACTION_TRIGGER)
			return -EINVAL;
		return dl_irq_set_notifier(v, &v->irq.req_trigger, hdr, data);
	}
	return -EINVAL;
}

/**
 * dl_irq_release_all() - at close: the lender lets every vector go; every
 *	eventfd is released.
 * @v: the mdev; caller holds v->lock.
 */
void dl_irq_release_all(struct dl_vdev *v)
{
	unsigned int i;

	lockdep_assert_held(&v->lock);

	for (i = 0; i < DL_B_NR_IRQ_TYPES; i++)
		dl_irq_disable(v, i);
	dl_irq_set_eventfd(v, &v->irq.err_trigger, -1);
	dl_irq_set_eventfd(v, &v->irq.req_trigger, -1);
}

/**
 * dl_irq_signal_err() - signal the ERR eventfd, if any.
 * @v: the mdev.
 */
void dl_irq_signal_err(struct dl_vdev *v)
{
	dl_irq_signal_slot(v, &v->irq.err_trigger);
}

/**
 * dl_irq_signal_req() - signal the REQ eventfd, if any.
 * @v: the mdev.
 */
void dl_irq_signal_req(struct dl_vdev *v)
{
	dl_irq_signal_slot(v, &v->irq.req_trigger);
}

/**
 * dl_irq_signal_lost() - tell the user the remote device is gone: the REQ
 *	eventfd if the user registered one, else ERR.
 * @v: the mdev.
 *
 * QEMU stops the whole VM when ERR fires; on REQ it asks the guest to let
 * the device go (a hot-unplug), and the guest runs on without it, its I/O
 * to the device failing meanwhile. So a lost device is a REQ where the user
 * listens for one, as vfio-pci does when its device is going away.
 */
void dl_irq_signal_lost(struct dl_vdev *v)
{
	struct eventfd_ctx *trigger;
	unsigned long flags;

	spin_lock_irqsave(&v->irq.lock, flags);
	trigger = v->irq.req_trigger ?: v->irq.err_trigger;
	if (trigger)
		eventfd_signal(trigger);
	spin_unlock_irqrestore(&v->irq.lock, flags);
}

/**
 * dl_irq_fire() - handler of %DL_MSG_IRQ_FIRE: signal that vector's
 *	eventfd of the mdev that holds the device.
 * @fab: the fabric.
 * @msg: the message.
 * @priv: the borrower.
 */
void dl_irq_fire(struct dl_fabric *fab, const struct dl_fabric_msg *msg,
		 void *priv)
{
	const struct dl_irq_fire *f = msg->data;
	struct dl_borrower *b = priv;
	unsigned int index, vector;
	unsigned long flags;
	struct dl_vdev *v;
	u32 dev_id;

	if (msg->len < sizeof(*f))
		return;
	dev_id = le32_to_cpu(f->dev_id);
	vector = le16_to_cpu(f->vector);
	switch (le16_to_cpu(f->type)) {
	case DL_IRQ_INTX:
		index = VFIO_PCI_INTX_IRQ_INDEX;
		break;
	case DL_IRQ_MSI:
		index = VFIO_PCI_MSI_IRQ_INDEX;
		break;
	case DL_IRQ_MSIX:
		index = VFIO_PCI_MSIX_IRQ_INDEX;
		break;
	default:
		return;
	}

	spin_lock_irqsave(&b->fire_lock, flags);
	list_for_each_entry(v, &b->vdevs, node) {
		if (READ_ONCE(v->sess.state) != DL_VDEV_BORROWED ||
		    v->sess.host != msg->peer || v->sess.dev_id != dev_id)
			continue;
		spin_lock(&v->irq.lock);
		dl_irq_signal_vec(v, index, vector);
		spin_unlock(&v->irq.lock);
		break;
	}
	spin_unlock_irqrestore(&b->fire_lock, flags);
}

/**
 * dl_irq_fire_atomic() - dl_irq_fire() from the doorbell interrupt: it
 *	never sleeps, so it takes every relay.
 * @fab: the fabric.
 * @msg: the message.
 * @priv: the borrower.
 *
 * Return: true.
 */
bool dl_irq_fire_atomic(struct dl_fabric *fab, const struct dl_fabric_msg *msg,
			void *priv)
{
	dl_irq_fire(fab, msg, priv);
	return true;
}

/**
 * dl_irq_latch() - the guest stops for a migration: interrupts from now
 *	on are noted, not signalled.
 * @v: the mdev; caller holds v->lock.
 */
void dl_irq_latch(struct dl_vdev *v)
{
	spin_lock_irq(&v->irq.lock);
	v->irq.latched = true;
	spin_unlock_irq(&v->irq.lock);
}

/**
 * dl_irq_unlatch() - interrupts are signalled again.
 * @v: the mdev; caller holds v->lock.
 * @deliver: signal those noted meanwhile (the guest runs here), else
 *	forget them (they went with the guest, or it is reset).
 */
void dl_irq_unlatch(struct dl_vdev *v, bool deliver)
{
	struct dl_irq_ctx *ctx;
	unsigned int index;
	unsigned long i;

	spin_lock_irq(&v->irq.lock);
	v->irq.latched = false;
	for (index = 0; index < DL_B_NR_IRQ_TYPES; index++) {
		ctx = &v->irq.irqs[index];
		for_each_set_bit(i, v->irq.pending[index], DL_MIG_PENDING_VECS)
			if (deliver && i < ctx->count && ctx->trig[i])
				eventfd_signal(ctx->trig[i]);
		bitmap_zero(v->irq.pending[index], DL_MIG_PENDING_VECS);
	}
	spin_unlock_irq(&v->irq.lock);
}

/* The index whose interrupts a migration carries: the one enabled. */
static unsigned int dl_irq_active_index(struct dl_vdev *v)
{
	if (v->irq.irqs[VFIO_PCI_MSIX_IRQ_INDEX].count)
		return VFIO_PCI_MSIX_IRQ_INDEX;
	if (v->irq.irqs[VFIO_PCI_MSI_IRQ_INDEX].count)
		return VFIO_PCI_MSI_IRQ_INDEX;
	return VFIO_PCI_INTX_IRQ_INDEX;
}

/**
 * dl_irq_pending_save() - the interrupts noted while latched, into a
 *	migration stream's state.
 * @v: the mdev, latched; caller holds v->lock.
 * @st: the state.
 */
void dl_irq_pending_save(struct dl_vdev *v, struct dl_mig_state *st)
{
	unsigned int index = dl_irq_active_index(v);
	unsigned long *pending = v->irq.pending[index];
	u32 i, n = 0;

	spin_lock_irq(&v->irq.lock);
	for_each_set_bit(i, pending, DL_MIG_PENDING_VECS) {
		st->pending[i / 64] |= cpu_to_le64(1ULL << (i % 64));
		n++;
	}
	spin_unlock_irq(&v->irq.lock);
	st->irq_index = cpu_to_le32(index);
	st->nr_pending = cpu_to_le32(n);
}

/**
 * dl_irq_pending_load() - interrupts a migration stream says fired after
 *	its source stopped: noted, signalled when the guest runs here.
 * @v: the mdev, latched; caller holds v->lock.
 * @st: the state, checked (dl_mig_state_check()).
 */
void dl_irq_pending_load(struct dl_vdev *v, const struct dl_mig_state *st)
{
	unsigned int index = le32_to_cpu(st->irq_index);
	u32 i;

	if (index >= DL_B_NR_IRQ_TYPES)
		return;
	spin_lock_irq(&v->irq.lock);
	for (i = 0; i < DL_MIG_PENDING_VECS; i++)
		if (le64_to_cpu(st->pending[i / 64]) & (1ULL << (i % 64)))
			set_bit(i, v->irq.pending[index]);
	spin_unlock_irq(&v->irq.lock);
}

/**
 * dl_irq_max_vectors() - the most vectors of any index of the device.
 * @v: the mdev, open.
 *
 * Return: the count.
 */
u32 dl_irq_max_vectors(struct dl_vdev *v)
{
	return max3(1U, (u32)v->info.msi_count, (u32)v->info.msix_count);
}

/**
 * dl_irq_replay() - the device was taken over from a migration's source:
 *	the lender takes the vectors the guest enabled here (SET_IRQS, kept
 *	virtual until now), and MSI-X vectors go direct where asked.
 * @v: the mdev, holding the device; caller holds v->lock.
 *
 * Return: 0 or the error of the first request that failed.
 */
int dl_irq_replay(struct dl_vdev *v)
{
	struct dl_irq_ctx *ctx;
	unsigned int index;
	int ret;

	lockdep_assert_held(&v->lock);

	for (index = 0; index < DL_B_NR_IRQ_TYPES; index++) {
		ctx = &v->irq.irqs[index];
		if (!ctx->lender_count)
			continue;
		ret = dl_irq_lender_set(v, index, ctx->lender_count);
		if (ret)
			return ret;
		if (index == VFIO_PCI_MSIX_IRQ_INDEX && !ctx->direct &&
		    READ_ONCE(dl_direct_irq))
			dl_irq_direct_setup(v, ctx, ctx->lender_count);
	}
	return 0;
}

/**
 * dl_irq_init() - set up the interrupts of a new mdev: none.
 * @v: the mdev, being initialized.
 */
void dl_irq_init(struct dl_vdev *v)
{
	spin_lock_init(&v->irq.lock);
	mutex_init(&v->irq.intx_mask_lock);
	INIT_DELAYED_WORK(&v->irq.intx_retry, dl_intx_retry_work);
}

/**
 * dl_irq_destroy() - the interrupts of an mdev being freed, all released.
 * @v: the mdev.
 */
void dl_irq_destroy(struct dl_vdev *v)
{
	cancel_delayed_work_sync(&v->irq.intx_retry);
	mutex_destroy(&v->irq.intx_mask_lock);
}
