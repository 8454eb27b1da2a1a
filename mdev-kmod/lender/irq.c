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
 *
 * Direct MSI-X vectors (DL_MSG_IRQ_DIRECT): the device's own message write
 * rings the holder's doorbell through the fabric, and no CPU of this host
 * runs per interrupt. The backend names the write that rings a peer's
 * doorbell vector (dl_fabric_peer_db_msg(): on the emulated fabric the
 * adapter's Doorbell register, (peer << 16) | vector). The device's
 * writes go through its IOMMU domain, so the register's page is mapped
 * there, write-only, at an IOVA kept from the holder (@lent->direct_iova,
 * the aperture's top page, listed in @lent->resv so that dma.c refuses
 * the holder's maps there; not in 0xfeexxxxx, which VT-d takes as an
 * interrupt request), and the entry gets that IOVA as address and the
 * doorbell value as data. The vectors stay allocated by the PCI core
 * (pci_alloc_irq_vectors()), so its state stays whole for relayed ones
 * and for freeing; a direct vector's handler is freed first, which masks
 * and deactivates the entry, and the entry is then written with the
 * vector masked (an interrupt meanwhile is left pending by the device and
 * sent when it is unmasked). Linux does not write the entry of an
 * interrupt no one requested: affinity changes of a deactivated vector
 * touch no entry, and with interrupt remapping they change only the
 * remapping table. Nor is it in /proc/irq for irqbalance: no action. A
 * function reset restores Linux's (cleared) entry: the reset writes the
 * direct ones again (dl_lent_irq_direct_restore()); a fresh domain maps
 * the page again before it is attached (dl_lent_irq_direct_map()).
 *
 * The guest's masking of its MSI-X vectors never reaches the lender,
 * direct or relayed: the holder's VMM emulates the table and keeps the
 * guest's masked vectors pending itself, as with vfio-pci.
 */
#include <linux/interrupt.h>
#include <linux/iommu.h>
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

/* Map the doorbell page at the reserved IOVA of @domain. */
static int dl_lent_direct_map_page(struct dl_lent *lent,
				   struct iommu_domain *domain)
{
	/*
	 * Write-only MMIO: the device's reads have nothing to find there,
	 * and IOMMU_MMIO keeps the IOMMU from snooping a register page.
	 */
	return iommu_map(domain, lent->direct_iova, lent->direct_page,
			 PAGE_SIZE, IOMMU_WRITE | IOMMU_MMIO, GFP_KERNEL);
}

/**
 * dl_lent_irq_direct_reserve() - keep the IOVA of direct vectors' writes
 *	from the holder.
 * @lent: the device, its domain set up and @lent->resv read.
 *
 * The top page of the domain's aperture, unless the group reserves it
 * already (then no vector of this device can be direct). Added to
 * @lent->resv, which dma.c checks every map against and which is freed
 * with it.
 *
 * Return: 0 or -ENOMEM.
 */
int dl_lent_irq_direct_reserve(struct dl_lent *lent)
{
	struct iommu_domain_geometry *geo = &lent->domain->geometry;
	struct iommu_resv_region *r;
	u64 iova;

	iova = round_down(geo->aperture_end, PAGE_SIZE);
	if (!iova || iova < geo->aperture_start ||
	    iova + PAGE_SIZE - 1 > geo->aperture_end)
		return 0;
	list_for_each_entry(r, &lent->resv, list)
		if (r->length && iova <= r->start + r->length - 1 &&
		    iova + PAGE_SIZE - 1 >= r->start)
			return 0;
	r = iommu_alloc_resv_region(iova, PAGE_SIZE, 0, IOMMU_RESV_RESERVED,
				    GFP_KERNEL);
	if (!r)
		return -ENOMEM;
	list_add_tail(&r->list, &lent->resv);
	lent->direct_iova = iova;
	return 0;
}

/**
 * dl_lent_irq_direct_map() - map the doorbell page of direct vectors, if
 *	any, in a fresh domain of the device, before it is attached.
 * @lent: the device; @lent->lock held.
 * @domain: the fresh domain.
 *
 * Return: 0 or the error of iommu_map() (then the caller keeps the old
 * domain).
 */
int dl_lent_irq_direct_map(struct dl_lent *lent, struct iommu_domain *domain)
{
	lockdep_assert_held(&lent->lock);

	if (!lent->direct_page)
		return 0;
	return dl_lent_direct_map_page(lent, domain);
}

/* The last direct vector went (all are freed at once): unmap the page. */
static void dl_lent_irq_direct_unmap(struct dl_lent *lent)
{
	if (!lent->direct_page)
		return;
	if (!lent->dma_detached &&
	    iommu_unmap(lent->domain, lent->direct_iova, PAGE_SIZE) != PAGE_SIZE)
		dev_warn_ratelimited(&lent->pdev->dev,
				     "lender: the doorbell page stays mapped at IOVA %#llx\n",
				     lent->direct_iova);
	lent->direct_page = 0;
	WRITE_ONCE(lent->ndirect, 0);
}

/*
 * Write a direct vector's entry: masked while address and data change
 * (PCIe's rule for the table), then unmasked. Memory decode is on.
 */
static void dl_lent_direct_write(struct dl_lent *lent,
				 const struct dl_lent_vec *vec)
{
	void __iomem *e = lent->pdev->msix_base +
			  vec->index * PCI_MSIX_ENTRY_SIZE;
	u64 addr = lent->direct_iova + vec->db_off;
	u32 ctrl;

	ctrl = readl(e + PCI_MSIX_ENTRY_VECTOR_CTRL);
	writel(ctrl | PCI_MSIX_ENTRY_CTRL_MASKBIT,
	       e + PCI_MSIX_ENTRY_VECTOR_CTRL);
	writel(lower_32_bits(addr), e + PCI_MSIX_ENTRY_LOWER_ADDR);
	writel(upper_32_bits(addr), e + PCI_MSIX_ENTRY_UPPER_ADDR);
	writel(vec->db_data, e + PCI_MSIX_ENTRY_DATA);
	writel(ctrl & ~PCI_MSIX_ENTRY_CTRL_MASKBIT,
	       e + PCI_MSIX_ENTRY_VECTOR_CTRL);
	/* Flushed: the holder is told it is direct once it is. */
	readl(e + PCI_MSIX_ENTRY_VECTOR_CTRL);
}

/**
 * dl_lent_irq_direct_restore() - a function reset restored Linux's view
 *	of the MSI-X table: write the direct vectors' entries again.
 * @lent: the device; its device lock and @lent->lock held, memory decode
 *	on.
 */
void dl_lent_irq_direct_restore(struct dl_lent *lent)
{
	u32 i;

	lockdep_assert_held(&lent->lock);

	if (!lent->ndirect || !lent->pdev->msix_enabled)
		return;
	for (i = 0; i < lent->nvecs; i++)
		if (lent->vecs[i].direct)
			dl_lent_direct_write(lent, &lent->vecs[i]);
}

/**
 * dl_lent_irq_direct() - have an MSI-X vector taken for the holder ring
 *	the holder's doorbell itself (%DL_MSG_IRQ_DIRECT).
 * @lent: the device; @lent->lock held, the requester checked as holder.
 * @fab: the holder's fabric.
 * @peer: the holder.
 * @type: from the peer: %DL_IRQ_MSIX.
 * @index: from the peer: the vector, below those taken.
 * @db_vector: from the peer: its doorbell vector.
 *
 * Return: 0 (also for a vector direct already, which is written anew
 * with @db_vector); -EINVAL for a vector not taken or a bad doorbell
 * vector; -EOPNOTSUPP when the backend has no doorbell address for
 * devices or the domain no room for it (the vector stays relayed); or the
 * error of mapping the doorbell page.
 */
int dl_lent_irq_direct(struct dl_lent *lent, struct dl_fabric *fab, u32 peer,
		       u16 type, u16 index, u16 db_vector)
{
	struct dl_lent_vec *vec;
	phys_addr_t addr;
	bool mem, mapped = false;
	u32 data;
	int ret;

	lockdep_assert_held(&lent->lock);

	if (type != DL_IRQ_MSIX || !lent->vecs ||
	    lent->vec_type != DL_IRQ_MSIX || index >= lent->nvecs ||
	    db_vector == DL_DB_VEC_MSG || db_vector >= DL_DB_VECTORS_MAX)
		return -EINVAL;
	vec = &lent->vecs[index];
	if (fab != vec->fab || peer != vec->peer)
		return -EINVAL;
	if (!lent->direct_iova || !lent->pdev->msix_base)
		return -EOPNOTSUPP;
	ret = dl_fabric_peer_db_msg(fab, peer, db_vector, &addr, &data);
	if (ret)
		return ret;
	if (!lent->direct_page) {
		lent->direct_page = round_down(addr, PAGE_SIZE);
		ret = dl_lent_direct_map_page(lent, lent->domain);
		if (ret) {
			lent->direct_page = 0;
			return ret;
		}
		mapped = true;
	} else if (round_down(addr, PAGE_SIZE) != lent->direct_page) {
		/* One page per device: the backend's is always the same. */
		return -EOPNOTSUPP;
	}

	mem = dl_lent_memory_enable(lent);
	if (!vec->direct)
		/* Masks and deactivates the entry; no handler runs after. */
		free_irq(vec->irq, vec);
	vec->db_data = data;
	vec->db_off = offset_in_page(addr);
	dl_lent_direct_write(lent, vec);
	dl_lent_memory_restore(lent, mem);
	if (!vec->direct) {
		vec->direct = true;
		WRITE_ONCE(lent->ndirect, lent->ndirect + 1);
	}
	dl_lent_count(lent, DL_LCNT_IRQ_DIRECTS);
	pci_dbg(lent->pdev, "lender: MSI-X vector %u rings doorbell %u of host %u%s\n",
		index, db_vector, peer, mapped ? " (page mapped)" : "");
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
		if (!lent->vecs[i].direct)
			free_irq(lent->vecs[i].irq, &lent->vecs[i]);
	if (lent->vec_type != DL_IRQ_INTX) {
		/* Masks every entry, direct ones too, and disables MSI-X. */
		pci_free_irq_vectors(pdev);
		/* Which lets INTx on again (pci_intx_for_msi()). */
		dl_lent_intx_mask(lent);
	}
	dl_lent_memory_restore(lent, mem);
	dl_lent_irq_direct_unmap(lent);
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
