// SPDX-License-Identifier: GPL-2.0
/*
 * The devlend-lender PCI driver: lending a device (probe), taking it back
 * (remove), the lend/unlend driver attributes and the per-device devlend/
 * attribute group.
 *
 * A device is lent by binding it to this driver through driver_override.
 * The driver manages DMA itself (.driver_managed_dma): probe claims DMA
 * ownership of the device's IOMMU group and attaches the device to a
 * paging domain of its own, in which nothing is mapped until a borrower
 * maps its memory. Every way back (release, peer down, unlend, module
 * unload) goes through dl_lent_reclaim() (slow.c): bus mastering off,
 * vectors freed, mappings removed, function reset, config state of the
 * lend restored.
 */
#include <linux/device.h>
#include <linux/iommu.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/sysfs.h>

#include "internal.h"

/* Per-device attributes: /sys/bus/pci/devices/<dev>/devlend/. */

static struct dl_lent *dl_lent_of(struct device *dev)
{
	return dev_get_drvdata(dev);
}

static ssize_t dev_id_show(struct device *dev, struct device_attribute *attr,
			   char *buf)
{
	return sysfs_emit(buf, "%u\n", dl_lent_of(dev)->dev_id);
}
static DEVICE_ATTR_RO(dev_id);

static ssize_t state_show(struct device *dev, struct device_attribute *attr,
			  char *buf)
{
	return sysfs_emit(buf, "%s\n",
			  dl_lent_state_name(READ_ONCE(dl_lent_of(dev)->state)));
}
static DEVICE_ATTR_RO(state);

static ssize_t borrower_show(struct device *dev, struct device_attribute *attr,
			     char *buf)
{
	u32 b = READ_ONCE(dl_lent_of(dev)->borrower);

	if (b == DL_NO_HOST)
		return sysfs_emit(buf, "\n");
	return sysfs_emit(buf, "%u\n", b);
}
static DEVICE_ATTR_RO(borrower);

static ssize_t dma_mapped_bytes_show(struct device *dev,
				     struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%llu\n", READ_ONCE(dl_lent_of(dev)->dma_bytes));
}
static DEVICE_ATTR_RO(dma_mapped_bytes);

static ssize_t irq_vectors_show(struct device *dev,
				struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", READ_ONCE(dl_lent_of(dev)->nvecs));
}
static DEVICE_ATTR_RO(irq_vectors);

/* Interrupts relayed to the borrower since lent: a reader takes the rate. */
static ssize_t irq_fires_show(struct device *dev,
			      struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%lld\n",
			  atomic64_read(&dl_lent_of(dev)->cnt[DL_LCNT_IRQ_FIRES]));
}
static DEVICE_ATTR_RO(irq_fires);

/*
 * The hosts the device is lent to: "all", or host ids separated by
 * commas. Others no longer see it (DEV_CHANGED makes them ask again); a
 * holder keeps it until it returns it.
 */
static ssize_t allowed_hosts_show(struct device *dev,
				  struct device_attribute *attr, char *buf)
{
	unsigned long allowed = READ_ONCE(dl_lent_of(dev)->allowed);
	ssize_t len = 0;
	unsigned int h;

	if (allowed == DL_ALL_HOSTS)
		return sysfs_emit(buf, "all\n");
	for_each_set_bit(h, &allowed, DL_MAX_HOSTS)
		len += sysfs_emit_at(buf, len, "%s%u", len ? "," : "", h);
	return len + sysfs_emit_at(buf, len, "\n");
}

static ssize_t allowed_hosts_store(struct device *dev,
				   struct device_attribute *attr,
				   const char *buf, size_t count)
{
	struct dl_lent *lent = dl_lent_of(dev);
	unsigned long allowed = 0;
	char list[64], *p, *tok;
	unsigned int h;

	if (strscpy(list, buf, sizeof(list)) < 0)
		return -EINVAL;
	p = strim(list);
	if (!strcmp(p, "all")) {
		allowed = DL_ALL_HOSTS;
	} else {
		while ((tok = strsep(&p, ",")) != NULL) {
			if (kstrtouint(strim(tok), 10, &h) || h >= DL_MAX_HOSTS)
				return -EINVAL;
			allowed |= BIT(h);
		}
	}
	WRITE_ONCE(lent->allowed, allowed);
	dl_lent_changed_queue(lent);
	pci_info(lent->pdev, "lender: device %u lent to hosts %*pbl\n",
		 lent->dev_id, DL_MAX_HOSTS, &allowed);
	return count;
}
static DEVICE_ATTR_RW(allowed_hosts);

