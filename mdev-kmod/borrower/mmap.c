// SPDX-License-Identifier: GPL-2.0
/*
 * BARs straight through a window: memory BARs the lender shows through
 * the fabric (%DL_MSG_BAR_WINDOW), offered to the VMM as mmap-able sparse
 * areas of the BAR regions, so that the guest's loads and stores reach
 * the device with no message and no exit (docs/lending.md).
 *
 * The windows are asked for once per borrow, when the VMM first asks for
 * a BAR's region info (QEMU does so as it sets the device up, before it
 * maps anything); a BAR without one stays relayed (vdev.c). The areas
 * leave out the pages of the MSI-X table and PBA, which stay trapped.
 *
 * Mappings are made at fault time (vmf_insert_pfn()), as vfio-pci does,
 * and only while the mdev holds the device, its window is known, and
 * memory decode is on in the virtual command register. Whenever one of
 * those stops (decode off, a reset, a loss of the device, its release)
 * every mapping of the mdev's BARs is zapped under @lock held for
 * writing, so that a fault racing with it either finds the new state
 * (SIGBUS) or its page is zapped after it: nothing reaches a device that
 * does not decode (CVE-2020-12888) or a window that is no longer this
 * mdev's.
 */
#include <linux/mm.h>
#include <linux/pci.h>
#include <linux/rwsem.h>
#include <linux/slab.h>
#include <linux/vfio.h>

#include "internal.h"

/* The BAR a vma maps: its region index, from the offset vdev.c gives. */
static int dl_mmap_vma_bar(struct vm_area_struct *vma, u64 *start)
{
	u64 index = vma->vm_pgoff >> (DL_VFIO_OFFSET_SHIFT - PAGE_SHIFT);

	*start = ((u64)vma->vm_pgoff << PAGE_SHIFT) & DL_VFIO_OFFSET_MASK;
	if (index > VFIO_PCI_BAR5_REGION_INDEX)
		return -EINVAL;
	return index - VFIO_PCI_BAR0_REGION_INDEX;
}

/* Whether the page at @off of @bar holds the MSI-X table or PBA. */
static bool dl_mmap_skipped(const struct dl_vdev_mmap *m, unsigned int bar,
			    u64 off)
{
	unsigned int i;

	for (i = 0; i < m->nskip; i++)
		if (m->skip_bar[i] == bar && off >= m->skip[i].start &&
		    off < m->skip[i].end)
			return true;
	return false;
}

/* The MSI-X table and PBA pages, from the virtual MSI-X capability. */
static void dl_mmap_find_skips(struct dl_vdev *v)
{
	struct dl_vdev_mmap *m = &v->mm;
	unsigned int pos = dl_config_cap_pos(v, PCI_CAP_ID_MSIX);
	u32 table, pba, n;
	u16 flags;

	m->nskip = 0;
	if (!pos)
		return;
	flags = le16_to_cpu(*(__le16 *)&v->cfg.vconfig[pos + PCI_MSIX_FLAGS]);
	table = le32_to_cpu(*(__le32 *)&v->cfg.vconfig[pos + PCI_MSIX_TABLE]);
	pba = le32_to_cpu(*(__le32 *)&v->cfg.vconfig[pos + PCI_MSIX_PBA]);
	n = (flags & PCI_MSIX_FLAGS_QSIZE) + 1;

	m->skip_bar[0] = table & PCI_MSIX_TABLE_BIR;
	m->skip[0].start = round_down(table & PCI_MSIX_TABLE_OFFSET, PAGE_SIZE);
	m->skip[0].end = round_up((u64)(table & PCI_MSIX_TABLE_OFFSET) +
				  n * PCI_MSIX_ENTRY_SIZE, PAGE_SIZE);
	m->skip_bar[1] = pba & PCI_MSIX_PBA_BIR;
	m->skip[1].start = round_down(pba & PCI_MSIX_PBA_OFFSET, PAGE_SIZE);
	m->skip[1].end = round_up((u64)(pba & PCI_MSIX_PBA_OFFSET) +
				  DIV_ROUND_UP(n, 64) * 8, PAGE_SIZE);
	m->nskip = 2;
}

