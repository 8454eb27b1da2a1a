// SPDX-License-Identifier: GPL-2.0
/*
 * Interrupts: the lender takes the device's MSI-X, MSI or INTx vectors for
 * the holder and relays each one as a posted DL_MSG_IRQ_FIRE.
 *
 * The MSI-X table stays the lender's (BAR accesses never reach it; the
 * borrower's VMM emulates the guest's view). The holder may turn memory
 * decode off all the same, so every call here that reaches the table or
 * the PBA (allocating, requesting, freeing MSI-X vectors) runs with decode
 * turned on for it (dl_lent_memory_enable()); none does from interrupt
 * context, where that could not be done. MSI lives in config space and
 * needs no decode. INTx is level triggered: the
 * hard handler masks it at the device (DisINTx, PCI 2.3 masking, as
 * vfio-pci does) and it stays masked until the holder ends it: with
 * DL_MSG_IRQ_MASK's unmask, which the borrower sends for VFIO's unmask (at
 * the guest's EOI, through KVM's resampler, or at a BAR access in a VMM
 * without one), or, for a borrower that does not send unmasks, at its next
 * BAR access, which is how the guest's handler serves the device. If the
 * device still asserts it then, it stays masked and fires again.
 *
 * INTx disable at the device is the lender's alone: it is clear only while
 * the relay's handler is registered, has not fired since the holder's last
 * BAR access, and the borrower has not set its (virtual) INTx disable bit.
 * A device asserting INTx on a shared line with no handler to claim it
 * would get the line disabled for every device on it ("nobody cared").
 * @lent->intx_lock orders these changes against the hard handler.
 */
#include <linux/interrupt.h>
#include <linux/pci.h>
#include <linux/slab.h>

#include "internal.h"

static void dl_lent_irq_fire_msg(const struct dl_lent_vec *vec,
				 struct dl_irq_fire *fire)
{
	*fire = (struct dl_irq_fire){
		.dev_id = cpu_to_le32(vec->dev_id),
		.type = cpu_to_le16(vec->type),
		.vector = cpu_to_le16(vec->index),
	};
}

/*
 * MSI and MSI-X: relayed from the hard handler, which is on the latency
 * path of every I/O (a thread's wake-up costs a context switch). Only when
 * the borrower's ring has no room does the thread send, waiting for it.
 */
static irqreturn_t dl_lent_irq_hard(int irq, void *data)
{
	struct dl_lent_vec *vec = data;
	struct dl_irq_fire fire;
	int ret;

	dl_lent_irq_fire_msg(vec, &fire);
	ret = dl_fabric_send_atomic(vec->fab, vec->peer, DL_MSG_IRQ_FIRE,
				    &fire, sizeof(fire));
	if (ret == -EAGAIN)
		return IRQ_WAKE_THREAD;
	dl_lent_count(vec->lent, ret ? DL_LCNT_IRQ_FIRE_ERRORS :
				 DL_LCNT_IRQ_FIRES);
	return IRQ_HANDLED;
}

/* A thread: sending may sleep while the borrower's ring is full. */
static irqreturn_t dl_lent_irq_thread(int irq, void *data)
{
	struct dl_lent_vec *vec = data;
	struct dl_irq_fire fire;

	dl_lent_irq_fire_msg(vec, &fire);
	if (dl_fabric_send(vec->fab, vec->peer, DL_MSG_IRQ_FIRE, &fire,
			   sizeof(fire)))
		dl_lent_count(vec->lent, DL_LCNT_IRQ_FIRE_ERRORS);
	else
		dl_lent_count(vec->lent, DL_LCNT_IRQ_FIRES);
	return IRQ_HANDLED;
}

/*
 * INTx: mask at the device if it is the one asserting, then relay, unless
 * the lender had masked it already (relayed and not ended yet, or disabled
 * by the borrower): then it is only claimed. Masking it all the same takes
 * the device off the line should something have cleared DisINTx behind
 * the lender's back (a reset restoring the command register).
 */
static irqreturn_t dl_lent_intx_hard(int irq, void *data)
{
	struct dl_lent *lent = ((struct dl_lent_vec *)data)->lent;
	irqreturn_t ret = IRQ_NONE;
	unsigned long flags;

	spin_lock_irqsave(&lent->intx_lock, flags);
	if (pci_check_and_mask_intx(lent->pdev)) {
		ret = lent->intx_masked ? IRQ_HANDLED : IRQ_WAKE_THREAD;
		lent->intx_masked = true;
	}
	spin_unlock_irqrestore(&lent->intx_lock, flags);
	return ret;
}

/**
 * dl_lent_intx_mask() - set INTx disable at the device, until
 * dl_lent_intx_eoi() clears it again (if the relay wants it).
 * @lent: the device; @lent->lock held.
 */
void dl_lent_intx_mask(struct dl_lent *lent)
{
	lockdep_assert_held(&lent->lock);

	spin_lock_irq(&lent->intx_lock);
	pci_intx(lent->pdev, 0);
	lent->intx_masked = true;
	spin_unlock_irq(&lent->intx_lock);
}

