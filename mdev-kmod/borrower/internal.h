/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Borrower internals, shared by the files of borrower/ and by nothing else.
 *
 * One struct dl_borrower per fabric (main.c), the borrower's client
 * context for it: the mdev parent on the adapter (parent.c), the table of
 * remote devices its peers lend (remote.c), its leases (lease.c), and the
 * mdevs that each stand for one remote device (struct dl_vdev).
 *
 * An mdev is layered; calls go down only (make callgraph checks it):
 *   vdev.c      vfio_device_ops, open and close: the top, wires the rest
 *   irq.c       interrupts, ERR and REQ       (struct dl_vdev_irq)
 *   config.c    the virtual config space      (struct dl_vdev_config)
 *   dma.c       pinned and mapped memory      (struct dl_vdev_dma)
 *   session.c   borrow, requests, loss, release (struct dl_session)
 *   remote.c, lease.c   the remote table, the leases (in struct dl_borrower)
 * (irq.c asks config.c where MSI and MSI-X are; config.c and dma.c do not
 * call each other.)
 * Each part of struct dl_vdev is written by its file only. A lower layer
 * tells an upper one through a table of callbacks the upper one
 * registered (struct dl_session_ops, dl_config_ops, dl_remote_owner) or
 * through what it returns, never by calling it.
 *
 * Locking, outermost first:
 *  - vdev->lock (mutex): the mdev's binding to its remote device, its
 *    borrow state, its virtual config space, its interrupt setup.
 *  - vdev->dma.lock (mutex): what the mdev has pinned and mapped. Taken
 *    by VFIO's dma_unmap() under the container's device_list_lock, and
 *    around vfio_pin_pages(), which takes the container's lock.
 *  - b->lock (mutex): the remote table and the list of mdevs.
 *  - b->fire_lock (spinlock): the list of mdevs, for the interrupt relay.
 *  - vdev->irq.lock (spinlock): the eventfds of the mdev.
 *  - vdev->mm.lock (rwsem): the BAR windows and whether their mappings
 *    may be faulted in (mmap.c); read by the fault handler under the
 *    process's mmap lock, written (and the mappings zapped) under any of
 *    the locks above. Nothing is taken inside it but the mm's own locks.
 *  - vdev->irq.intx_mask_lock (mutex), inside vdev->lock only: held
 *    while an INTx mask or unmask waits for ring room; its virqfd thread
 *    and retry work take it alone.
 * All of them sit in the fabric's order where fabric/fabric.h puts a
 * client's locks: inside fab->lock, outside the fabric's leaf locks.
 * vdev->dma.lock sits between VFIO's two locks: inside the container's
 * device_list_lock (VFIO calls dma_unmap() under it), outside its iommu
 * lock (vfio_pin_pages() takes it). VFIO itself takes those two in both
 * orders (see "The debug kernel" in docs/testing.md).
 * Fabric requests are made with vdev->lock held but never with b->lock,
 * b->fire_lock or vdev->irq.lock held.
 */
#ifndef DL_BORROWER_INTERNAL_H
#define DL_BORROWER_INTERNAL_H

#include <linux/kobject.h>
#include <linux/list.h>
#include <linux/mdev.h>
#include <linux/mutex.h>
#include <linux/rwsem.h>
#include <linux/seq_file.h>
#include <linux/spinlock.h>
#include <linux/uuid.h>
#include <linux/vfio.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>

#include "devlend_wire.h"
#include "../fabric/fabric.h"

/* How long the borrower waits for a lender's answer. */
#define DL_B_TIMEOUT_MS		DL_FABRIC_REQ_TIMEOUT_MS
/*
 * A lender answers EIO about a device while it resets it or takes it back
 * (lender/msg.c); requests that must not give up on that are asked again,
 * this often and this far apart.
 */
#define DL_B_BUSY_TRIES		20
#define DL_B_BUSY_MS		100
/* The fixed mdev types. */
#define DL_B_NR_TYPES		3
/* Interrupt indices relayed from the lender: INTx, MSI, MSI-X. */
#define DL_B_NR_IRQ_TYPES	3
/* Most pages one mdev may pin (16 GiB of 4 KiB pages). */
#define DL_B_MAX_PINNED_PAGES	(4UL << 20)

struct dl_vdev;
struct dl_remote;

/**
 * struct dl_remote_owner - the mdev that has a remote device open, as the
 *	remote table sees it: how it is told that the device is no longer
 *	this host's. Its session (session.c) fills it in.
 * @lost: the lender went down, no longer lists the device, or says
 *	someone else has it; called with &dl_borrower.lock held, @why for
 *	the log.
 */
struct dl_remote_owner {
	void (*lost)(struct dl_remote_owner *o, struct dl_remote *r,
		     const char *why);
};

/**
 * struct dl_rinfo - a remote device as its lender described it, decoded.
 * @vendor: PCI vendor id.
 * @device: PCI device id.
 * @class_rev: class code << 8 | revision.
 * @state: an &enum dl_lent_state.
 * @borrower: host id of its borrower, %DL_NO_HOST if none.
 * @flags: DL_DEV_F_*.
 * @msix_count: MSI-X vectors.
 * @msi_count: MSI vectors.
 * @cfg_size: bytes of config space, 256 or 4096.
 * @bar_size: size of each BAR, 0 if absent.
 * @bar_flags: DL_BAR_F_* of each BAR.
 * @name: its PCI address on the lender, printable.
 * @pf_name: for a virtual function (%DL_DEV_F_VF), its PF's PCI address on
 *	the lender, printable; empty if not a VF or the lender did not say.
 * @group: &dl_dev_info_ext.group: the lent IOMMU group it is in, 0 if
 *	alone (or the lender did not say).
 */