static struct attribute *dl_lent_attrs[] = {
	&dev_attr_dev_id.attr,
	&dev_attr_state.attr,
	&dev_attr_borrower.attr,
	&dev_attr_dma_mapped_bytes.attr,
	&dev_attr_irq_vectors.attr,
	&dev_attr_irq_fires.attr,
	&dev_attr_allowed_hosts.attr,
	NULL
};

static const struct attribute_group dl_lent_group = {
	.name = "devlend",
	.attrs = dl_lent_attrs,
};

static const struct attribute_group *dl_lent_groups[] = {
	&dl_lent_group,
	NULL
};

/* Driver attributes: lend and unlend. */

/*
 * Parse "<pci address>[ <word>]" and find the device. Sets *flag if the
 * second word equals @flag_word.
 */
static struct pci_dev *dl_lender_parse(const char *buf, const char *flag_word,
				       bool *flag)
{
	char name[32], word[16];
	struct device *dev;
	int n;

	*flag = false;
	word[0] = '\0';
	n = sscanf(buf, "%31s %15s", name, word);
	if (n < 1)
		return ERR_PTR(-EINVAL);
	if (n == 2) {
		if (!flag_word || strcmp(word, flag_word))
			return ERR_PTR(-EINVAL);
		*flag = true;
	}
	dev = bus_find_device_by_name(&pci_bus_type, NULL, name);
	if (!dev)
		return ERR_PTR(-ENODEV);
	return to_pci_dev(dev);
}

/*
 * A PF with VFs enabled is not lent: its driver manages the VFs (and its
 * reset would reset them all under their holders). Its VFs are lent one
 * by one instead, and the PF stays with its driver.
 */
static int dl_lender_vfs_check(struct pci_dev *pdev)
{
	int n = pci_num_vf(pdev);

	if (n <= 0)
		return 0;
	pci_err(pdev, "lender: the device has %d SR-IOV virtual function(s) enabled; lend them one by one (the PF stays with its driver), or disable them first (sriov_numvfs 0)\n",
		n);
	return -EBUSY;
}

/*
 * Whether @pdev may be lent: 0, -EALREADY if it is lent, or -EINVAL or
 * -EBUSY (logged) if it may not be.
 */
static int dl_lender_lend_check(struct device_driver *drv,
				struct pci_dev *pdev)
{
	int ret = 0;

	if (pdev->hdr_type != PCI_HEADER_TYPE_NORMAL) {
		pci_err(pdev, "lender: only endpoints (header type 0) can be lent\n");
		return -EINVAL;
	}
	ret = dl_lender_vfs_check(pdev);
	if (ret)
		return ret;
	device_lock(&pdev->dev);
	if (pdev->dev.driver == drv) {
		ret = -EALREADY;
	} else if (pdev->dev.driver && pdev->dev.driver->owner == THIS_MODULE) {
		/* The fabric's own adapter or a window: lending it cuts the fabric. */
		pci_err(pdev, "lender: the device belongs to the devlend fabric; not lent\n");
		ret = -EBUSY;
	}
	device_unlock(&pdev->dev);
	return ret;
}

/* Give a device we did not keep back to whatever driver takes it. */
static void dl_lender_give_back(struct pci_dev *pdev)
{
	device_set_driver_override(&pdev->dev, "");
	if (device_attach(&pdev->dev) < 0)
		pci_warn(pdev, "lender: no driver took the device back\n");
}

/*
 * Lend @pdev and every other function of its IOMMU group (group.c): all
 * leave their drivers before any is probed by ours, since DMA ownership
 * of a group is claimed only while no function uses the DMA API.
 */
