// SPDX-License-Identifier: GPL-2.0
/*
 * IOMMU groups of more than one device (docs/groups.md): the functions of
 * a multi-function device without ACS, whose DMA the IOMMU cannot tell
 * apart. One function's DMA reaches whatever the group's domain maps, so
 * the group is lent as a whole, to one holder at a time:
 *
 *  - Every function of the group is bound to devlend-lender before any is
 *    lent: lending one lends them all (driver.c). They claim DMA ownership
 *    with one cookie (the &struct dl_lent_grp), which Linux refuses while
 *    another function is bound to a driver that uses the default domain.
 *  - The group has one paging domain, attached with iommu_attach_group()
 *    (iommu_attach_device() refuses a group of more than one device),
 *    made at the first member's probe and freed after the last one's
 *    remove. Every member maps its holder's DMA there, each in its own
 *    trees as a device alone does (dma.c), under the group's @dma_lock:
 *    a run another member maps already, onto the same memory, is recorded
 *    and not mapped again, and an unmap takes out of the IOMMU only what
 *    no other member still records (dl_lent_group_next_shared()). So a
 *    function whose guest driver never turns bus mastering on (a display)
 *    does not keep its siblings' DMA from the RAM they map, and what one
 *    member's holder unmaps stays reachable only where another member of
 *    the same holder and VM maps it (the borrower gives a group to one VM:
 *    borrower/p2p.c). Their BAR DMA, P2P maps and direct interrupts are
 *    refused (msg.c, driver.c): those map pages of their own in the one
 *    domain, not brought under @dma_lock yet. The page tables the members
 *    leave are freed when no member is held, by a fresh domain for the
 *    group (dl_lent_group_idle_work()).
 *  - One holder: an acquire of a member while another member is held by
 *    another host, or by another incarnation of the same host, is refused
 *    (%DL_REJ_GROUP). The check and the publication of the new holder
 *    (dl_lent_holder_publish()) are done under the group's @lock, so two
 *    holders cannot slip in at once; a member's holder stops being
 *    published at its take-back (dl_lent_p2p_revoke_target()).
 *  - A member without a function reset of its own (a multi-function
 *    device without FLR: a bus reset would reset its siblings) is not
 *    reset at its take-back. The group's secondary bus is reset instead
 *    (pci_reset_bus()) once no member is held; until then no member is
 *    lent again, so that nothing of one holder reaches the next.
 *
 * Locking: dl_grps_lock (the list of groups, each group's members and
 * domain) is taken with no lender lock held, or inside a device's locks at
 * probe and remove. A group's @lock is taken inside a member's lent->lock
 * (acquire, take-back); inside it only other members' holder_lock, which
 * is innermost. Its @dma_lock is taken inside a member's lent->lock by
 * dma.c, inside dl_grps_lock at probe and remove, and by the idle work
 * alone. The idle work takes no device's
 * lock: pci_reset_bus() tries each device's, and the work comes back
 * later if one is taken.
 *
 * Below driver.c (probe, remove, lend), msg.c (acquire) and slow.c
 * (take-back); beside dma.c, which attaches fresh domains through
 * dl_lent_domain_attach().
 */
#include <linux/iommu.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#include "internal.h"

/* How long the reset work waits for a member's device lock to be free. */
#define DL_GRP_RESET_RETRY_MS	20

/**
 * struct dl_lent_grp - an IOMMU group of more than one device, lent.
 * @node: in dl_grps (dl_grps_lock).
 * @group: the IOMMU group, with a reference.
 * @bus: the bus its functions are on.
 * @slot: their slot.
 * @members: members probed (dl_grps_lock).
 * @domain: the group's domain, every member's @domain (dl_grps_lock, and
 *	@dma_lock to replace it).
 * @dma_lock: the members' DMA mappings (their dma trees) and @domain.
 * @lock: holder claims and the reset's state below.
 * @reset_due: a member came back without a reset of its own: the bus is
 *	reset before any member is lent again (@lock).
 * @reset_failed: that reset failed: no member is lent until the group is
 *	lent again (@lock).
 * @reset_work: the bus reset.
 */
struct dl_lent_grp {
	struct list_head node;
	struct iommu_group *group;
	struct pci_bus *bus;
	unsigned int slot;
	unsigned int members;
	struct iommu_domain *domain;
	struct mutex dma_lock;	/* see above */
	struct mutex lock;	/* see above */
	bool reset_due;
	bool reset_failed;
	struct delayed_work reset_work;
};