struct dl_rinfo {
	u16 vendor;
	u16 device;
	u32 class_rev;
	u16 state;
	u16 borrower;
	u32 flags;
	u16 msix_count;
	u16 msi_count;
	u32 cfg_size;
	u64 bar_size[DL_NUM_BARS];
	u32 bar_flags[DL_NUM_BARS];
	char name[sizeof_field(struct dl_dev_info, name) + 1];
	char pf_name[sizeof_field(struct dl_dev_info_ext, pf_name) + 1];
	u32 group;
};

/**
 * struct dl_remote - one entry of the remote device table; its kobject is
 * <adapter>/fabric/remote/<host>:<dev_id>/ and counts its references.
 * @kobj: the sysfs directory; the last put frees the entry.
 * @node: in &dl_borrower.remotes while listed.
 * @b: the borrower.
 * @host: the lender's host id.
 * @dev_id: the lender's handle.
 * @incarnation: the lender's incarnation the entry belongs to.
 * @lender: the lender's host name.
 * @info: what the lender said last.
 * @gone: the lender went down or no longer lists it.
 * @ntargets: mdevs of this host that target it (remote_device).
 * @owner: the mdev that has it open (its session's callback), or NULL.
 * @borrow_seq: &dl_borrower.borrow_seq when @owner last borrowed it.
 * @incoming_uuid: the mdev to be created as this device's migration
 *	destination (its incoming_mdev file), if @incoming_set.
 * @incoming_set: @incoming_uuid names one.
 *
 * @info, @gone, @ntargets, @owner, @borrow_seq, @incoming_uuid and
 * @incoming_set are under &dl_borrower.lock.
 */
struct dl_remote {
	struct kobject kobj;
	struct list_head node;
	struct dl_borrower *b;
	u32 host;
	u32 dev_id;
	u64 incarnation;
	char lender[sizeof_field(struct dl_fabric_peer_info, name)];
	struct dl_rinfo info;
	bool gone;
	unsigned int ntargets;
	struct dl_remote_owner *owner;
	u64 borrow_seq;
	guid_t incoming_uuid;
	bool incoming_set;
};

/**
 * struct dl_mtype - one of the fixed mdev types.
 * @type: the mdev core's part.
 * @class_mask: bits of the class code (class << 8 | prog-if) compared.
 * @class_val: what they must be.
 * @desc: the type's description.
 */
struct dl_mtype {
	struct mdev_type type;
	u32 class_mask;
	u32 class_val;
	const char *desc;
};

/**
 * struct dl_borrower - the borrower side on one fabric adapter.
 * @fab: the fabric.
 * @dev: the adapter, parent of the mdevs.
 * @host_id: this host's id.
 * @parent: the mdev parent.
 * @types: the mdev types.
 * @type_ptrs: pointers to @types, for the mdev core.
 * @parent_registered: @parent is registered.
 * @lock: @remotes, @vdevs, @scan_pending, @remote_kobj.
 * @remotes: the remote device table.
 * @vdevs: every mdev of this parent.
 * @fire_lock: @vdevs too, for the interrupt relay.
 * @scan_work: reads the lenders' device lists.
 * @scan_pending: bitmap of peers to read.
 * @scan_next: the peer id the scan work looks at first next time, so that
 *	lenders take turns.
 * @borrow_seq: counts borrows, so that a scan knows what it predates.
 * @check_jiffies: when a lender's refusal last made us read its devices.
 * @remote_kobj: <adapter>/fabric/remote/.
 * @dying: the fabric is going away; no more scans.
 * @leases: every &struct dl_lease not yet freed (lease.c).
 * @release_work: returns the devices of unreturned leases.
 * @release_pass: counts runs of @release_work.
 * @nquarantined: pages quarantined now, in all leases.
 * @quarantined_total: pages ever quarantined.
 * @returned_late: leases settled by the release work.
 * @quarantine_refusals: borrows refused while the quarantine was full.
 * @returned: devices returned at close (DEV_RELEASE answered).
 * @lost: mdevs that lost their device (dl_session_lost()).
 * @kept_same: &dl_vdev_dma.kept_same of the mdevs removed.
 * @kept_moved: &dl_vdev_dma.kept_moved of the mdevs removed.
 * @kept_dropped: &dl_vdev_dma.kept_dropped of the mdevs removed.
 * @repin_held: &dl_vdev_dma.repin_held of the mdevs removed.
 * @intx_unmask_retries: &dl_vdev_irq.intx_unmask_retries of the mdevs removed.
 * @window_refused: &dl_vdev_dma.win_refused of the mdevs removed.
 * @direct_fires: &dl_vdev_irq.direct_fires of the mdevs removed.
 * @direct_fallbacks: &dl_vdev_irq.direct_fallbacks of the mdevs removed.
 * @p2p_lock: see p2p.c: @p2p_vdevs, @p2p_maps and what each mdev shows
 *	there (&dl_vdev.p2p); taken inside &dl_vdev.lock, and fabric requests
 *	are made under it.
 * @p2p_vdevs: the mdevs open and borrowed, as they show themselves to the
 *	other mdevs of their VM (&dl_vdev_p2p.node).
 * @p2p_maps: what the lenders map of one mdev's BAR for another's DMA
 *	(&struct dl_p2p_map), as far as this host knows.
 * @p2p_groups: the mdevs open whose device is lent with the other
 *	functions of its IOMMU group (&dl_vdev_p2p.gnode): one VM per group.
 * @p2p_sent: %DL_MSG_P2P_DMA maps the lenders made.
 * @p2p_refused: and refused.
 *
 * @leases and the counters are under @lock.
 */