static ssize_t lend_store(struct device_driver *drv, const char *buf,
			  size_t count)
{
	struct pci_dev *m[DL_GRP_MAX_MEMBERS], *pdev;
	bool ours[DL_GRP_MAX_MEMBERS] = { };
	unsigned int i, n;
	bool unused;
	int ret;

	pdev = dl_lender_parse(buf, NULL, &unused);
	if (IS_ERR(pdev))
		return PTR_ERR(pdev);
	ret = dl_lender_lend_check(drv, pdev);
	if (ret)
		goto out_put;
	ret = dl_lent_group_pdevs(pdev, m, &n);
	if (ret)
		goto out_put;
	for (i = 0; i < n; i++) {
		ret = dl_lender_lend_check(drv, m[i]);
		ours[i] = ret == -EALREADY;
		if (ret && !ours[i])
			goto out_put_members;
	}

	for (i = 0; i < n; i++) {
		if (ours[i])
			continue;
		ret = device_set_driver_override(&m[i]->dev, DL_LENDER_DRV_NAME);
		if (ret)
			goto err_give_back;
		device_release_driver(&m[i]->dev);
	}
	for (i = 0; i < n; i++) {
		if (ours[i])
			continue;
		ret = device_driver_attach(drv, &m[i]->dev);
		if (ret) {
			pci_err(m[i], "lender: cannot lend: %d; giving it%s back to its driver\n",
				ret, n > 1 ? " and its group" : "");
			goto err_give_back;
		}
	}
	ret = 0;
	goto out_put_members;

err_give_back:
	for (i = 0; i < n; i++) {
		if (ours[i])
			continue;
		if (m[i]->dev.driver == drv)
			device_release_driver(&m[i]->dev);
		dl_lender_give_back(m[i]);
	}
out_put_members:
	for (i = 0; i < n; i++)
		pci_dev_put(m[i]);
out_put:
	pci_dev_put(pdev);
	return ret ? ret : count;
}
static DRIVER_ATTR_WO(lend);

/*
 * Mark a lent device as being unlent, unless it is borrowed and not
 * @force: -EBUSY. A device not ours is skipped (-EINVAL).
 */
static int dl_lender_unlend_mark(struct device_driver *drv,
				 struct pci_dev *pdev, bool force)
{
	struct dl_lent *lent;
	int ret = 0;

	device_lock(&pdev->dev);
	if (pdev->dev.driver != drv) {
		ret = -EINVAL;
		goto out_unlock_dev;
	}
	lent = pci_get_drvdata(pdev);
	mutex_lock(&lent->lock);
	if (lent->state != DL_LENT_AVAILABLE &&
	    lent->state != DL_LENT_FAILED && !force) {
		pci_info(pdev, "lender: device %u is borrowed by host %u; use \"%s force\"\n",
			 lent->dev_id, lent->borrower, pci_name(pdev));
		ret = -EBUSY;
	} else {
		/* No acquire can slip in before the driver is gone. */
		lent->unlending = true;
	}
	mutex_unlock(&lent->lock);
out_unlock_dev:
	device_unlock(&pdev->dev);
	return ret;
}

/* Undo dl_lender_unlend_mark(): the unlend did not go ahead. */
static void dl_lender_unlend_unmark(struct device_driver *drv,
				    struct pci_dev *pdev)
{
	struct dl_lent *lent;

	device_lock(&pdev->dev);
	if (pdev->dev.driver == drv) {
		lent = pci_get_drvdata(pdev);
		mutex_lock(&lent->lock);
		lent->unlending = false;
		mutex_unlock(&lent->lock);
	}
	device_unlock(&pdev->dev);
}