static LIST_HEAD(dl_grps);
static DEFINE_MUTEX(dl_grps_lock);

/**
 * struct dl_grp_scan - what dl_lent_group_scan() found.
 * @pdev: the device asked about.
 * @n: devices in its group.
 * @foreign: a device of the group that is not a function of its slot.
 * @members: where dl_lent_group_pdevs() puts them, or NULL.
 */
struct dl_grp_scan {
	struct pci_dev *pdev;
	unsigned int n;
	struct device *foreign;
	struct pci_dev **members;
};

static int dl_grp_scan_one(struct device *dev, void *data)
{
	struct dl_grp_scan *s = data;
	struct pci_dev *p;

	s->n++;
	if (!dev_is_pci(dev)) {
		s->foreign = dev;
		return 0;
	}
	p = to_pci_dev(dev);
	if (p->bus != s->pdev->bus ||
	    PCI_SLOT(p->devfn) != PCI_SLOT(s->pdev->devfn) ||
	    p->hdr_type != PCI_HEADER_TYPE_NORMAL)
		s->foreign = dev;
	return 0;
}

/**
 * dl_lent_group_scan() - how many devices share @pdev's IOMMU group, and
 *	whether they can be lent together.
 * @pdev: the device.
 * @n: set to the devices in its group, itself included.
 *
 * Return: 0 if the device is alone in its group, or its group is
 * functions of its slot only (endpoints, at most %DL_GRP_MAX_MEMBERS);
 * -EINVAL if it has no group (no IOMMU) or a group that spans more.
 */
int dl_lent_group_scan(struct pci_dev *pdev, unsigned int *n)
{
	struct dl_grp_scan s = { .pdev = pdev };
	struct iommu_group *group;

	group = iommu_group_get(&pdev->dev);
	if (!group) {
		pci_err(pdev, "lender: the device has no IOMMU group (no IOMMU, or it is off): its DMA could not be confined\n");
		return -EINVAL;
	}
	iommu_group_for_each_dev(group, &s, dl_grp_scan_one);
	iommu_group_put(group);
	*n = s.n;
	if (s.foreign) {
		pci_err(pdev, "lender: the device shares its IOMMU group with %s, not a function of its slot; it cannot be isolated\n",
			dev_name(s.foreign));
		return -EINVAL;
	}
	if (s.n > DL_GRP_MAX_MEMBERS) {
		pci_err(pdev, "lender: its IOMMU group has %u devices; at most %u are lent together\n",
			s.n, DL_GRP_MAX_MEMBERS);
		return -EINVAL;
	}
	return 0;
}

static int dl_grp_collect_one(struct device *dev, void *data)
{
	struct dl_grp_scan *s = data;

	if (s->n < DL_GRP_MAX_MEMBERS && dev_is_pci(dev))
		s->members[s->n++] = pci_dev_get(to_pci_dev(dev));
	return 0;
}

/**
 * dl_lent_group_pdevs() - the functions lent together with @pdev.
 * @pdev: a device.
 * @m: set to them, @pdev among them, each with a reference.
 * @n: set to how many.
 *
 * Return: 0; -EINVAL if the device cannot be lent for its group
 * (dl_lent_group_scan(), logged).
 */
int dl_lent_group_pdevs(struct pci_dev *pdev,
			struct pci_dev *m[DL_GRP_MAX_MEMBERS], unsigned int *n)
{
	struct dl_grp_scan s = { .pdev = pdev, .members = m };
	struct iommu_group *group;
	int ret;

	ret = dl_lent_group_scan(pdev, n);
	if (ret)
		return ret;
	group = iommu_group_get(&pdev->dev);
	if (!group)
		return -EINVAL;
	iommu_group_for_each_dev(group, &s, dl_grp_collect_one);
	iommu_group_put(group);
	*n = s.n;
	return 0;
}

/* The group object of @group, made if none; dl_grps_lock held. */
static struct dl_lent_grp *dl_grp_find_or_new(struct pci_dev *pdev,
					      struct iommu_group *group)
{
	struct dl_lent_grp *grp;