struct dl_borrower {
	struct dl_fabric *fab;
	struct device *dev;
	u32 host_id;
	struct mdev_parent parent;
	struct dl_mtype types[DL_B_NR_TYPES];
	struct mdev_type *type_ptrs[DL_B_NR_TYPES];
	bool parent_registered;
	struct mutex lock;		/* see above */
	struct list_head remotes;
	struct list_head vdevs;
	spinlock_t fire_lock;		/* @vdevs for the relay */
	struct work_struct scan_work;
	unsigned long scan_pending;
	unsigned int scan_next;
	u64 borrow_seq;
	unsigned long check_jiffies;
	struct kobject *remote_kobj;
	bool dying;
	struct list_head leases;
	struct delayed_work release_work;
	u64 release_pass;
	unsigned long nquarantined;
	u64 quarantined_total;
	u64 returned_late;
	u64 quarantine_refusals;
	u64 returned;
	u64 lost;
	u64 kept_same;
	u64 kept_moved;
	u64 kept_dropped;
	u64 repin_held;
	u64 intx_unmask_retries;
	u64 window_refused;
	u64 direct_fires;
	u64 direct_fallbacks;
	struct mutex p2p_lock;		/* see p2p.c */
	struct list_head p2p_vdevs;
	struct list_head p2p_maps;
	struct list_head p2p_groups;
	u64 p2p_sent;
	u64 p2p_refused;
};

/**
 * struct dl_lease - one borrow of a remote device, for as long as its
 *	lender may reach pages of this host for it (lease.c).
 * @node: in &dl_borrower.leases.
 * @host: the lender's host id.
 * @dev_id: the lender's handle of the device.
 * @incarnation: the lender's incarnation it was borrowed from.
 * @settled: the lender said it holds nothing for it any more; nothing is
 *	quarantined.
 * @unreturned: the device is to be returned (DL_MSG_DEV_RELEASE) by the
 *	release work once the lender is up.
 * @orphaned: its mdev let go of it; freed once settled.
 * @busy: the release work is asking the lender about it; not freed.
 * @pass: the last run of the release work that tried it.
 * @tries: DL_MSG_DEV_RELEASE sent by the release work.
 * @quarantine: pages unpinned for VFIO but held by reference, because the
 *	lender never acknowledged their unmap.
 * @nquarantined: pages in @quarantine.
 * @qwin: the window space (struct dl_qwin) those pages were mapped at,
 *	where this host hands out window space: given back when it settles.
 *
 * Everything is under &dl_borrower.lock.
 */
struct dl_lease {
	struct list_head node;
	u32 host;
	u32 dev_id;
	u64 incarnation;
	bool settled;
	bool unreturned;
	bool orphaned;
	bool busy;
	u64 pass;
	unsigned int tries;
	struct list_head quarantine;
	unsigned long nquarantined;
	struct list_head qwin;
};

/* States of an mdev, as its state attribute shows them. */
enum dl_vdev_state {
	DL_VDEV_IDLE,		/* not holding a remote device */
	DL_VDEV_BORROWED,	/* holding it */
	DL_VDEV_LOST,		/* held it; the lender took it back or died */
	DL_VDEV_RETURNING,	/* giving it back (DEV_RELEASE); closing */
	DL_VDEV_INCOMING,	/* a migration's destination: its source holds it */
};

/**
 * struct dl_session_ops - how the session (session.c) tells the layers
 *	above it about the remote device; vdev.c registers them.
 * @lost: the mdev lost its device (dl_session_lost()), with
 *	&dl_borrower.lock held: tell the user. Must not sleep.
 */
struct dl_session_ops {
	void (*lost)(struct dl_vdev *v);
};

/**
 * struct dl_config_ops - what the virtual config space (config.c) asks of
 *	the layers beside and above it; vdev.c registers them. Each is
 *	called with &dl_vdev.lock held, where the config write needs it.
 * @dma_enable: bus mastering goes on (the device is borrowed): pin and
 *	map guest memory before the write reaches the device; 0 or -errno,
 *	and then bus mastering stays off.
 * @dma_disable: bus mastering went off: unmap and unpin.
 * @reset: a PCIe FLR was written: reset the device.
 * @mem_decode: memory decode went on or off (the BARs' mappings). Optional.
 * @bars_changed: the command register or a BAR register was written: the
 *	BARs the device's own DMA may reach, and where. Optional.
 */
struct dl_config_ops {
	int (*dma_enable)(struct dl_vdev *v);
	void (*dma_disable)(struct dl_vdev *v);
	int (*reset)(struct dl_vdev *v);
	void (*mem_decode)(struct dl_vdev *v, bool on);
	void (*bars_changed)(struct dl_vdev *v);
};

/* Virtual capabilities an mdev serves at most: MSI and MSI-X. */
#define DL_B_VCAPS	2

/**
 * struct dl_vcap - a capability the mdev serves from its copy.
 * @id: its id (dl_cap_is_virtual()).
 * @pos: its offset in config space.
 * @len: its length, all inside the standard config space.
 */
struct dl_vcap {
	u8 id;
	u8 pos;
	u8 len;
};

/**
 * struct dl_irq_direct_vec - an MSI-X vector the device rings straight
 *	through the fabric: one doorbell vector of this host claimed for it.
 * @v: the mdev.
 * @index: the vector.
 * @db_vector: the doorbell vector, or -1 while it is relayed.
 */
struct dl_irq_direct_vec {
	struct dl_vdev *v;
	u32 index;
	int db_vector;
};

/**
 * struct dl_irq_ctx - the eventfds of one interrupt index.
 * @trig: one per vector (may be NULL), @count of them.
 * @count: vectors enabled by the user.
 * @lender_count: vectors the lender was asked to take.
 * @direct: MSI-X only: @lender_count entries once any vector went direct,
 *	else NULL (&dl_vdev.lock).
 * @ndirect: vectors of them with a doorbell vector (&dl_vdev.lock).
 */