/* Unlend @pdev and every other lent function of its IOMMU group. */
static ssize_t unlend_store(struct device_driver *drv, const char *buf,
			    size_t count)
{
	struct pci_dev *m[DL_GRP_MAX_MEMBERS], *pdev;
	bool marked[DL_GRP_MAX_MEMBERS] = { };
	unsigned int i, n;
	bool force;
	int ret;

	pdev = dl_lender_parse(buf, "force", &force);
	if (IS_ERR(pdev))
		return PTR_ERR(pdev);
	if (pdev->dev.driver != drv) {
		ret = -EINVAL;
		goto out_put;
	}
	ret = dl_lent_group_pdevs(pdev, m, &n);
	if (ret)
		goto out_put;
	for (i = 0; i < n; i++) {
		ret = dl_lender_unlend_mark(drv, m[i], force);
		marked[i] = !ret;
		if (ret == -EBUSY)
			goto err_unmark;
	}
	/* remove() takes each back from the borrower and undoes the lend. */
	for (i = 0; i < n; i++) {
		if (!marked[i])
			continue;
		device_release_driver(&m[i]->dev);
		device_set_driver_override(&m[i]->dev, "");
	}
	/*
	 * Only once none is ours: a driver on the DMA API cannot bind a
	 * function while another of its group is owned for DMA (-EBUSY).
	 */
	for (i = 0; i < n; i++) {
		if (!marked[i])
			continue;
		ret = device_attach(&m[i]->dev);
		if (ret < 0)
			pci_warn(m[i], "lender: reattaching a driver failed: %d\n",
				 ret);
	}
	ret = 0;
	goto out_put_members;

err_unmark:
	for (i = 0; i < n; i++)
		if (marked[i])
			dl_lender_unlend_unmark(drv, m[i]);
out_put_members:
	for (i = 0; i < n; i++)
		pci_dev_put(m[i]);
out_put:
	pci_dev_put(pdev);
	return ret ? ret : count;
}
static DRIVER_ATTR_WO(unlend);

static struct attribute *dl_lender_drv_attrs[] = {
	&driver_attr_lend.attr,
	&driver_attr_unlend.attr,
	NULL
};
ATTRIBUTE_GROUPS(dl_lender_drv);

/* Probe and remove. */

static void dl_lent_free_resv(struct dl_lent *lent)
{
	struct iommu_resv_region *r, *next;

	list_for_each_entry_safe(r, next, &lent->resv, list) {
		list_del(&r->list);
		kfree(r);
	}
}

/*
 * A new paging domain for the device's DMA, its faults reported: for a
 * group's, with no token (the handler finds the member from the device).
 */
static struct iommu_domain *dl_lent_new_domain(struct dl_lent *lent,
					       bool grouped)
{
	struct iommu_domain *domain;

	domain = iommu_paging_domain_alloc(&lent->pdev->dev);
	if (IS_ERR(domain)) {
		pci_err(lent->pdev, "lender: cannot allocate an IOMMU domain: %ld\n",
			PTR_ERR(domain));
		return domain;
	}
	iommu_set_fault_handler(domain, dl_lent_fault_handler,
				grouped ? NULL : lent);
	return domain;
}

/* Alone in its IOMMU group: @domain its own, attached to the device. */
static int dl_lent_own_domain(struct dl_lent *lent,
			      struct iommu_domain *domain)
{
	struct pci_dev *pdev = lent->pdev;
	int ret;

	ret = iommu_device_claim_dma_owner(&pdev->dev, lent);
	if (ret) {
		pci_err(pdev, "lender: cannot claim DMA ownership: %d\n", ret);
		goto err_free_domain;
	}
	ret = iommu_attach_device(domain, &pdev->dev);
	if (ret) {
		pci_err(pdev, "lender: cannot attach to the IOMMU domain: %d\n", ret);
		goto err_release_owner;
	}
	lent->domain = domain;
	return 0;

err_release_owner:
	iommu_device_release_dma_owner(&pdev->dev);
err_free_domain:
	iommu_domain_free(domain);
	return ret;
}

/* Undo dl_lent_own_domain() or dl_lent_group_join(). */
static void dl_lent_leave_domain(struct dl_lent *lent)
{
	if (lent->grp) {
		dl_lent_group_leave(lent);
		return;
	}
	/* A failed domain swap may have left it in none of ours. */
	if (!lent->dma_detached)
		iommu_detach_device(lent->domain, &lent->pdev->dev);
	iommu_domain_free(lent->domain);
	iommu_device_release_dma_owner(&lent->pdev->dev);
}

/*
 * The device's DMA confined: a domain of its own, or its group's
 * (group.c); the group's reserved regions; the IOVA of direct vectors,
 * where the device owns a domain.
 */