	list_for_each_entry(grp, &dl_grps, node)
		if (grp->group == group)
			return grp;
	grp = kzalloc(sizeof(*grp), GFP_KERNEL);
	if (!grp)
		return NULL;
	iommu_group_ref_get(group);
	grp->group = group;
	grp->bus = pdev->bus;
	grp->slot = PCI_SLOT(pdev->devfn);
	mutex_init(&grp->lock);
	mutex_init(&grp->dma_lock);
	INIT_DELAYED_WORK(&grp->reset_work, dl_lent_group_reset_work);
	list_add(&grp->node, &dl_grps);
	return grp;
}

/*
 * Free a group no member is in, out of dl_grps already: its reset work,
 * which takes no lock of ours, is waited for.
 */
static void dl_grp_free(struct dl_lent_grp *grp)
{
	cancel_delayed_work_sync(&grp->reset_work);
	iommu_group_put(grp->group);
	mutex_destroy(&grp->dma_lock);
	mutex_destroy(&grp->lock);
	kfree(grp);
}

/**
 * dl_lent_group_join() - make a device a member of its lent group: claim
 *	DMA ownership with the group's cookie, and attach the group to a
 *	domain if it has none.
 * @lent: the device, being probed (its device lock held).
 * @group: its IOMMU group, of more than one device (dl_lent_group_scan()).
 * @domain: a new paging domain with its fault handler set (a handler that
 *	finds the member from the faulting device): the group's if it has
 *	none, else freed here.
 *
 * Return: 0; -EPERM if another function is bound to a driver that uses
 * the DMA API (@domain freed); -ENOMEM, or what the IOMMU said.
 */
int dl_lent_group_join(struct dl_lent *lent, struct iommu_group *group,
		       struct iommu_domain *domain)
{
	struct pci_dev *pdev = lent->pdev;
	struct dl_lent_grp *grp;
	int ret;

	mutex_lock(&dl_grps_lock);
	grp = dl_grp_find_or_new(pdev, group);
	if (!grp) {
		mutex_unlock(&dl_grps_lock);
		iommu_domain_free(domain);
		return -ENOMEM;
	}
	ret = iommu_device_claim_dma_owner(&pdev->dev, grp);
	if (ret) {
		pci_err(pdev, "lender: cannot claim DMA ownership (%d): another function of its IOMMU group is bound to a driver; lend every function of the group\n",
			ret);
		goto err_free;
	}
	grp->members++;
	WRITE_ONCE(lent->grp, grp);
	/* The idle work may replace the domain meanwhile (dl_grp_fresh_domain()). */
	mutex_lock(&grp->dma_lock);
	if (!grp->domain) {
		ret = iommu_attach_group(domain, grp->group);
		if (ret) {
			mutex_unlock(&grp->dma_lock);
			pci_err(pdev, "lender: cannot attach its IOMMU group to a domain: %d\n",
				ret);
			goto err_leave;
		}
		grp->domain = domain;
	} else {
		iommu_domain_free(domain);
	}
	lent->domain = grp->domain;
	mutex_unlock(&grp->dma_lock);
	mutex_unlock(&dl_grps_lock);
	return 0;

err_leave:
	grp->members--;
	WRITE_ONCE(lent->grp, NULL);
	iommu_device_release_dma_owner(&pdev->dev);
err_free:
	if (grp->members)
		grp = NULL;
	else
		list_del(&grp->node);
	mutex_unlock(&dl_grps_lock);
	if (grp)
		dl_grp_free(grp);
	iommu_domain_free(domain);
	return ret;
}

/**
 * dl_lent_group_leave() - a member goes: its DMA ownership, and the
 *	group's domain after the last member.
 * @lent: the member, taken back (nothing of it mapped) and out of the
 *	table (its device lock held).
 */
void dl_lent_group_leave(struct dl_lent *lent)
{
	struct dl_lent_grp *grp = lent->grp;
	struct iommu_domain *domain = NULL;

	mutex_lock(&dl_grps_lock);
	mutex_lock(&grp->dma_lock);
	lent->domain = NULL;
	if (grp->members == 1) {
		domain = grp->domain;
		grp->domain = NULL;
		iommu_detach_group(domain, grp->group);
	}
	mutex_unlock(&grp->dma_lock);
	iommu_device_release_dma_owner(&lent->pdev->dev);
	WRITE_ONCE(lent->grp, NULL);
	if (--grp->members)
		grp = NULL;
	else
		list_del(&grp->node);
	mutex_unlock(&dl_grps_lock);
	if (domain)
		iommu_domain_free(domain);
	if (grp)
		dl_grp_free(grp);
}