struct dl_irq_ctx {
	struct eventfd_ctx **trig;
	u32 count;
	u32 lender_count;
	struct dl_irq_direct_vec *direct;
	u32 ndirect;
};

/* Ranges of guest memory the re-pin waits for, before they are merged. */
#define DL_DMA_HOLES	8

/**
 * struct dl_dma_hole - guest memory [@start, @end) that QEMU unmapped
 *	from under the borrower's pins.
 * @start: first IOVA.
 * @end: IOVA after the last.
 */
struct dl_dma_hole {
	u64 start;
	u64 end;
};

/**
 * struct dl_dma_fill_stats - what pinning guest memory and having the
 *	lender map it cost, summed over every fill (bus mastering on, and
 *	each re-pin after QEMU changed the memory layout).
 * @fills: fills that pinned something.
 * @ns: time spent in them: pinning, sending DL_MSG_DMA_MAPs and waiting
 *	for their answers.
 * @pin_ns: the part of @ns spent pinning: in vfio_pin_pages(), and in
 *	pin_user_pages_remote() for bulk pins.
 * @bulk_pages: of @pages, those pinned in bulk (dma.c, dl_dma_pin_bulk()).
 * @bulk_refused: chunks whose bulk pin failed or did not match VFIO's
 *	pages, and were pinned through VFIO instead.
 * @pages: pages they pinned.
 * @runs: physically contiguous runs sent to the lender.
 * @msgs: DL_MSG_DMA_MAPs sent.
 */
struct dl_dma_fill_stats {
	u64 fills;
	u64 ns;
	u64 pin_ns;
	u64 pages;
	u64 runs;
	u64 msgs;
	u64 bulk_pages;
	u64 bulk_refused;
};

/**
 * struct dl_session - an mdev's session with the lender of its remote
 *	device. Written by session.c only.
 * @state: an &enum dl_vdev_state; written under &dl_vdev.lock,
 *	&dl_borrower.lock and &dl_borrower.fire_lock, so any of them
 *	suffices to read it.
 * @host: the lender's host id, from open on (&dl_vdev.lock).
 * @dev_id: the lender's handle, from open on (&dl_vdev.lock).
 * @lease: the lease of the current borrow, NULL when not borrowing; set
 *	and cleared under &dl_vdev.lock, &dl_vdev_dma.lock and
 *	&dl_borrower.lock, so dma.c reads it under its own lock.
 * @remote_owner: how the remote table tells the session of a loss.
 */
struct dl_session {
	enum dl_vdev_state state;
	u32 host;
	u32 dev_id;
	struct dl_lease *lease;
	struct dl_remote_owner remote_owner;
};

/**
 * struct dl_vdev_config - an mdev's virtual config space. Written by
 *	config.c only, under &dl_vdev.lock (irq.c and vdev.c read it).
 * @vconfig: the virtual config space, &dl_vdev.info.cfg_size bytes, while
 *	open.
 * @map: per byte of @vconfig, its view and masks in the model shared
 *	with the lender (dl_pci_cfg.h), laid at open.
 * @bar_mask: the size mask of each virtual BAR register.
 * @vcaps: the capabilities served from @vconfig (dl_cap_is_virtual()).
 * @nvcaps: how many of @vcaps are used.
 * @pcie_cap: offset of the PCI Express capability, 0 if none.
 */
struct dl_vdev_config {
	u8 *vconfig;
	struct dl_cfg_byte *map;
	u32 bar_mask[DL_NUM_BARS + 1];
	struct dl_vcap vcaps[DL_B_VCAPS];
	u8 nvcaps;
	u8 pcie_cap;
};

/**
 * struct dl_vdev_dma - what an mdev has pinned and had the lender map.
 *	Written by dma.c only, everything under @lock but @repin_work.
 * @lock: see the locking comment above.
 * @pinned: &struct dl_pin_extent list: what is pinned, by IOVA.
 * @pin_pages: the pinned pages, by IOVA page number.
 * @npinned: pages pinned.
 * @pin_mm: the VMM whose memory bulk pins hold (mmgrab()ed), counted in
 *	its locked memory; NULL while there are none.
 * @nbulk: pages pinned in bulk and not through VFIO.
 * @mapped: the lender may hold mappings of the device.
 * @map_gen: counts fills that had the lender map something.
 * @on: bus mastering is on: guest memory is to be mapped.
 * @repin_work: pins and maps again after a dma_unmap().
 * @repin_tries: failed runs of @repin_work in a row.
 * @unmaps_open: VFIO unmaps that told us of a range and have not returned
 *	to their caller yet (the old mapping may still be there): the re-pin
 *	waits for them (@lock).
 * @repin_held: runs of @repin_work that found such an unmap open.
 * @window_start: jiffies when guest memory was unmapped while bus mastering
 *	was on, 0 while nothing waits to be mapped again.
 * @windows: unmaps while bus mastering was on.
 * @window_ms: time DMA to unmapped guest memory was blocked.
 * @holes: ranges that were pinned when QEMU unmapped them while bus
 *	mastering was on; the re-pin waits for QEMU to map them again.
 * @nholes: how many of @holes are used.
 * @kept: pages QEMU unmapped while bus mastering was on, by IOVA page
 *	number: unpinned for VFIO but held by a reference and still mapped by
 *	the lender until the re-pin finds them again.
 * @nkept: pages in @kept.
 * @kept_same: kept pages the re-pin found again at their IOVA: nothing
 *	was sent, the device never lost them.
 * @kept_moved: kept pages whose IOVA the re-pin found on another page:
 *	unmapped, then the new page mapped.
 * @kept_dropped: kept pages never pinned again: unmapped when the re-pin
 *	stopped waiting, or by a reset or bus mastering off.
 * @fill: what pinning and mapping guest memory cost over the mdev's life,
 *	for the benchmark.
 * @win: where the fabric hands out window space (a bounded NTB window):
 *	the address each pinned or kept page was mapped at for the lender,
 *	by IOVA page number, as xa_mk_value(address >> PAGE_SHIFT). Given
 *	back only when the page is (its unmap acknowledged), or quarantined
 *	with it (the DMA ownership rule).
 * @nwin: pages in @win: window space this mdev holds.
 * @win_peer: the lender the addresses in @win were handed out for.
 * @win_refused: maps refused for want of window space (the lender's
 *	window onto this host full, or window_max_pages).
 */