static int dl_lent_setup_domain(struct dl_lent *lent)
{
	struct pci_dev *pdev = lent->pdev;
	struct iommu_domain *domain;
	struct iommu_group *group;
	unsigned int n;
	int ret;

	ret = dl_lent_group_scan(pdev, &n);
	if (ret)
		return ret;
	group = iommu_group_get(&pdev->dev);
	if (!group)
		return -EINVAL;
	domain = dl_lent_new_domain(lent, n > 1);
	if (IS_ERR(domain)) {
		ret = PTR_ERR(domain);
		goto out_put;
	}
	/* Each takes the domain, or frees it. */
	if (n > 1) {
		lent->resets_alone = dl_lent_probe_resets_alone(pdev);
		ret = dl_lent_group_join(lent, group, domain);
	} else {
		ret = dl_lent_own_domain(lent, domain);
	}
	if (ret)
		goto out_put;
	ret = iommu_get_group_resv_regions(group, &lent->resv);
	if (ret)
		goto err_leave;
	/* Direct vectors' page, in a group's one domain: not yet. */
	if (!lent->grp) {
		ret = dl_lent_irq_direct_reserve(lent);
		if (ret)
			goto err_free_resv;
	}
	iommu_group_put(group);
	return 0;

err_free_resv:
	dl_lent_free_resv(lent);
err_leave:
	dl_lent_leave_domain(lent);
out_put:
	iommu_group_put(group);
	return ret;
}

static void dl_lent_teardown_domain(struct dl_lent *lent)
{
	dl_lent_free_resv(lent);
	dl_lent_leave_domain(lent);
}

/* The MSI-X table and PBA, which BAR accesses must never reach. */
static void dl_lent_find_msix(struct dl_lent *lent)
{
	struct pci_dev *pdev = lent->pdev;
	u32 table, pba;
	u16 flags;
	u64 n;

	lent->msix_bar = -1;
	lent->pba_bar = -1;
	if (!pdev->msix_cap)
		return;
	pci_read_config_word(pdev, pdev->msix_cap + PCI_MSIX_FLAGS, &flags);
	pci_read_config_dword(pdev, pdev->msix_cap + PCI_MSIX_TABLE, &table);
	pci_read_config_dword(pdev, pdev->msix_cap + PCI_MSIX_PBA, &pba);
	n = (flags & PCI_MSIX_FLAGS_QSIZE) + 1;

	lent->msix_bar = table & PCI_MSIX_TABLE_BIR;
	lent->msix_start = table & PCI_MSIX_TABLE_OFFSET;
	lent->msix_end = lent->msix_start + n * PCI_MSIX_ENTRY_SIZE;
	lent->pba_bar = pba & PCI_MSIX_PBA_BIR;
	lent->pba_start = pba & PCI_MSIX_PBA_OFFSET;
	lent->pba_end = lent->pba_start + DIV_ROUND_UP(n, 64) * 8;
}

static int dl_lent_map_bars(struct dl_lent *lent)
{
	struct pci_dev *pdev = lent->pdev;
	int i, ret;

	ret = pci_request_selected_regions(pdev,
					   pci_select_bars(pdev, IORESOURCE_MEM),
					   DL_LENDER_DRV_NAME);
	if (ret) {
		pci_err(pdev, "lender: cannot claim the memory BARs: %d\n", ret);
		return ret;
	}
	for (i = 0; i < DL_NUM_BARS; i++) {
		struct dl_lent_bar *bar = &lent->bars[i];
		unsigned long flags = pci_resource_flags(pdev, i);

		bar->size = pci_resource_len(pdev, i);
		if (!bar->size)
			continue;
		bar->flags = DL_BAR_F_PRESENT;
		if (flags & IORESOURCE_IO) {
			bar->flags |= DL_BAR_F_IO;
			continue;
		}
		if (flags & IORESOURCE_MEM_64)
			bar->flags |= DL_BAR_F_MEM64;
		if (flags & IORESOURCE_PREFETCH)
			bar->flags |= DL_BAR_F_PREFETCH;
		bar->map = pci_iomap(pdev, i, 0);
		if (!bar->map) {
			pci_err(pdev, "lender: cannot map BAR %d\n", i);
			ret = -ENOMEM;
			goto err_unmap;
		}
	}
	return 0;

err_unmap:
	while (--i >= 0)
		if (lent->bars[i].map)
			pci_iounmap(pdev, lent->bars[i].map);
	pci_release_selected_regions(pdev, pci_select_bars(pdev, IORESOURCE_MEM));
	return ret;
}

