// SPDX-License-Identifier: GPL-2.0
/*
 * Interrupts: the lender takes the device's MSI-X, MSI or INTx vectors for
 * the holder and relays each one as a posted DL_MSG_IRQ_FIRE.
 *
 * The MSI-X table stays the lender's (BAR accesses never reach it; the
 * borrower's VMM emulates the guest's view). INTx is level triggered: the
 * hard handler masks it at the device (DisINTx, PCI 2.3 masking, as
 * vfio-pci does) and the next BAR access of the holder, which is how the
 * guest's handler serves the device, unmasks it again, the way QEMU's
 * vfio-pci ends an INTx without a KVM resampler. If the device still
 * asserts it then, it stays masked and fires again.
 */
#include <linux/interrupt.h>
#include <linux/pci.h>
#include <linux/slab.h>

#include "internal.h"

/* A thread: sending may sleep while the borrower's ring is full. */
static irqreturn_t dl_lent_irq_thread(int irq, void *data)
{
	struct dl_lent_vec *vec = data;
	struct dl_irq_fire fire = {
		.dev_id = cpu_to_le32(vec->dev_id),
		.type = cpu_to_le16(vec->type),
		.vector = cpu_to_le16(vec->index),
	};

	if (dl_fabric_send(vec->fab, vec->peer, DL_MSG_IRQ_FIRE, &fire,
			   sizeof(fire)))
		dl_lent_count(vec->lent, DL_LCNT_IRQ_FIRE_ERRORS);
	else
		dl_lent_count(vec->lent, DL_LCNT_IRQ_FIRES);
	return IRQ_HANDLED;
}

/* INTx: mask at the device if it is the one asserting, then relay. */
static irqreturn_t dl_lent_intx_hard(int irq, void *data)
{
	struct dl_lent_vec *vec = data;

	if (!pci_check_and_mask_intx(vec->lent->pdev))
		return IRQ_NONE;
	WRITE_ONCE(vec->lent->intx_masked, true);
	return IRQ_WAKE_THREAD;
}

/**
 * dl_lent_intx_eoi() - the holder touched the device: end a relayed INTx.
 * @lent: the device; @lent->lock held.
 *
 * Unmasks INTx if it was masked after firing; if the device still asserts
 * it, it stays masked and is relayed again.
 */
void dl_lent_intx_eoi(struct dl_lent *lent)
{
	lockdep_assert_held(&lent->lock);

	if (!lent->vecs || lent->vec_type != DL_IRQ_INTX ||
	    !READ_ONCE(lent->intx_masked))
		return;
	WRITE_ONCE(lent->intx_masked, false);
	if (!pci_check_and_unmask_intx(lent->pdev)) {
		WRITE_ONCE(lent->intx_masked, true);
		dl_lent_irq_thread(lent->vecs[0].irq, &lent->vecs[0]);
	}
}

static int dl_lent_intx_set(struct dl_lent *lent, struct dl_fabric *fab,
			    u32 peer)
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

	lent->intx_masked = false;
	pci_intx(pdev, 1);
	ret = request_threaded_irq(vec->irq, dl_lent_intx_hard,
				   dl_lent_irq_thread, IRQF_SHARED, vec->name,
				   vec);
	if (ret) {
		kfree(vec);
		return ret;
	}
	lent->vecs = vec;
	lent->vec_type = DL_IRQ_INTX;
	WRITE_ONCE(lent->nvecs, 1);
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
	u32 i;

	lockdep_assert_held(&lent->lock);

	if (!lent->vecs)
		return;
	for (i = 0; i < lent->nvecs; i++)
		free_irq(lent->vecs[i].irq, &lent->vecs[i]);
	if (lent->vec_type == DL_IRQ_INTX) {
		/* Masked, as the lender keeps a lent device's INTx. */
		pci_intx(pdev, 0);
		lent->intx_masked = false;
	} else {
		pci_free_irq_vectors(pdev);
	}
	kfree(lent->vecs);
	lent->vecs = NULL;
	WRITE_ONCE(lent->nvecs, 0);
}

/**
 * dl_lent_irq_set() - take (or with @count 0 release) vectors for the holder.
 * @lent: the device; @lent->lock held, the requester checked as holder.
 * @fab: the holder's fabric.
 * @peer: the holder.
 * @type: an &enum dl_irq_type, from the peer.
 * @count: vectors, from the peer.
 *
 * Vectors taken before (of any type) are released first, as VFIO does
 * when a VMM switches interrupt modes.
 *
 * Return: 0; -EINVAL for a bad type or more vectors than the device has,
 * -EOPNOTSUPP for INTx on a device that cannot mask it, or the error
 * of allocating or requesting them (then none is held).
 */
int dl_lent_irq_set(struct dl_lent *lent, struct dl_fabric *fab, u32 peer,
		    u16 type, u32 count)
{
	struct pci_dev *pdev = lent->pdev;
	unsigned int flags;
	int max, ret, i;

	lockdep_assert_held(&lent->lock);

	switch (type) {
	case DL_IRQ_MSIX:
		max = pci_msix_vec_count(pdev);
		flags = PCI_IRQ_MSIX;
		break;
	case DL_IRQ_MSI:
		max = pci_msi_vec_count(pdev);
		flags = PCI_IRQ_MSI;
		break;
	case DL_IRQ_INTX:
		max = 1;
		flags = 0;
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
		return dl_lent_intx_set(lent, fab, peer);

	lent->vecs = kcalloc(count, sizeof(*lent->vecs), GFP_KERNEL);
	if (!lent->vecs)
		return -ENOMEM;
	ret = pci_alloc_irq_vectors(pdev, count, count, flags);
	if (ret < 0)
		goto err_free_vecs;

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
		ret = request_threaded_irq(vec->irq, NULL, dl_lent_irq_thread,
					   IRQF_ONESHOT, vec->name, vec);
		if (ret)
			goto err_free_irqs;
	}
	lent->vec_type = type;
	WRITE_ONCE(lent->nvecs, count);
	return 0;

err_free_irqs:
	while (--i >= 0)
		free_irq(lent->vecs[i].irq, &lent->vecs[i]);
	pci_free_irq_vectors(pdev);
err_free_vecs:
	kfree(lent->vecs);
	lent->vecs = NULL;
	return ret;
}