/**
 * dl_lent_domain_attach() - attach the device, or its whole group, to
 *	@domain.
 * @lent: the device (alone in its group).
 * @domain: a domain of ours.
 *
 * Return: 0 or what the IOMMU said.
 */
int dl_lent_domain_attach(struct dl_lent *lent, struct iommu_domain *domain)
{
	if (lent->grp)
		return iommu_attach_group(domain, lent->grp->group);
	return iommu_attach_device(domain, &lent->pdev->dev);
}

/**
 * dl_lent_domain_detach() - undo dl_lent_domain_attach(): the device (or
 *	group) goes to its blocking domain, since DMA ownership is ours.
 * @lent: the device.
 * @domain: the domain it is attached to.
 */
void dl_lent_domain_detach(struct dl_lent *lent, struct iommu_domain *domain)
{
	if (lent->grp)
		iommu_detach_group(domain, lent->grp->group);
	else
		iommu_detach_device(domain, &lent->pdev->dev);
}

/*
 * Whether a member of @grp other than @lent is published as held by
 * someone other than (@fab, @peer, @inc); with @fab NULL, by anyone.
 * @grp->lock held.
 */
static bool dl_grp_held_by_other(struct dl_lent_grp *grp,
				 struct dl_lent *lent, struct dl_fabric *fab,
				 u32 peer, u64 inc)
{
	unsigned long idx = 0;
	struct dl_lent *x;
	bool other = false;

	while ((x = dl_lent_next(&idx))) {
		if (x != lent && READ_ONCE(x->grp) == grp) {
			spin_lock(&x->holder_lock);
			if (x->pub_fab &&
			    (!fab || x->pub_fab != fab || x->pub_peer != peer ||
			     x->pub_inc != inc))
				other = true;
			spin_unlock(&x->holder_lock);
		}
		dl_lent_put(x);
	}
	return other;
}

/**
 * dl_lent_group_lock() - before an acquire: may this holder take the
 *	device, as far as its group goes? On yes, the group's lock stays held
 *	until dl_lent_group_unlock(), after the holder is published.
 * @lent: the device; @lent->lock held.
 * @fab: the fabric of the asking host.
 * @peer: the asking host.
 * @inc: its incarnation.
 *
 * Return: 0 (a device alone in its group, or a member the asker may take);
 * -EBUSY if another member is held by someone else, the group awaits or
 * failed its bus reset, or no member owns a domain.
 */
int dl_lent_group_lock(struct dl_lent *lent, struct dl_fabric *fab, u32 peer,
		       u64 inc)
{
	struct dl_lent_grp *grp = lent->grp;
	const char *why = NULL;

	lockdep_assert_held(&lent->lock);
	if (!grp)
		return 0;
	mutex_lock(&grp->lock);
	if (grp->reset_failed)
		why = "its group's bus reset failed";
	else if (grp->reset_due)
		why = "its group waits for its bus reset";
	else if (dl_grp_held_by_other(grp, lent, fab, peer, inc))
		why = "another function of its group is held by another host or incarnation";
	if (!why)
		return 0;
	mutex_unlock(&grp->lock);
	dev_dbg_ratelimited(&lent->pdev->dev,
			    "lender: host %u asked for device %u: %s\n", peer,
			    lent->dev_id, why);
	return -EBUSY;
}

/**
 * dl_lent_group_unlock() - end what dl_lent_group_lock() began.
 * @lent: the device; @lent->lock held.
 */
void dl_lent_group_unlock(struct dl_lent *lent)
{
	if (lent->grp)
		mutex_unlock(&lent->grp->lock);
}

/**
 * dl_lent_group_defer_reset() - at the start of a take-back: leave the
 *	reset to the group's bus reset?
 * @lent: the device; its device lock and @lent->lock held.
 *
 * Before the holder stops being published: no other member can be
 * taken from then on until the bus is reset.
 *
 * Return: true if the device is a member with no reset of its own: the
 * group's bus is then due for a reset (dl_lent_group_reset_queue()).
 */