static void dl_lent_unmap_bars(struct dl_lent *lent)
{
	int i;

	for (i = 0; i < DL_NUM_BARS; i++)
		if (lent->bars[i].map)
			pci_iounmap(lent->pdev, lent->bars[i].map);
	pci_release_selected_regions(lent->pdev,
				     pci_select_bars(lent->pdev, IORESOURCE_MEM));
}

static int dl_lent_assign_id(struct dl_lent *lent)
{
	u32 id;
	int ret;

	xa_lock(&dl_lender.devs);
	id = dl_lender.next_id;
	if (!id || id == U32_MAX) {
		ret = -ENOSPC;
	} else {
		ret = xa_err(__xa_store(&dl_lender.devs, id, lent, GFP_KERNEL));
		if (!ret) {
			lent->dev_id = id;
			dl_lender.next_id = id + 1;
		}
	}
	xa_unlock(&dl_lender.devs);
	return ret;
}

static int dl_lender_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct dl_lent *lent;
	int ret;

	if (pdev->hdr_type != PCI_HEADER_TYPE_NORMAL) {
		pci_err(pdev, "lender: only endpoints (header type 0) can be lent\n");
		return -EINVAL;
	}
	ret = dl_lender_vfs_check(pdev);
	if (ret)
		return ret;

	lent = kzalloc(sizeof(*lent), GFP_KERNEL);
	if (!lent)
		return -ENOMEM;
	kref_init(&lent->ref);
	lent->pdev = pci_dev_get(pdev);
	mutex_init(&lent->lock);
	spin_lock_init(&lent->intx_lock);
	spin_lock_init(&lent->fast_lock);
	mutex_init(&lent->p2p_lock);
	spin_lock_init(&lent->holder_lock);
	lent->state = DL_LENT_AVAILABLE;
	lent->borrower = DL_NO_HOST;
	lent->allowed = DL_ALL_HOSTS;
	INIT_LIST_HEAD(&lent->resv);
	INIT_WORK(&lent->fault_work, dl_lent_fault_work);
	INIT_WORK(&lent->slow_work, dl_lent_slow_work);
	INIT_WORK(&lent->changed_work, dl_lent_changed_work);
	INIT_WORK(&lent->p2p_work, dl_lent_p2p_work);
	INIT_WORK(&lent->p2p_fence_work, dl_lent_p2p_fence_work);
	dl_lent_dma_init(lent);

	ret = dl_lent_setup_domain(lent);
	if (ret)
		goto err_put;
	ret = pci_enable_device_mem(pdev);
	if (ret) {
		pci_err(pdev, "lender: cannot enable the device: %d\n", ret);
		goto err_teardown_domain;
	}
	ret = dl_lent_map_bars(lent);
	if (ret)
		goto err_disable;
	dl_lent_find_msix(lent);
	ret = dl_lent_dma_bypass_check(lent);
	if (ret)
		goto err_unmap_bars;
	ret = dl_lent_cfg_init(lent);
	if (ret)
		goto err_unmap_bars;

	pci_read_config_word(pdev, PCI_COMMAND, &lent->orig_cmd);
	lent->intx_ok = pdev->pin && pdev->irq && pci_intx_mask_supported(pdev);
	/* The lender keeps INTx masked until a borrower asks for it. */
	pci_intx(pdev, 0);
	pci_clear_master(pdev);
	pci_save_state(pdev);
	lent->saved = pci_store_saved_state(pdev);
	if (!lent->saved) {
		ret = -ENOMEM;
		goto err_cfg_free;
	}
	pci_read_config_word(pdev, PCI_COMMAND, &lent->cmd);

	pci_set_drvdata(pdev, lent);
	ret = dl_lent_assign_id(lent);
	if (ret)
		goto err_free_saved;

	pci_info(pdev, "lender: lent as device %u (%04x:%04x class %06x%s%s), %s\n",
		 lent->dev_id, pdev->vendor, pdev->device, pdev->class,
		 pdev->is_virtfn ? ", a VF of " : "",
		 pdev->is_virtfn ? pci_name(pci_physfn(pdev)) : "",
		 !lent->grp ? "in an IOMMU domain of its own" :
		 lent->domain ? "owning its IOMMU group's domain" :
		 "in its IOMMU group's domain");
	dl_lender_broadcast_changed(lent->dev_id);
	return 0;