struct dl_vdev_dma {
	struct mutex lock;		/* see above */
	struct list_head pinned;
	struct xarray pin_pages;
	unsigned long npinned;
	struct mm_struct *pin_mm;
	unsigned long nbulk;
	bool mapped;
	u64 map_gen;
	bool on;
	struct delayed_work repin_work;
	unsigned int repin_tries;
	unsigned int unmaps_open;
	u64 repin_held;
	unsigned long window_start;
	unsigned int windows;
	u64 window_ms;
	struct dl_dma_hole holes[DL_DMA_HOLES];
	unsigned int nholes;
	struct xarray kept;
	unsigned long nkept;
	u64 kept_same;
	u64 kept_moved;
	u64 kept_dropped;
	struct dl_dma_fill_stats fill;
	struct xarray win;
	unsigned long nwin;
	u32 win_peer;
	u64 win_refused;
};

/* Where vfio-pci places each region in the device fd, as vdev.c does. */
#define DL_VFIO_OFFSET_SHIFT	40
#define DL_VFIO_OFFSET_MASK	((1ULL << DL_VFIO_OFFSET_SHIFT) - 1)
#define DL_VFIO_INDEX(off)	((off) >> DL_VFIO_OFFSET_SHIFT)
#define DL_VFIO_OFFSET(index)	((u64)(index) << DL_VFIO_OFFSET_SHIFT)

/**
 * struct dl_vdev_mmap - the BARs an mdev maps straight through windows of
 *	the fabric. Written by mmap.c only.
 * @lock: see the top of this file.
 * @asked: the lender was asked for this borrow's windows (&dl_vdev.lock).
 * @live: the windows are this mdev's: it holds the device (@lock).
 * @mem_on: memory decode is on in the virtual command register (@lock).
 * @mapped: a page may be mapped since the last zap (@lock, set under it
 *	held for reading).
 * @win: per BAR, where its window is on this host (@phys), the bytes from
 *	the BAR's start it shows (@len), and whether it is known (@ok)
 *	(@lock).
 * @nskip: entries of @skip and @skip_bar (@lock).
 * @skip: page spans of the MSI-X table and PBA, never mapped (@lock).
 * @skip_bar: their BARs (@lock).
 * @windows: BARs mapped through a window, ever.
 * @window_races: BARs left relayed because a window of this host went
 *	while their window was looked up (dl_fabric_peer_bar_gen()).
 * @zaps: times the mappings were zapped.
 * @faults: pages mapped at fault time.
 * @sigbus: faults refused (decode off, no window, not the holder).
 */
struct dl_vdev_mmap {
	struct rw_semaphore lock;
	bool asked;
	bool live;
	bool mem_on;
	bool mapped;
	struct {
		phys_addr_t phys;
		u64 len;
		bool ok;
	} win[DL_NUM_BARS];
	unsigned int nskip;
	struct dl_fabric_span skip[2];
	unsigned int skip_bar[2];
	u64 windows;
	u64 window_races;
	u64 zaps;
	atomic64_t faults;
	atomic64_t sigbus;
};

/**
 * struct dl_vdev_irq - an mdev's interrupts: the eventfds, and INTx's
 *	mask and unmask. Written by irq.c only.
 * @lock: the eventfds.
 * @irqs: INTx, MSI and MSI-X eventfds.
 * @intx_unmask_msg: the lender took INTx with %DL_IRQ_SET_F_UNMASK_MSG:
 *	VFIO's mask and unmask go to it as %DL_MSG_IRQ_MASK (&dl_vdev.lock).
 * @intx_unmask: the virqfd that unmasks INTx when its eventfd (KVM's
 *	resampler, at the guest's EOI) is signalled, or NULL (&dl_vdev.lock).
 * @intx_mask_lock: orders the INTx masks and unmasks sent from process
 *	context (SET_IRQS, the virqfd's thread, @intx_retry), so that an
 *	unmask sent late never overtakes a mask asked for after it.
 * @intx_unmask_owed: an unmask found the lender's ring full for
 *	%DL_TX_FULL_WAIT_MS; @intx_retry sends it (@intx_mask_lock). INTx
 *	stays masked at the lender until it arrives, so it must not be lost.
 * @intx_retry: sends an owed unmask every %DL_INTX_RETRY_MS until it goes
 *	out, the peer is gone, or INTx is disabled.
 * @intx_unmask_retries: owed unmasks sent again by @intx_retry.
 * @intx_fault_seq: unmask events, for fault_intx_unmask_every (tests).
 * @intx_fault: the virqfd's thread is to find the ring full (tests).
 * @err_trigger: the ERR eventfd.
 * @req_trigger: the REQ eventfd.
 * @direct_fires: doorbells taken on direct MSI-X vectors.
 * @direct_fallbacks: MSI-X vectors that stayed relayed although
 *	direct_irq asked for them direct (no doorbell vector free, or the
 *	lender said no) (&dl_vdev.lock).
 * @latched: the guest is stopped for a migration (migrate.c): interrupts
 *	are noted in @pending, not signalled (@lock).
 * @pending: per index, the vectors that fired while @latched (@lock).
 */