/* Zap every mapping of the mdev's BARs; @lock held for writing. */
static void dl_mmap_zap_locked(struct dl_vdev *v)
{
	lockdep_assert_held_write(&v->mm.lock);

	if (!v->mm.mapped)
		return;
	unmap_mapping_range(v->vdev.inode->i_mapping,
			    DL_VFIO_OFFSET(VFIO_PCI_BAR0_REGION_INDEX),
			    DL_VFIO_OFFSET(VFIO_PCI_BAR5_REGION_INDEX + 1) -
			    DL_VFIO_OFFSET(VFIO_PCI_BAR0_REGION_INDEX), true);
	v->mm.mapped = false;
	v->mm.zaps++;
}

/**
 * dl_mmap_init() - an mdev with no BAR windows.
 * @v: the mdev.
 */
void dl_mmap_init(struct dl_vdev *v)
{
	init_rwsem(&v->mm.lock);
}

/**
 * dl_mmap_fetch() - ask the lender for the BAR windows of this borrow,
 *	unless asked already.
 * @v: the mdev, open; &dl_vdev.lock held.
 *
 * Borrows the device if the fabric could use a window of its lender at
 * all. A BAR the lender does not show, or whose window this host cannot
 * find, stays relayed: this never fails.
 */
void dl_mmap_fetch(struct dl_vdev *v)
{
	struct dl_fabric *fab = v->b->fab;
	struct dl_bar_window req, resp;
	struct dl_vdev_mmap *m = &v->mm;
	phys_addr_t phys;
	unsigned int bar;
	u32 gen;
	u64 len;
	int ret;

	lockdep_assert_held(&v->lock);

	if (m->asked || !dl_fabric_peer_bar_capable(fab, v->sess.host))
		return;
	if (dl_session_borrow(v))
		return;
	down_write(&m->lock);
	dl_mmap_find_skips(v);
	up_write(&m->lock);
	for (bar = 0; bar < DL_NUM_BARS; bar++) {
		if (!(v->info.bar_flags[bar] & DL_BAR_F_PRESENT) ||
		    (v->info.bar_flags[bar] & DL_BAR_F_IO) ||
		    v->info.bar_size[bar] < PAGE_SIZE)
			continue;
		memset(&req, 0, sizeof(req));
		req.dev_id = cpu_to_le32(v->sess.dev_id);
		req.bar = bar;
		ret = dl_session_request(v, DL_MSG_BAR_WINDOW, &req,
					 sizeof(req), &resp, sizeof(resp));
		if (ret) {
			dev_dbg(dl_vdev_dev(v), "BAR%u stays relayed: %d\n",
				bar, ret);
			continue;
		}
		len = le64_to_cpu(resp.len);
		/* From the lender: anything. */
		if (resp.bar != bar || le64_to_cpu(resp.offset) || !len ||
		    !PAGE_ALIGNED(len) || len > v->info.bar_size[bar]) {
			dev_warn_ratelimited(dl_vdev_dev(v),
					     "BAR%u: the lender's window (%llu bytes at %llu) does not fit; relayed\n",
					     bar, len, le64_to_cpu(resp.offset));
			continue;
		}
		gen = dl_fabric_peer_bar_gen(fab);
		ret = dl_fabric_peer_bar(fab, v->sess.host,
					 le64_to_cpu(resp.token), len, &phys);
		if (ret || !PAGE_ALIGNED(phys)) {
			dev_info_ratelimited(dl_vdev_dev(v),
					     "BAR%u: no window of this host shows what the lender offers (%d); relayed\n",
					     bar, ret);
			continue;
		}
		down_write(&m->lock);
		/*
		 * A loss sets the state before it drops the windows
		 * (dl_session_lost()): either it is seen here, or the drop
		 * comes after and clears what is set here.
		 */
		if (READ_ONCE(v->sess.state) != DL_VDEV_BORROWED) {
			up_write(&m->lock);
			break;
		}
		/*
		 * A window of this host went since the lookup: its notice
		 * (dl_mmap_window_lost()) may have found nothing here yet,
		 * and @phys may be in it. Under @m->lock, which that notice
		 * takes: a window going from now on finds @phys recorded.
		 */
		if (dl_fabric_peer_bar_gen(fab) != gen) {
			m->window_races++;
			up_write(&m->lock);
			dev_info_ratelimited(dl_vdev_dev(v),
					     "BAR%u: a window onto lenders' BARs went while it was looked up; relayed\n",
					     bar);
			continue;
		}
		m->win[bar].phys = phys;
		m->win[bar].len = len;
		m->win[bar].ok = true;
		m->live = true;
		m->windows++;
		up_write(&m->lock);
		dev_info(dl_vdev_dev(v), "BAR%u: %llu bytes mapped straight through the fabric\n",
			 bar, len);
	}
	m->asked = true;
}