err_free_saved:
	kfree(lent->saved);
err_cfg_free:
	dl_lent_cfg_free(lent);
err_unmap_bars:
	dl_lent_unmap_bars(lent);
err_disable:
	pci_disable_device(pdev);
err_teardown_domain:
	dl_lent_teardown_domain(lent);
	cancel_work_sync(&lent->fault_work);
err_put:
	dl_lent_put(lent);
	return ret;
}

static void dl_lender_remove(struct pci_dev *pdev)
{
	struct dl_lent *lent = pci_get_drvdata(pdev);

	/*
	 * Taken back before it leaves the table, never after: a peer that
	 * asks about a device the table no longer has is answered ENODEV,
	 * which tells a borrower that nothing of it is mapped any more, and
	 * it lets its quarantined pages go. Until the mappings are gone the
	 * device stays findable, and requests are answered EAGAIN (busy,
	 * which settles nothing) through the slow hold taken before we wait
	 * for the lock, behind a debugfs reader or the fault work.
	 */
	atomic_inc(&lent->slow_holds);
	mutex_lock(&lent->lock);
	lent->dead = true;
	dl_lent_reclaim(lent, "device no longer lent");
	mutex_unlock(&lent->lock);
	/*
	 * The slow hold is never dropped: whoever found the device before
	 * the erase gets EAGAIN at once instead of spinning on the device
	 * lock, which we hold until the end, and asks again.
	 */
	xa_erase(&dl_lender.devs, lent->dev_id);
	/* We hold the device lock, which a queued reset waits for. */
	dl_lent_slow_cancel(lent);
	pci_intx(pdev, !(lent->orig_cmd & PCI_COMMAND_INTX_DISABLE));

	dl_lent_cfg_free(lent);
	dl_lent_unmap_bars(lent);
	pci_disable_device(pdev);
	/*
	 * Detached and freed first: the fault handler queues the work, on a
	 * lent that dl_lent_put() below may free.
	 */
	dl_lent_teardown_domain(lent);
	cancel_work_sync(&lent->fault_work);
	kfree(lent->saved);
	pci_info(pdev, "lender: device %u no longer lent\n", lent->dev_id);

	dl_lender_broadcast_changed(lent->dev_id);
	dl_lent_put(lent);
}

/* No ids: a device binds only through driver_override (lend). */
static const struct pci_device_id dl_lender_ids[] = {
	{ }
};

struct pci_driver dl_lender_driver = {
	.name = DL_LENDER_DRV_NAME,
	.id_table = dl_lender_ids,
	.probe = dl_lender_probe,
	.remove = dl_lender_remove,
	.groups = dl_lender_drv_groups,
	.dev_groups = dl_lent_groups,
	.driver_managed_dma = true,
};

/**
 * dl_lender_driver_init() - register the devlend-lender PCI driver.
 *
 * Return: 0 or -errno.
 */
int dl_lender_driver_init(void)
{
	return pci_register_driver(&dl_lender_driver);
}

/**
 * dl_lender_driver_exit() - take every lent device back and give each to
 * its own driver again.
 */
void dl_lender_driver_exit(void)
{
	struct pci_dev *pdev = NULL;

	pci_unregister_driver(&dl_lender_driver);

	for_each_pci_dev(pdev) {
		if (device_match_driver_override(&pdev->dev,
						 &dl_lender_driver.driver) <= 0)
			continue;
		device_set_driver_override(&pdev->dev, "");
		if (device_attach(&pdev->dev) < 0)
			pci_warn(pdev, "lender: reattaching a driver failed\n");
	}
}