struct dl_vdev_irq {
	spinlock_t lock;		/* the eventfds */
	struct dl_irq_ctx irqs[DL_B_NR_IRQ_TYPES];
	bool intx_unmask_msg;
	struct virqfd *intx_unmask;
	struct mutex intx_mask_lock;	/* see above */
	bool intx_unmask_owed;
	struct delayed_work intx_retry;
	u64 intx_unmask_retries;
	atomic_t intx_fault_seq;
	bool intx_fault;
	struct eventfd_ctx *err_trigger;
	struct eventfd_ctx *req_trigger;
	atomic64_t direct_fires;
	u64 direct_fallbacks;
	bool latched;
	DECLARE_BITMAP(pending[DL_B_NR_IRQ_TYPES], DL_MIG_PENDING_VECS);
};

/**
 * struct dl_vdev_p2p - what an mdev shows the other mdevs of its VM, for
 *	one device's DMA to another's BARs (p2p.c); under
 *	&dl_borrower.p2p_lock but @mm.
 * @node: in &dl_borrower.p2p_vdevs while @shown.
 * @shown: in that list.
 * @mm: the opener's mm while open (mmgrab()ed, so that it is not another
 *	process's later); written under &dl_vdev.lock.
 * @vm: its VM: the KVM the VMM gave VFIO, else @mm.
 * @host: its lender.
 * @dev_id: its device there.
 * @master: its DMA reaches guest memory (bus mastering on, memory
 *	mapped, borrowed): other devices' BARs may be mapped for it.
 * @bar: where the guest put each memory BAR while memory decode is on,
 *	page aligned; 0: nowhere.
 * @gnode: in &dl_borrower.p2p_groups while @group is nonzero.
 * @group: while open, the lent IOMMU group of its device (0: alone).
 * @ghost: then its lender.
 * @gvm: then the VM it is open in (as @vm).
 */
struct dl_vdev_p2p {
	struct list_head node;
	bool shown;
	struct mm_struct *mm;
	const void *vm;
	u32 host;
	u32 dev_id;
	bool master;
	u64 bar[DL_NUM_BARS];
	struct list_head gnode;
	u32 group;
	u32 ghost;
	const void *gvm;
};

/**
 * struct dl_p2p_map - a BAR of mdev @y's device that @x's lender maps for
 *	@x's device's DMA (or refused to), under &dl_borrower.p2p_lock.
 * @node: in &dl_borrower.p2p_maps.
 * @x: the mdev whose device DMAs.
 * @y: the mdev whose BAR it is.
 * @bar: the BAR.
 * @iova: where, as the guest put it.
 * @refused: the lender refused it there: not asked again for that place.
 */
struct dl_p2p_map {
	struct list_head node;
	struct dl_vdev *x;
	struct dl_vdev *y;
	unsigned int bar;
	u64 iova;
	bool refused;
};

/**
 * struct dl_vdev_bar_dma - the device's memory BARs as the lender maps
 *	them for the device's own DMA, where the guest put them (bar_dma.c);
 *	all under &dl_vdev.lock.
 * @mapped: bit i: BAR i is mapped at @iova[i], as far as this host knows.
 * @iova: where.
 * @refused: bit i: the lender refused BAR i at @refused_iova[i]; not
 *	asked again until the guest moves it.
 * @refused_iova: where.
 * @maps: maps the lender made.
 * @refusals: maps it refused.
 */
struct dl_vdev_bar_dma {
	u8 mapped;
	u64 iova[DL_NUM_BARS];
	u8 refused;
	u64 refused_iova[DL_NUM_BARS];
	u64 maps;
	u64 refusals;
};

/**
 * struct dl_vdev_mig - an mdev's live migration (migrate.c): the VFIO
 *	migration state machine and device dirty logging. Written by
 *	migrate.c only, under &dl_vdev.lock.
 * @state: the VFIO migration state.
 * @incoming: the next open is a migration's destination (the mdev's
 *	`migration` attribute): it holds nothing until its guest's state
 *	is loaded and it takes the device over.
 * @quiesced: the lender stopped the device for this mdev's guest, which
 *	is stopped; it resumes the device when the guest runs.
 * @stop_err: the quiesce at this stop failed (-ETIMEDOUT: the device did
 *	not settle): the device runs on, and the stop's copy is refused
 *	with this error, which fails the migration; 0 otherwise.
 * @ticket: the lender's ticket for it, for the migration stream; 0 once
 *	used (a destination that took the device over) or when not
 *	quiesced.
 * @file: the data file of the saving or resuming state, or NULL.
 * @st: the device state saved (source) or loaded (destination).
 * @loaded: @st was read and checked (destination).
 * @logging: device dirty logging is on.
 * @wrote: while logging, the device may have written guest memory: it was
 *	mapped for its DMA at some time since the logging started.
 * @fills: dl_dma_wrote_since()'s mark.
 * @quiesces: quiesces the lender granted.
 * @unsettled: quiesces refused because the device did not settle.
 * @takeovers: devices taken over from a migration's source.
 * @settle_ms: the lender's wait for the device, at the last quiesce.
 */
struct dl_vdev_mig {
	enum vfio_device_mig_state state;
	bool incoming;
	bool quiesced;
	int stop_err;
	u64 ticket;
	struct dl_mig_file *file;
	struct dl_mig_state st;
	bool loaded;
	bool logging;
	bool wrote;
	u64 fills;
	u64 quiesces;
	u64 unsettled;
	u64 takeovers;
	u32 settle_ms;
};