/**
 * dl_lent_intx_eoi() - the holder touched the device: end a relayed INTx.
 * @lent: the device; @lent->lock held.
 *
 * Also after the lender masked INTx itself (setup, reset) or the borrower
 * cleared its INTx disable bit. Unmasks INTx if the relay's handler is
 * registered and the borrower has not disabled it; if the device still
 * asserts it, it stays masked and is relayed again.
 */
void dl_lent_intx_eoi(struct dl_lent *lent)
{
	bool refire = false;

	lockdep_assert_held(&lent->lock);

	if (!dl_lent_intx_relayed(lent))
		return;
	spin_lock_irq(&lent->intx_lock);
	if (lent->intx_masked && !lent->intx_vdis) {
		refire = !pci_check_and_unmask_intx(lent->pdev);
		lent->intx_masked = refire;
	}
	spin_unlock_irq(&lent->intx_lock);
	/*
	 * Relayed by the handler's thread, as if it had fired: this runs in
	 * the receive work too (an unmask, a config write, a BAR access),
	 * which must not wait for room in the holder's ring.
	 */
	if (refire)
		irq_wake_thread(lent->vecs[0].irq, &lent->vecs[0]);
}

/**
 * dl_lent_intx_bar_access() - the holder read or wrote a BAR: the end of a
 *	relayed INTx for a holder that does not send unmasks.
 * @lent: the device; @lent->lock held.
 */
void dl_lent_intx_bar_access(struct dl_lent *lent)
{
	if (dl_lent_intx_ends_on_access(lent))
		dl_lent_intx_eoi(lent);
}

/**
 * dl_lent_intx_vdisable() - the borrower wrote its INTx disable bit.
 * @lent: the device; @lent->lock held.
 * @disable: the bit's new value.
 *
 * The bit is virtual (dl_lent_cfg_read() returns it): like vfio-pci's, it
 * masks the relay, but clearing it never lets INTx on at a device without
 * the relay's handler.
 */
void dl_lent_intx_vdisable(struct dl_lent *lent, bool disable)
{
	lockdep_assert_held(&lent->lock);

	/* Only a change: an EOI for every command write would refire. */
	if (lent->intx_vdis == disable)
		return;
	lent->intx_vdis = disable;
	if (disable)
		dl_lent_intx_mask(lent);
	else
		dl_lent_intx_eoi(lent);
}

static int dl_lent_intx_set(struct dl_lent *lent, struct dl_fabric *fab,
			    u32 peer, u16 flags)
{
	struct pci_dev *pdev = lent->pdev;
	struct dl_lent_vec *vec;
	int ret;

	if (!lent->intx_ok)
		return -EOPNOTSUPP;

	vec = kzalloc(sizeof(*vec), GFP_KERNEL);
	if (!vec)
		return -ENOMEM;
	vec->fab = fab;
	vec->peer = peer;
	vec->lent = lent;
	vec->dev_id = lent->dev_id;
	vec->type = DL_IRQ_INTX;
	vec->irq = pdev->irq;
	snprintf(vec->name, sizeof(vec->name), "devlend-lent%u-intx",
		 lent->dev_id);

	/* Masked until the handler is in place: the line may be shared. */
	dl_lent_intx_mask(lent);
	ret = request_threaded_irq(vec->irq, dl_lent_intx_hard,
				   dl_lent_irq_thread, IRQF_SHARED, vec->name,
				   vec);
	if (ret) {
		kfree(vec);
		return ret;
	}
	lent->vecs = vec;
	lent->vec_type = DL_IRQ_INTX;
	lent->intx_unmask_msg = flags & DL_IRQ_SET_F_UNMASK_MSG;
	WRITE_ONCE(lent->nvecs, 1);
	dl_lent_intx_eoi(lent);
	return 0;
}

/**
 * dl_lent_irq_release() - free the vectors taken for the holder, if any.
 * @lent: the device; @lent->lock held.
 *
 * When this returns no interrupt thread of the device runs or will run.
 */
void dl_lent_irq_release(struct dl_lent *lent)
{
	struct pci_dev *pdev = lent->pdev;
	bool mem;
	u32 i;

	lockdep_assert_held(&lent->lock);

	if (!lent->vecs)
		return;
	/* Masked before its handler goes: the line may be shared. */
	if (lent->vec_type == DL_IRQ_INTX)
		dl_lent_intx_mask(lent);
	/* free_irq() masks each vector in the table, disabling MSI-X all. */
	mem = lent->vec_type == DL_IRQ_MSIX && dl_lent_memory_enable(lent);
	for (i = 0; i < lent->nvecs; i++)
		free_irq(lent->vecs[i].irq, &lent->vecs[i]);
	if (lent->vec_type != DL_IRQ_INTX) {
		pci_free_irq_vectors(pdev);
		/* Which lets INTx on again (pci_intx_for_msi()). */
		dl_lent_intx_mask(lent);
	}
	dl_lent_memory_restore(lent, mem);
	kfree(lent->vecs);
	lent->vecs = NULL;
	lent->intx_unmask_msg = false;
	WRITE_ONCE(lent->nvecs, 0);
}