/**
 * dl_mmap_decode() - memory decode went on or off in the virtual command
 *	register (a config write, a reset).
 * @v: the mdev; &dl_vdev.lock held.
 * @on: the new state.
 *
 * Off zaps every mapping: the device must see no access while it does
 * not decode.
 */
void dl_mmap_decode(struct dl_vdev *v, bool on)
{
	down_write(&v->mm.lock);
	v->mm.mem_on = on;
	if (!on)
		dl_mmap_zap_locked(v);
	up_write(&v->mm.lock);
}

/* The windows are no longer this mdev's: zapped, and faults get SIGBUS. */
static void dl_mmap_forget_locked(struct dl_vdev *v)
{
	v->mm.live = false;
	memset(v->mm.win, 0, sizeof(v->mm.win));
	dl_mmap_zap_locked(v);
}

/**
 * dl_mmap_drop() - the windows are no longer this mdev's: the device was
 *	lost, released or the mdev closed. Zaps every mapping; faults get
 *	SIGBUS from now on, and the next borrow asks again.
 * @v: the mdev; any of its locks but @v->mm.lock may be held.
 */
void dl_mmap_drop(struct dl_vdev *v)
{
	struct dl_vdev_mmap *m = &v->mm;

	down_write(&m->lock);
	dl_mmap_forget_locked(v);
	up_write(&m->lock);
	/* Asked again only by the next borrow's region info (&dl_vdev.lock). */
	WRITE_ONCE(m->asked, false);
}

/**
 * dl_mmap_window_lost() - a window of this host onto peers' BARs is going
 *	away: if one of the mdev's BARs is mapped through it, zap every
 *	mapping and forget the windows, as dl_mmap_drop() does; faults get
 *	SIGBUS until the next borrow.
 * @v: the mdev; any of its locks but @v->mm.lock may be held.
 * @phys: where the window is.
 * @len: its bytes.
 */
void dl_mmap_window_lost(struct dl_vdev *v, phys_addr_t phys, u64 len)
{
	struct dl_vdev_mmap *m = &v->mm;
	bool hit = false;
	unsigned int bar;

	down_write(&m->lock);
	for (bar = 0; bar < DL_NUM_BARS; bar++)
		if (m->win[bar].ok && m->win[bar].phys < phys + len &&
		    phys < m->win[bar].phys + m->win[bar].len)
			hit = true;
	if (hit)
		dl_mmap_forget_locked(v);
	up_write(&m->lock);
	if (hit)
		dev_warn(dl_vdev_dev(v),
			 "the window its BARs were mapped through is gone: mappings zapped, accesses fault\n");
}

/**
 * dl_mmap_region_info() - add a BAR's mmap-able areas to its region info.
 * @v: the mdev.
 * @bar: the BAR.
 * @info: the region info; VFIO_REGION_INFO_FLAG_MMAP is added.
 * @caps: where the sparse mmap capability goes.
 *
 * Return: 0 or -ENOMEM.
 */
int dl_mmap_region_info(struct dl_vdev *v, unsigned int bar,
			struct vfio_region_info *info, struct vfio_info_cap *caps)
{
	struct vfio_region_info_cap_sparse_mmap *sparse;
	struct dl_vdev_mmap *m = &v->mm;
	u64 start = 0, len, off;
	unsigned int n = 0;
	size_t size;
	int ret;

	down_read(&m->lock);
	len = m->win[bar].ok ? m->win[bar].len : 0;
	up_read(&m->lock);
	if (!len)
		return 0;
	/* At most the two skipped spans cut the window: three areas. */
	size = struct_size(sparse, areas, 3);
	sparse = kzalloc(size, GFP_KERNEL);
	if (!sparse)
		return -ENOMEM;
	down_read(&m->lock);
	for (off = 0; off < len; off += PAGE_SIZE) {
		if (!dl_mmap_skipped(m, bar, off))
			continue;
		if (off > start && n < 3) {
			sparse->areas[n].offset = start;
			sparse->areas[n].size = off - start;
			n++;
		}
		start = off + PAGE_SIZE;
	}
	up_read(&m->lock);
	if (len > start && n < 3) {
		sparse->areas[n].offset = start;
		sparse->areas[n].size = len - start;
		n++;
	}
	sparse->header.id = VFIO_REGION_INFO_CAP_SPARSE_MMAP;
	sparse->header.version = 1;
	sparse->nr_areas = n;
	ret = n ? vfio_info_add_capability(caps, &sparse->header,
					   struct_size(sparse, areas, n)) : 0;
	kfree(sparse);
	if (!ret && n)
		info->flags |= VFIO_REGION_INFO_FLAG_MMAP |
			       VFIO_REGION_INFO_FLAG_CAPS;
	return ret;
}