/**
 * struct dl_vdev - one mdev: a VFIO PCI device that stands for a remote
 *	device. The fields here are vdev.c's (and parent.c's, which creates
 *	the mdev and sets its target); each part below is written by one file
 *	only, the others read it.
 * @vdev: the VFIO device.
 * @b: the borrower (outlives every mdev of its parent).
 * @mtype: the mdev's type.
 * @node: in &dl_borrower.vdevs.
 * @lock: see the locking comment above.
 * @remote: the remote device it targets (a reference), NULL for any.
 * @open: between open_device and close_device.
 * @info: what the lender said at open.
 * @session_ops: how the session tells the layers above of a loss.
 * @config_ops: what the virtual config space asks of DMA and the device.
 * @sess: the session with the lender (session.c).
 * @cfg: the virtual config space (config.c).
 * @dma: pinned and mapped guest memory (dma.c).
 * @irq: the interrupts (irq.c).
 * @bar_dma: the BARs mapped for the device's own DMA (bar_dma.c).
 * @mig: live migration (migrate.c).
 */
struct dl_vdev {
	struct vfio_device vdev;
	struct dl_borrower *b;
	struct dl_mtype *mtype;
	struct list_head node;
	struct mutex lock;		/* see above */
	struct dl_remote *remote;
	bool open;
	struct dl_rinfo info;
	const struct dl_session_ops *session_ops;
	const struct dl_config_ops *config_ops;
	struct dl_session sess;
	struct dl_vdev_config cfg;
	struct dl_vdev_dma dma;
	struct dl_vdev_irq irq;
	struct dl_vdev_mmap mm;
	struct dl_vdev_bar_dma bar_dma;
	struct dl_vdev_p2p p2p;
	struct dl_vdev_mig mig;
};

static inline struct dl_vdev *to_dl_vdev(struct vfio_device *vdev)
{
	return container_of(vdev, struct dl_vdev, vdev);
}

static inline struct device *dl_vdev_dev(struct dl_vdev *v)
{
	return v->vdev.dev;
}

/* remote.c */
int dl_remote_add_dir(struct dl_borrower *b);
void dl_remote_remove_all(struct dl_borrower *b);
void dl_remote_scan_work(struct work_struct *work);
void dl_remote_rescan(struct dl_borrower *b, u32 peer);
void dl_remote_check(struct dl_borrower *b, u32 peer);
void dl_remote_peer_up(struct dl_borrower *b, u32 peer);
void dl_remote_peer_down(struct dl_borrower *b, u32 peer);
void dl_remote_changed(struct dl_fabric *fab, const struct dl_fabric_msg *msg,
		       void *priv);
void dl_rinfo_decode(struct dl_rinfo *ri, const struct dl_dev_info *di);
bool dl_remote_matches(const struct dl_remote *r, const struct dl_mtype *mt);
bool dl_remote_is_free(const struct dl_remote *r);
struct dl_remote *dl_remote_find(struct dl_borrower *b, const char *spec);
struct dl_remote *dl_remote_incoming_for(struct dl_borrower *b,
					 const guid_t *uuid);
void dl_remote_put(struct dl_remote *r);
struct dl_remote *dl_remote_get(struct dl_remote *r);

/* parent.c */
int dl_parent_register(struct dl_borrower *b);
void dl_parent_unregister(struct dl_borrower *b);
int dl_parent_driver_register(void);
void dl_parent_driver_unregister(void);

/* session.c */
void dl_session_init(struct dl_vdev *v);
int dl_session_open(struct dl_vdev *v);
void dl_session_close(struct dl_vdev *v);
int dl_session_borrow(struct dl_vdev *v);
bool dl_session_incoming(struct dl_vdev *v);
void dl_session_set_incoming(struct dl_vdev *v, bool incoming);
int dl_session_takeover(struct dl_vdev *v, u32 from, u64 ticket);
int dl_session_quiesce(struct dl_vdev *v, u32 settle_ms, u32 timeout_ms,
		       u64 *ticket, u32 *waited_ms);
int dl_session_resume(struct dl_vdev *v);
int dl_session_request(struct dl_vdev *v, u16 type, const void *data,
		       size_t len, void *resp, size_t resp_size);
void dl_session_refused(struct dl_vdev *v, int err);
void dl_session_lost(struct dl_vdev *v, const char *why);
void dl_session_release(struct dl_vdev *v);

/* vdev.c */
extern const struct vfio_device_ops dl_vdev_ops;

/* migrate.c */
void dl_mig_init(struct dl_vdev *v);
bool dl_mig_supported(void);
bool dl_mig_open(struct dl_vdev *v);
void dl_mig_reset(struct dl_vdev *v);
void dl_mig_close(struct dl_vdev *v);
bool dl_mig_stopped(struct dl_vdev *v);
int dl_mig_set_incoming(struct dl_vdev *v, bool incoming);
const char *dl_mig_show(struct dl_vdev *v);
void dl_vdev_fault(struct dl_fabric *fab, const struct dl_fabric_msg *msg,
		   void *priv);

/* p2p.c */
void dl_p2p_open(struct dl_vdev *v);
void dl_p2p_close(struct dl_vdev *v);
int dl_p2p_group_join(struct dl_vdev *v);
void dl_p2p_group_leave(struct dl_vdev *v);
void dl_p2p_sync(struct dl_vdev *v);
void dl_p2p_forget(struct dl_vdev *v);

/* config.c */
int dl_config_init(struct dl_vdev *v);
void dl_config_free(struct dl_vdev *v);
ssize_t dl_config_rw(struct dl_vdev *v, char __user *buf, size_t count,
		     loff_t pos, bool write);
void dl_config_after_reset(struct dl_vdev *v);
unsigned int dl_config_cap_pos(struct dl_vdev *v, u8 id);
u64 dl_config_bar_addr(struct dl_vdev *v, unsigned int bar);
u16 dl_config_command(struct dl_vdev *v);

/* dma.c */
/*
 * Whether dma.c pins chunks of guest memory in bulk (module parameter
 * bulk_pin): off, everything goes page by page through VFIO, as a
 * fallback and for comparing the two in the benchmark.
 */
extern bool dl_bulk_pin;