bool dl_lent_group_defer_reset(struct dl_lent *lent)
{
	struct dl_lent_grp *grp = lent->grp;

	lockdep_assert_held(&lent->lock);
	if (!grp || lent->resets_alone)
		return false;
	mutex_lock(&grp->lock);
	grp->reset_due = true;
	mutex_unlock(&grp->lock);
	return true;
}

/**
 * dl_lent_group_reset_queue() - after a take-back: queue the group's idle
 *	work, which waits for the last member to come back.
 * @lent: the device.
 */
void dl_lent_group_reset_queue(struct dl_lent *lent)
{
	struct dl_lent_grp *grp = lent->grp;

	if (grp)
		mod_delayed_work(system_unbound_wq, &grp->reset_work, 0);
}

/* Any member of @grp in the table, with a reference, or NULL. */
static struct dl_lent *dl_grp_any_member(struct dl_lent_grp *grp)
{
	unsigned long idx = 0;
	struct dl_lent *x;

	while ((x = dl_lent_next(&idx))) {
		if (READ_ONCE(x->grp) == grp)
			return x;
		dl_lent_put(x);
	}
	return NULL;
}

/**
 * dl_lent_group_dma_lock() - before a member's DMA mappings change or are
 *	read for another member's: the group's @dma_lock; nothing for a
 *	device alone.
 * @lent: the device; @lent->lock held.
 */
void dl_lent_group_dma_lock(struct dl_lent *lent)
{
	if (lent->grp)
		mutex_lock(&lent->grp->dma_lock);
}

/**
 * dl_lent_group_dma_unlock() - end dl_lent_group_dma_lock().
 * @lent: the device.
 */
void dl_lent_group_dma_unlock(struct dl_lent *lent)
{
	if (lent->grp)
		mutex_unlock(&lent->grp->dma_lock);
}

/**
 * dl_lent_group_next_shared() - the first part of [@first, @last] another
 *	member of @lent's group maps (for its own holder's DMA).
 * @lent: a member; the group's @dma_lock held.
 * @first: the first IOVA.
 * @last: the last IOVA.
 * @s_first: set to the first IOVA of that part.
 * @s_last: set to its last.
 * @s_phys: set to what @s_first reaches there.
 *
 * Return: true if there is one, false if no other member maps any of it.
 */
bool dl_lent_group_next_shared(struct dl_lent *lent, u64 first, u64 last,
			       u64 *s_first, u64 *s_last, phys_addr_t *s_phys)
{
	struct dl_lent_grp *grp = lent->grp;
	unsigned long idx = 0, at;
	bool found = false;
	struct dl_lent_dma *m;
	struct dl_lent *x;

	lockdep_assert_held(&grp->dma_lock);
	while ((x = dl_lent_next(&idx))) {
		if (x != lent && READ_ONCE(x->grp) == grp) {
			at = first;
			m = mt_find(&x->dma, &at, last);
			if (m && (!found || max(m->iova, first) < *s_first)) {
				*s_first = max(m->iova, first);
				*s_last = min(m->iova + m->len - 1, last);
				*s_phys = m->phys + (*s_first - m->iova);
				found = true;
			}
		}
		dl_lent_put(x);
	}
	return found;
}

/*
 * Replace the group's domain, which maps nothing, by a fresh one: that
 * frees the page tables its members' holders left, as dma.c does for a
 * device alone. Only while no member maps anything; @dma_lock held.
 */