/* Whether the page at @off of @bar may be mapped now; @m->lock held. */
static bool dl_mmap_may_map(const struct dl_vdev_mmap *m, unsigned int bar,
			    u64 off)
{
	return m->live && m->mem_on && m->win[bar].ok &&
	       off < m->win[bar].len && !dl_mmap_skipped(m, bar, off);
}

/*
 * Maps the rest of @vma after its faulting page, so that one fault maps
 * it all (as vfio-pci did before huge pfnmaps): a KVM guest's first pass
 * over the BAR otherwise exits and faults once per page. Pages that may
 * not be mapped (the MSI-X table and PBA) are left to fault; the first
 * error ends it quietly, the faulting page being mapped already.
 */
static void dl_mmap_prefault(struct vm_area_struct *vma,
			     const struct dl_vdev_mmap *m, unsigned int bar,
			     u64 start, unsigned long fault_addr)
{
	unsigned long addr;
	u64 off;

	for (addr = vma->vm_start; addr < vma->vm_end; addr += PAGE_SIZE) {
		off = start + (addr - vma->vm_start);
		if (addr == fault_addr || !dl_mmap_may_map(m, bar, off))
			continue;
		if (vmf_insert_pfn(vma, addr, PHYS_PFN(m->win[bar].phys + off)) &
		    VM_FAULT_ERROR)
			break;
	}
}

static vm_fault_t dl_mmap_fault(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	struct dl_vdev *v = vma->vm_private_data;
	struct dl_vdev_mmap *m = &v->mm;
	vm_fault_t ret = VM_FAULT_SIGBUS;
	u64 start, off;
	int bar;

	bar = dl_mmap_vma_bar(vma, &start);
	if (bar < 0)
		return VM_FAULT_SIGBUS;
	off = start + (vmf->address - vma->vm_start);

	down_read(&m->lock);
	if (dl_mmap_may_map(m, bar, off)) {
		ret = vmf_insert_pfn(vma, vmf->address,
				     PHYS_PFN(m->win[bar].phys + off));
		if (!(ret & VM_FAULT_ERROR))
			dl_mmap_prefault(vma, m, bar, start, vmf->address);
		/* Only ever set under the read lock; cleared under write. */
		WRITE_ONCE(m->mapped, true);
		atomic64_inc(&m->faults);
	} else {
		atomic64_inc(&m->sigbus);
		dev_dbg_ratelimited(dl_vdev_dev(v),
				    "BAR%d access at 0x%llx faults: decode off, no window or not the holder\n",
				    bar, off);
	}
	up_read(&m->lock);
	return ret;
}

static const struct vm_operations_struct dl_mmap_vm_ops = {
	.fault = dl_mmap_fault,
};

/**
 * dl_mmap_mmap() - the VMM maps part of a BAR region.
 * @v: the mdev.
 * @vma: the mapping: shared, inside the BAR's window.
 *
 * Nothing is mapped until the first access (dl_mmap_fault()).
 *
 * Return: 0 or -EINVAL.
 */
int dl_mmap_mmap(struct dl_vdev *v, struct vm_area_struct *vma)
{
	struct dl_vdev_mmap *m = &v->mm;
	u64 start, len = vma->vm_end - vma->vm_start;
	bool ok;
	int bar;

	bar = dl_mmap_vma_bar(vma, &start);
	if (bar < 0 || !(vma->vm_flags & VM_SHARED) || !len)
		return -EINVAL;
	down_read(&m->lock);
	ok = m->win[bar].ok && start < m->win[bar].len &&
	     len <= m->win[bar].len - start;
	up_read(&m->lock);
	if (!ok)
		return -EINVAL;
	vma->vm_private_data = v;
	vma->vm_page_prot = pgprot_noncached(vma->vm_page_prot);
	vm_flags_set(vma, VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP);
	vma->vm_ops = &dl_mmap_vm_ops;
	return 0;
}