/**
 * dl_lent_intx_set_masked() - the holder masks or unmasks its relayed INTx
 *	(%DL_MSG_IRQ_MASK).
 * @lent: the device; @lent->lock held, the requester checked as holder.
 * @mask: mask, else unmask (the end of an INTx).
 *
 * Return: 0, or -EINVAL unless the holder set INTx up to send these.
 */
int dl_lent_intx_set_masked(struct dl_lent *lent, bool mask)
{
	lockdep_assert_held(&lent->lock);

	if (!dl_lent_intx_relayed(lent) || !lent->intx_unmask_msg)
		return -EINVAL;
	if (mask) {
		dl_lent_intx_mask(lent);
		dl_lent_count(lent, DL_LCNT_INTX_MASKS);
	} else {
		dl_lent_intx_eoi(lent);
		dl_lent_count(lent, DL_LCNT_INTX_UNMASKS);
	}
	return 0;
}

/**
 * dl_lent_irq_set() - take (or with @count 0 release) vectors for the holder.
 * @lent: the device; @lent->lock held, the requester checked as holder.
 * @fab: the holder's fabric.
 * @peer: the holder.
 * @type: an &enum dl_irq_type, from the peer.
 * @count: vectors, from the peer.
 * @set_flags: DL_IRQ_SET_F_*, from the peer (checked: only with INTx).
 *
 * Vectors taken before (of any type) are released first, as VFIO does
 * when a VMM switches interrupt modes.
 *
 * Return: 0; -EINVAL for a bad type or more vectors than the device has,
 * -EOPNOTSUPP for INTx on a device that cannot mask it, or the error
 * of allocating or requesting them (then none is held).
 */
int dl_lent_irq_set(struct dl_lent *lent, struct dl_fabric *fab, u32 peer,
		    u16 type, u32 count, u16 set_flags)
{
	struct pci_dev *pdev = lent->pdev;
	unsigned int irq_flags;
	int max, ret, i;
	bool mem;

	lockdep_assert_held(&lent->lock);

	switch (type) {
	case DL_IRQ_MSIX:
		max = pci_msix_vec_count(pdev);
		irq_flags = PCI_IRQ_MSIX;
		break;
	case DL_IRQ_MSI:
		max = pci_msi_vec_count(pdev);
		irq_flags = PCI_IRQ_MSI;
		break;
	case DL_IRQ_INTX:
		max = 1;
		irq_flags = 0;
		break;
	default:
		return -EINVAL;
	}

	if (!count) {
		if (lent->vecs && lent->vec_type == type)
			dl_lent_irq_release(lent);
		return 0;
	}
	if (max <= 0 || count > max)
		return -EINVAL;

	dl_lent_irq_release(lent);
	if (type == DL_IRQ_INTX)
		return dl_lent_intx_set(lent, fab, peer, set_flags);

	lent->vecs = kcalloc(count, sizeof(*lent->vecs), GFP_KERNEL);
	if (!lent->vecs)
		return -ENOMEM;
	/*
	 * Allocating MSI-X vectors writes them into the table, and
	 * request_threaded_irq() unmasks them there.
	 */
	mem = type == DL_IRQ_MSIX && dl_lent_memory_enable(lent);
	ret = pci_alloc_irq_vectors(pdev, count, count, irq_flags);
	if (ret < 0)
		goto err_restore_decode;

	for (i = 0; i < count; i++) {
		struct dl_lent_vec *vec = &lent->vecs[i];

		vec->fab = fab;
		vec->peer = peer;
		vec->lent = lent;
		vec->dev_id = lent->dev_id;
		vec->type = type;
		vec->index = i;
		vec->irq = pci_irq_vector(pdev, i);
		snprintf(vec->name, sizeof(vec->name), "devlend-lent%u-%s%d",
			 lent->dev_id, type == DL_IRQ_MSIX ? "msix" : "msi", i);
		/*
		 * No IRQF_ONESHOT: it would have the core mask the vector in
		 * the table while the thread runs, from interrupt context,
		 * where decode cannot be turned on. PCI MSI chips are one-shot
		 * safe (IRQCHIP_ONESHOT_SAFE), so the core drops the flag
		 * anyway: a vector that fires again before the thread has
		 * sent is relayed by that send (MSIs may merge) or by one more
		 * run of it.
		 */
		ret = request_threaded_irq(vec->irq, dl_lent_irq_hard,
					   dl_lent_irq_thread, 0, vec->name,
					   vec);
		if (ret)
			goto err_free_irqs;
	}
	dl_lent_memory_restore(lent, mem);
	lent->vec_type = type;
	WRITE_ONCE(lent->nvecs, count);
	return 0;

err_free_irqs:
	while (--i >= 0)
		free_irq(lent->vecs[i].irq, &lent->vecs[i]);
	pci_free_irq_vectors(pdev);
	dl_lent_intx_mask(lent);
err_restore_decode:
	dl_lent_memory_restore(lent, mem);
	kfree(lent->vecs);
	lent->vecs = NULL;
	return ret;
}