static void dl_grp_fresh_domain(struct dl_lent_grp *grp, struct dl_lent *any)
{
	struct iommu_domain *old = grp->domain, *fresh;
	bool mapped = false, tables = false;
	unsigned long idx = 0;
	unsigned int seen = 0;
	struct dl_lent *x;

	lockdep_assert_held(&grp->dma_lock);
	if (!old)
		return;
	while ((x = dl_lent_next(&idx))) {
		if (READ_ONCE(x->grp) == grp) {
			seen++;
			mapped |= READ_ONCE(x->dma_count) != 0;
			tables |= READ_ONCE(x->dma_nleaves) ||
				  READ_ONCE(x->dma_nmids);
		}
		dl_lent_put(x);
	}
	/*
	 * A member being probed or removed is not in the table, and would
	 * keep the old domain: another time.
	 */
	if (mapped || !tables || seen != READ_ONCE(grp->members))
		return;
	fresh = iommu_paging_domain_alloc(&any->pdev->dev);
	if (IS_ERR(fresh))
		return;
	/* The same handler, which finds the member from the device. */
	iommu_set_fault_handler(fresh, old->handler, old->handler_token);
	iommu_detach_group(old, grp->group);
	if (iommu_attach_group(fresh, grp->group)) {
		iommu_domain_free(fresh);
		if (iommu_attach_group(old, grp->group))
			dev_err_ratelimited(&any->pdev->dev,
					    "lender: its IOMMU group is in no domain of ours (DMA blocked) until it is lent again\n");
		return;
	}
	idx = 0;
	while ((x = dl_lent_next(&idx))) {
		if (READ_ONCE(x->grp) == grp) {
			WRITE_ONCE(x->domain, fresh);
			dl_lent_tables_forget(x);
		}
		dl_lent_put(x);
	}
	grp->domain = fresh;
	iommu_domain_free(old);
	dl_lent_count(any, DL_LCNT_DMA_TABLE_FREES);
}

/**
 * dl_lent_group_reset_work() - once every member of a group is back:
 *	reset its bus if a member has no reset of its own, so that the next
 *	holder finds none of the last one's state, and free the page tables
 *	the holders left.
 * @work: &dl_lent_grp.reset_work.
 *
 * The bus reset only when every device of the IOMMU group is a member
 * (lent): it resets every function of the slot. A member's device lock
 * taken (pci_reset_bus() only tries them) makes it try again shortly.
 */
void dl_lent_group_reset_work(struct work_struct *work)
{
	struct dl_lent_grp *grp = container_of(to_delayed_work(work),
					       struct dl_lent_grp, reset_work);
	struct dl_grp_scan s;
	struct dl_lent *any;
	bool reset;
	int ret;

	mutex_lock(&grp->lock);
	if (dl_grp_held_by_other(grp, NULL, NULL, 0, 0)) {
		mutex_unlock(&grp->lock);
		return;
	}
	reset = grp->reset_due && !grp->reset_failed;
	mutex_unlock(&grp->lock);

	any = dl_grp_any_member(grp);
	if (!any)
		return;
	mutex_lock(&grp->dma_lock);
	dl_grp_fresh_domain(grp, any);
	mutex_unlock(&grp->dma_lock);
	if (!reset)
		goto out_put;
	s = (struct dl_grp_scan){ .pdev = any->pdev };
	iommu_group_for_each_dev(grp->group, &s, dl_grp_scan_one);
	if (s.n != READ_ONCE(grp->members)) {
		/* A function is not ours: a bus reset would reset it too. */
		dev_warn_ratelimited(&any->pdev->dev,
				     "lender: %u of the %u functions of its group are lent; no bus reset until all are\n",
				     READ_ONCE(grp->members), s.n);
		goto out_put;
	}
	ret = dl_lent_reset_bus(any->pdev);
	if (ret == -EAGAIN) {
		mod_delayed_work(system_unbound_wq, &grp->reset_work,
				 msecs_to_jiffies(DL_GRP_RESET_RETRY_MS));
		goto out_put;
	}
	mutex_lock(&grp->lock);
	grp->reset_due = false;
	grp->reset_failed = !!ret;
	mutex_unlock(&grp->lock);
	if (ret)
		pci_warn(any->pdev,
			 "lender: the bus reset of its group failed: %d; its functions are lent to nobody until they are lent again\n",
			 ret);
	else
		dl_lent_count(any, DL_LCNT_GROUP_RESETS);
out_put:
	dl_lent_put(any);
}

/**
 * dl_lent_group_id() - what peers are told of the device's group
 *	(&dl_dev_info_ext.group).
 * @lent: the device.
 *
 * The same for every function of one slot, whenever and however often the
 * group is lent: its PCI domain, bus and slot, the low bit set.
 *
 * Return: that, or 0 for a device alone in its group.
 */
u32 dl_lent_group_id(struct dl_lent *lent)
{
	struct pci_dev *pdev = lent->pdev;

	if (!READ_ONCE(lent->grp))
		return 0;
	return (u32)(pci_domain_nr(pdev->bus) & 0xffff) << 16 |
	       pdev->bus->number << 8 | PCI_SLOT(pdev->devfn) << 3 | 1;
}