/*
 * Module parameter quarantine_max_pages: a borrow is refused while the
 * fabric's quarantine holds this many pages or more (0: a quarter of RAM).
 * Quarantined pages are the borrower's memory that a stalled or dead
 * lender may still reach; they leave the VMM's locked-memory count when
 * VFIO unpins them, and the VMM has often exited by then, so this cap is
 * what bounds them: at most one more borrow's pins past it.
 */
extern unsigned long dl_quarantine_max_pages;
/* Window space one mdev may hold, in pages (0: what the window has). */
extern unsigned long dl_window_max_pages;

/*
 * Tests only (module parameter fault_intx_unmask_every): every Nth INTx
 * unmask from the unmask eventfd finds the lender's ring full, as if the
 * lender had stalled for %DL_TX_FULL_WAIT_MS; 0 never.
 */
extern unsigned int dl_fault_intx_unmask_every;
extern unsigned int dl_fault_unmap_delay_ms;

/*
 * Tests only (module parameter fault_mig_resume_delay_ms): a device this
 * host took over by migration is resumed that many ms late (at most 60 s)
 * when its guest is to run, QEMU's main loop held meanwhile: the window
 * in which a check kills the destination mid-handover.
 */
extern unsigned int dl_fault_mig_resume_delay_ms;

/*
 * Module parameter direct_irq: ask lenders to have each MSI-X vector ring
 * a doorbell of this host itself, through the fabric, instead of relaying
 * it (irq.c); read at each MSI-X enable. Off by default for now.
 */
extern bool dl_direct_irq;
/*
 * Module parameters mig_settle_ms and mig_timeout_ms: what a quiesce asks
 * the lender for (migrate.c), clamped to what it grants.
 */
extern unsigned int dl_mig_settle_ms;
extern unsigned int dl_mig_timeout_ms;
int dl_dma_enable(struct dl_vdev *v);
void dl_dma_disable(struct dl_vdev *v);
void dl_dma_lease_gone(struct dl_vdev *v);
void dl_dma_unmap_range(struct dl_vdev *v, u64 iova, u64 len);
void dl_dma_init(struct dl_vdev *v);
void dl_dma_cancel_repin(struct dl_vdev *v);
void dl_dma_destroy(struct dl_vdev *v);
bool dl_dma_wrote_since(struct dl_vdev *v, u64 *mark);

/* lease.c */
struct dl_lease *dl_lease_new(struct dl_borrower *b, u32 host, u32 dev_id,
			      u64 incarnation);
void dl_lease_quarantine(struct dl_borrower *b, struct dl_lease *l,
			 struct page *page);
void dl_lease_quarantine_win(struct dl_borrower *b, struct dl_lease *l,
			     u64 addr, u64 len);
void dl_lease_settle(struct dl_borrower *b, struct dl_lease *l,
		     const char *why);
void dl_lease_return_later(struct dl_borrower *b, struct dl_lease *l);
void dl_lease_put(struct dl_borrower *b, struct dl_lease *l);
bool dl_lease_answer_settles(int ret);
void dl_lease_release_work(struct work_struct *work);
void dl_lease_peer_up(struct dl_borrower *b);
void dl_lease_teardown(struct dl_borrower *b);
void dl_lease_show(struct seq_file *s, struct dl_borrower *b);

/* main.c: the borrower as a fabric client; its context is a dl_borrower. */
extern struct dl_fabric_client dl_borrower_client;

/* debugfs.c */
void dl_borrower_debugfs_add(void);
void dl_borrower_debugfs_remove(void);

/* bar_dma.c */
void dl_bar_dma_forget(struct dl_vdev *v);
void dl_bar_dma_sync(struct dl_vdev *v);

/* mmap.c */
struct vfio_info_cap;
struct vfio_region_info;
struct vm_area_struct;
void dl_mmap_init(struct dl_vdev *v);
void dl_mmap_fetch(struct dl_vdev *v);
void dl_mmap_decode(struct dl_vdev *v, bool on);
void dl_mmap_drop(struct dl_vdev *v);
void dl_mmap_window_lost(struct dl_vdev *v, phys_addr_t phys, u64 len);
int dl_mmap_region_info(struct dl_vdev *v, unsigned int bar,
			struct vfio_region_info *info, struct vfio_info_cap *caps);
int dl_mmap_mmap(struct dl_vdev *v, struct vm_area_struct *vma);

/* irq.c */
int dl_irq_info(struct dl_vdev *v, struct vfio_irq_info *info);
int dl_irq_set(struct dl_vdev *v, struct vfio_irq_set *hdr, void *data);
void dl_irq_release_all(struct dl_vdev *v);
void dl_irq_signal_err(struct dl_vdev *v);
void dl_irq_signal_req(struct dl_vdev *v);
void dl_irq_init(struct dl_vdev *v);
void dl_irq_destroy(struct dl_vdev *v);

/* Milliseconds between sends of an owed INTx unmask. */
#define DL_INTX_RETRY_MS	100
void dl_irq_signal_lost(struct dl_vdev *v);
void dl_irq_latch(struct dl_vdev *v);
void dl_irq_unlatch(struct dl_vdev *v, bool deliver);
void dl_irq_pending_save(struct dl_vdev *v, struct dl_mig_state *st);
void dl_irq_pending_load(struct dl_vdev *v, const struct dl_mig_state *st);
int dl_irq_replay(struct dl_vdev *v);
u32 dl_irq_max_vectors(struct dl_vdev *v);
void dl_irq_fire(struct dl_fabric *fab, const struct dl_fabric_msg *msg,
		 void *priv);
bool dl_irq_fire_atomic(struct dl_fabric *fab, const struct dl_fabric_msg *msg,
			void *priv);

#endif /* DL_BORROWER_INTERNAL_H */
