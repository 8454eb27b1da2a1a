/* SPDX-License-Identifier: GPL-2.0 */
/*
 * devlend lender internals, shared by the files of lender/ only.
 *
 * Locking, outermost first:
 *  - the lent device's device lock (device_lock(&pdev->dev)): held by the
 *    driver core around probe and remove, and taken by every message
 *    handler and by the peer-down path before anything else, because a
 *    function reset needs it (pci_reset_function_locked());
 *  - lent->lock (mutex): the lent device's state, borrower, DMA mappings
 *    and vectors;
 *  - a lent group's lock (group.c, mutex, inside a member's lent->lock):
 *    holder claims and the bus reset's state; inside it only other
 *    members' holder_lock;
 *  - dl_lender.lock (mutex): the list of fabrics served; held only
 *    briefly, never while waiting for a handler (handlers take it to
 *    broadcast);
 *  - lent->intx_lock (spinlock, inside lent->lock): INTx disable at the
 *    device and lent->intx_masked, against the INTx hard handler;
 *  - lent->fast_lock (spinlock, inside lent->lock or alone; in the doorbell
 *    interrupt inside the fabric's rx_lock): the gate of BAR writes from
 *    the doorbell interrupt (bar.c).
 * The table of lent devices (dl_lender.devs) is an xarray with its own
 * lock; lookups take a reference (lent->ref) and then the locks above,
 * and check lent->dead.
 *
 * Interrupt threads take none of these (the INTx hard handler takes
 * lent->intx_lock only): each vector has a snapshot of the fabric, borrower
 * and dev_id, valid until free_irq() returns.
 */
#ifndef DL_LENDER_INTERNAL_H
#define DL_LENDER_INTERNAL_H

#include <linux/atomic.h>
#include <linux/interrupt.h>
#include <linux/kref.h>
#include <linux/maple_tree.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/spinlock.h>
#include <linux/types.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>

#include "devlend_wire.h"
#include "../include/dl_bar_dma_rules.h"
#include "../fabric/fabric.h"

struct seq_file;
struct dl_lent_grp;
struct iommu_group;

#define DL_LENDER_DRV_NAME	"devlend-lender"

/* Reasons a request is refused, counted per device and shown in debugfs. */
enum dl_lender_reject {
	DL_REJ_MALFORMED,	/* length, reserved fields, unknown values */
	DL_REJ_NODEV,		/* no such dev_id */
	DL_REJ_NOT_HOLDER,	/* the device is held by another host, or by nobody */
	DL_REJ_BUSY,		/* acquire of a held or returning device */
	DL_REJ_CFG_RANGE,	/* config offset, size or alignment */
	DL_REJ_BAR_RANGE,	/* BAR index, offset, size or alignment */
	DL_REJ_BAR_MSIX,	/* into the MSI-X table or PBA */
	DL_REJ_BAR_DECODE,	/* memory decode is off */
	DL_REJ_DMA_RANGE,	/* alignment, zero length, wrap */
	DL_REJ_DMA_WINDOW,	/* not the borrower's RAM */
	DL_REJ_DMA_APERTURE,	/* outside the domain's aperture, or reserved */
	DL_REJ_DMA_OVERLAP,	/* overlaps a mapping */
	DL_REJ_DMA_BUDGET,	/* more than the borrower's RAM size */
	DL_REJ_DMA_FAILED,	/* iommu_map() failed */
	DL_REJ_DMA_MAPS,	/* too many mappings, of the device or its holder */
	DL_REJ_DMA_ALIAS,	/* a borrower page mapped already */
	DL_REJ_DMA_TABLES,	/* more page tables than the holder's budget */
	DL_REJ_IRQ,		/* vector type or count */
	DL_REJ_NOT_ALLOWED,	/* a host the device is not lent to */
	DL_REJ_BAR_DMA,		/* a BAR its own DMA cannot reach there */
	DL_REJ_P2P_DMA,		/* another device's BAR it cannot reach there */
	DL_REJ_GROUP,		/* acquire: its IOMMU group is another's, or resets */
	DL_REJ_MIG,		/* a takeover without the quiesce it names */
	DL_REJ_NR
};

/* Things done, counted per device and shown in debugfs. */
enum dl_lender_counter {
	DL_LCNT_CFG_READS,
	DL_LCNT_CFG_WRITES,
	DL_LCNT_CFG_FILTERED,	/* writes (partly) kept from the hardware */
	DL_LCNT_BAR_READS,
	DL_LCNT_BAR_WRITES,
	DL_LCNT_BAR_WRITES_IN_IRQ,	/* of those, from the doorbell interrupt */
	DL_LCNT_DMA_MAPS,	/* ranges mapped */
	DL_LCNT_DMA_UNMAPS,	/* unmap requests */
	DL_LCNT_DMA_TABLE_FREES,	/* domains replaced by a fresh one */
	DL_LCNT_IRQ_SETS,
	DL_LCNT_IRQ_FIRES,
	DL_LCNT_IRQ_FIRE_ERRORS,
	DL_LCNT_INTX_MASKS,	/* masks asked by the holder */
	DL_LCNT_INTX_UNMASKS,	/* unmasks (ends of INTx) asked by the holder */
	DL_LCNT_IRQ_DIRECTS,	/* vectors made direct (DL_MSG_IRQ_DIRECT) */
	DL_LCNT_BAR_WINDOWS,	/* BARs shown to a holder (DL_MSG_BAR_WINDOW) */
	DL_LCNT_BAR_WINDOW_REVOKES,	/* and taken back from it */
	DL_LCNT_BAR_DMA_MAPS,	/* BARs mapped for their device's DMA */
	DL_LCNT_BAR_DMA_UNMAPS,	/* and unmapped */
	DL_LCNT_P2P_MAPS,	/* other devices' BARs mapped for its DMA */
	DL_LCNT_P2P_UNMAPS,	/* and unmapped */
	DL_LCNT_P2P_REVOKES,	/* its BARs taken from others' domains */
	DL_LCNT_P2P_EXPORTS,	/* its BARs shown to other lenders */
	DL_LCNT_P2P_EXPORT_REVOKES,	/* and taken back, the lender told */
	DL_LCNT_P2P_REVOKES_UNANSWERED,	/* the lender did not answer */
	DL_LCNT_P2P_FENCE_REFUSALS,	/* acquires refused until it does */
	DL_LCNT_P2P_LOOKUPS,	/* other lenders told where they are */
	DL_LCNT_P2P_REMOTE_DROPS,	/* mappings onto other lenders' BARs dropped */
	DL_LCNT_ACQUIRES,
	DL_LCNT_RELEASES,
	DL_LCNT_RECLAIMS,	/* taken back without a release */
	DL_LCNT_RESETS,
	DL_LCNT_FAULTS,
	DL_LCNT_DMA_SHARED,	/* runs another member of its group mapped already */
	DL_LCNT_GROUP_RESETS,	/* bus resets of its IOMMU group */
	DL_LCNT_MIG_QUIESCES,	/* stopped for a holder's migration */
	DL_LCNT_MIG_UNSETTLED,	/* quiesces refused: it did not settle */
	DL_LCNT_MIG_TAKEOVERS,	/* handed to a migration's destination */
	DL_LCNT_MIG_RESUMES,	/* bus mastering back after a quiesce */
	DL_LCNT_NR
};

extern const char * const dl_lender_reject_names[DL_REJ_NR];
extern const char * const dl_lender_counter_names[DL_LCNT_NR];

/**
 * struct dl_lent_bar - one BAR of a lent device.
 * @size: bytes, 0 if absent (or the upper half of a 64-bit BAR).
 * @flags: DL_BAR_F_*.
 * @map: the CPU mapping of a memory BAR, NULL for I/O BARs.
 * @win: the BAR is shown to the holder through a window (bar.c), which
 *	is taken back before the device goes to anyone else (@lock).
 * @win_token: the window's name, as the holder was told (@lock).
 * @win_len: the bytes it shows (@lock).
 * @dma: the BAR is mapped for the device's own DMA at @dma_iova, where the
 *	holder's guest put it (bar_dma.c) (@lock).
 * @dma_iova: then that IOVA.
 * @dma_npieces: then how many parts of the BAR are mapped (@lock);
 * @dma_pieces: they: all but the MSI-X table and PBA pages (@lock).
 * @dma_pad: then, for a BAR that ends inside a page, the rest of that page,
 *	claimed so that no other device's BAR can be put there (@lock).
 */
struct dl_lent_bar {
	u64 size;
	u32 flags;
	void __iomem *map;
	bool win;
	u64 win_token;
	u64 win_len;
	bool dma;
	u64 dma_iova;
	unsigned int dma_npieces;
	struct dl_bar_dma_span dma_pieces[DL_BAR_DMA_MAX_PIECES];
	struct resource *dma_pad;
};

/* Other devices' BARs one device's DMA may reach at once (p2p.c). */
#define DL_P2P_MAX	8
/* Lenders one device's BARs may be shown to at once (p2p_remote.c). */
#define DL_P2P_EXPORTS_MAX	4

/**
 * struct dl_lent_p2p - a BAR of another device mapped for a device's DMA
 *	(p2p.c), under the device's @p2p_lock.
 * @target: the device whose BAR it is, with a reference; NULL for a device
 *	of another lender (p2p_remote.c), named by the next four.
 * @rfab: the fabric that lender is on.
 * @rhost: that lender.
 * @rinc: its incarnation when the mapping was made.
 * @rdev: the device there.
 * @bar: the BAR.
 * @iova: where the holder's guest put it.
 * @len: its bytes (page aligned).
 * @npieces: how many parts of it are mapped;
 * @pieces: they: all but the MSI-X table and PBA pages.
 */
struct dl_lent_p2p {
	struct dl_lent *target;
	struct dl_fabric *rfab;
	u32 rhost;
	u64 rinc;
	u32 rdev;
	unsigned int bar;
	u64 iova;
	u64 len;
	unsigned int npieces;
	struct dl_bar_dma_span pieces[DL_BAR_DMA_MAX_PIECES];
};

/**
 * struct dl_lent_export - a memory BAR of the device shown to another
 *	lender for the DMA of a device it lends to the same holder
 *	(%DL_MSG_P2P_EXPORT; p2p_remote.c), under the device's @lock.
 * @to_host: that lender.
 * @bar: the BAR.
 * @token: the window, as the fabric names it to @to_host.
 * @len: the bytes it shows.
 */
struct dl_lent_export {
	u32 to_host;
	unsigned int bar;
	u64 token;
	u64 len;
};

/**
 * struct dl_lent_vec - one interrupt vector taken for the borrower.
 * @fab: the fabric the borrower is on (snapshot).
 * @peer: the borrower (snapshot).
 * @lent: the device, for counters only.
 * @dev_id: the device's id (snapshot).
 * @type: an &enum dl_irq_type.
 * @index: the vector's index.
 * @irq: its Linux interrupt number.
 * @direct: an MSI-X vector that rings the borrower's doorbell itself: its
 *	handler is freed and the table entry is the lender's (irq.c).
 * @db_data: then the entry's data (the doorbell write).
 * @db_off: and the doorbell register's offset in its page.
 * @name: for /proc/interrupts.
 */
struct dl_lent_vec {
	struct dl_fabric *fab;
	u32 peer;
	struct dl_lent *lent;
	u32 dev_id;
	u16 type;
	u16 index;
	int irq;
	bool direct;
	u32 db_data;
	u32 db_off;
	char name[40];
};

/**
 * struct dl_lent_dma - one mapping in the device's IOMMU domain.
 * @iova: device address.
 * @len: bytes.
 * @addr: the borrower-physical address behind @iova.
 * @phys: where @addr shows in this host (the window).
 */
struct dl_lent_dma {
	u64 iova;
	u64 len;
	u64 addr;
	phys_addr_t phys;
};

/**
 * struct dl_lent - a lent device (the devlend-lender driver bound to it).
 * @ref: references: the table of lent devices, and lookups in progress.
 * @pdev: the device.
 * @dev_id: the handle peers use; never reused while the module is loaded.
 * @lock: see the top of this file.
 * @dead: being removed; lookups must let go (@lock).
 * @unlending: an unlend is under way; acquires fail (@lock).
 * @state: an &enum dl_lent_state (@lock).
 * @borrower: the holder's host id, or %DL_NO_HOST (@lock).
 * @borrower_inc: the holder's incarnation (@lock).
 * @fab: the fabric of the holder (@lock).
 * @domain: the device's IOMMU domain; replaced by a fresh one when all
 *	mappings go (dma.c) (@lock). NULL for a member of a lent group that
 *	does not own the group's domain (group.c).
 * @grp: the lent IOMMU group the device is a member of, NULL for a device
 *	alone in its group (group.c).
 * @resets_alone: for a member of @grp, whether it has a reset of its own
 *	(FLR, AF FLR, a PM reset); a member without one is reset only with
 *	its siblings, by its bus's reset (%DL_DEV_F_NO_RESET). Set at probe.
 * @resv: reserved regions of the device's IOMMU group (no DMA there).
 * @saved: config state saved at probe, loaded back after each reset.
 * @orig_cmd: the command register before the device was lent.
 * @cmd: the command register as last written or read back (@lock).
 * @cfg_size: bytes of config space.
 * @cfg_map: per config byte, its permissions in the model shared with
 *	the borrower (dl_pci_cfg.h): the bits a borrower may write (wmask).
 * @cfg_orig: config space as the device was lent; what a holder may write
 *	past the standard header is put back from it when the device comes
 *	back (dl_lent_cfg_restore()).
 * @flr_pos: the config byte with the FLR bit of PCIe device control, 0 if
 *	the device cannot do FLR.
 * @af_flr_pos: the config byte with the FLR bit of the Advanced Features
 *	capability, 0 if the device cannot do FLR so.
 * @msix_bar: BAR of the MSI-X table (and @pba_bar of the PBA), -1 if none.
 * @msix_start: table offset in its BAR.
 * @msix_end: end of the table.
 * @pba_bar: BAR of the PBA.
 * @pba_start: PBA offset in its BAR.
 * @pba_end: end of the PBA.
 * @bars: the six BARs.
 * @dma: mappings by IOVA range (@lock).
 * @dma_addr: the same mappings by borrower-address range (@lock).
 * @dma_bytes: bytes mapped (@lock; read locklessly for sysfs).
 * @dma_count: mappings (@lock; read locklessly for debugfs and the
 *	per-host cap).
 * @dma_leaves: the IOVA regions of one leaf page table (2 MiB with 4 KiB
 *	pages) the holder had mapped in @domain since it was fresh, by index
 *	(@lock): the leaf tables the IOMMU driver may keep.
 * @dma_mids: the same for the tables one level up (1 GiB) (@lock).
 * @dma_nleaves: entries of @dma_leaves (@lock; read locklessly for
 *	debugfs).
 * @dma_nmids: entries of @dma_mids (@lock; read locklessly for debugfs).
 * @dma_detached: the device is in no domain of ours (blocked): a fresh
 *	domain could not be attached, nor @domain again (@lock).
 * @vecs: the vectors taken, or NULL (@lock).
 * @nvecs: how many (@lock).
 * @vec_type: their &enum dl_irq_type (@lock).
 * @intx_ok: the device has INTx and can mask it (PCI 2.3).
 * @intx_lock: see the top of this file.
 * @intx_masked: the lender set INTx disable at the device: INTx fired and
 *	waits for its end (the holder's unmask, or with
 *	!@intx_unmask_msg its next BAR access), or the borrower disabled or
 *	masked it, or the relay is not set up (@intx_lock).
 * @intx_unmask_msg: the holder ends each INTx with a %DL_MSG_IRQ_MASK
 *	(%DL_IRQ_SET_F_UNMASK_MSG), not by a BAR access (@lock).
 * @intx_vdis: the borrower's INTx disable bit, virtual (@lock).
 * @direct_iova: the IOVA kept out of the holder's reach (in @resv) where
 *	direct MSI-X vectors write, or 0 if there is none (@lock).
 * @direct_page: the doorbell page mapped at @direct_iova, or 0 (@lock).
 * @ndirect: direct vectors (@lock; read without it by debugfs).
 * @mig_quiesced: stopped for the holder's migration (migrate.c): bus
 *	mastering off until it resumes (@lock).
 * @mig_master: bus mastering was on when it was quiesced (@lock).
 * @mig_ticket: what the migration's destination must present, 0 once
 *	used or void (@lock).
 * @mig_req: a quiesce request's payload, for the slow work (@lock).
 * @slow_work: does what may block off the fabric's receive and liveness
 *	works: a request (DEV_RESET, DEV_RELEASE), which it then answers, and
 *	the take-back from a holder that went down.
 * @slow_busy: DL_LENT_SLOW_* bits: such a request is queued or running, or
 *	a take-back from a holder that went down is due; the device takes no
 *	holder request meanwhile (-EAGAIN).
 * @slow_fab: the fabric of that request.
 * @slow_msg: the request, without its payload.
 * @slow_holds: how many resets or take-backs hold the device's locks now,
 *	plus one for good once dl_lender_remove() starts; the receive work
 *	does not wait for the locks while it is nonzero.
 * @changed_work: tells peers the device changed hands, for a handler that
 *	must not wait for ring room itself.
 * @fault_work: sends DL_MSG_DEV_FAULT for the last fault reported.
 * @fault_iova: the address of the last fault reported.
 * @fault_flags: its DL_MSG_DEV_FAULT flags.
 * @fast_lock: see the top of this file.
 * @fast_open: posted BAR writes of the holder may be done in the doorbell
 *	interrupt: the device is borrowed, decodes memory, relays no INTx,
 *	and no reset, take-back or removal is due (@fast_lock).
 * @fast_fab: the holder's fabric, while @fast_open (@fast_lock).
 * @fast_peer: the holder, while @fast_open (@fast_lock).
 * @fast_epoch: the low 32 bits of the holder's incarnation, while
 *	@fast_open (@fast_lock).
 * @allowed: bitmap of the host ids the device is lent to (all at first;
 *	sysfs allowed_hosts). Other hosts are told it does not exist; a
 *	holder keeps it until it returns it.
 * @cnt: &enum dl_lender_counter counters.
 * @rej: &enum dl_lender_reject counters.
 * @p2p_lock: see p2p.c: the P2P mappings below, a leaf lock.
 * @p2p: other devices' BARs mapped for this device's DMA (@p2p_lock).
 * @np2p: how many (@p2p_lock).
 * @p2p_work: serves a holder's %DL_MSG_P2P_DMA onto another lender's
 *	device, which asks that lender first (p2p_remote.c).
 * @p2p_req: that request's payload (@lock).
 * @p2p_msg: that request, without its payload (@lock).
 * @p2p_fab: the fabric of that request (@lock).
 * @p2p_busy: such a request is queued or running (@lock).
 * @exports: its BARs shown to other lenders (@lock).
 * @nexports: how many (@lock).
 * @p2p_fenced: bit h: host h, up, did not confirm it dropped its mappings
 *	onto the device at its last take-back; nobody may take it until h
 *	does, goes down or restarts (@lock).
 * @p2p_fence_inc: each such host's incarnation then (@lock).
 * @p2p_fence_fab: their fabric (@lock).
 * @p2p_fence_work: asks them again (p2p_remote.c).
 * @holder_lock: see p2p.c: the holder as published below, innermost.
 * @pub_fab: the holder's fabric, NULL while none is published.
 * @pub_peer: the holder.
 * @pub_inc: its incarnation.
 * @rcu: frees the device after the doorbell interrupt's lookups.
 */
struct dl_lent {
	struct kref ref;
	struct pci_dev *pdev;
	u32 dev_id;

	struct mutex lock;	/* see above */
	bool dead;
	bool unlending;
	enum dl_lent_state state;
	u32 borrower;
	u64 borrower_inc;
	struct dl_fabric *fab;
	unsigned long allowed;

	struct iommu_domain *domain;
	struct dl_lent_grp *grp;
	bool resets_alone;
	struct list_head resv;
	struct pci_saved_state *saved;
	u16 orig_cmd;
	u16 cmd;
	u32 cfg_size;
	struct dl_cfg_byte *cfg_map;
	u8 *cfg_orig;
	unsigned int flr_pos;
	unsigned int af_flr_pos;

	int msix_bar;
	u64 msix_start;
	u64 msix_end;
	int pba_bar;
	u64 pba_start;
	u64 pba_end;
	struct dl_lent_bar bars[DL_NUM_BARS];

	struct maple_tree dma;
	struct maple_tree dma_addr;
	u64 dma_bytes;
	u64 dma_count;
	struct xarray dma_leaves;
	struct xarray dma_mids;
	u64 dma_nleaves;
	u64 dma_nmids;
	bool dma_detached;

	struct dl_lent_vec *vecs;
	u32 nvecs;
	u16 vec_type;
	bool intx_ok;
	spinlock_t intx_lock;	/* see above */
	bool intx_masked;
	bool intx_unmask_msg;
	bool intx_vdis;
	u64 direct_iova;
	phys_addr_t direct_page;
	u32 ndirect;

	bool mig_quiesced;
	bool mig_master;
	u64 mig_ticket;
	struct dl_mig_quiesce mig_req;

	struct work_struct slow_work;
	unsigned long slow_busy;
	struct dl_fabric *slow_fab;
	struct dl_fabric_msg slow_msg;
	atomic_t slow_holds;
	struct work_struct changed_work;

	struct work_struct fault_work;
	u64 fault_iova;
	u32 fault_flags;

	spinlock_t fast_lock;	/* see above */
	bool fast_open;
	struct dl_fabric *fast_fab;
	u32 fast_peer;
	u32 fast_epoch;

	struct mutex p2p_lock;	/* see p2p.c */
	struct dl_lent_p2p p2p[DL_P2P_MAX];
	unsigned int np2p;
	struct work_struct p2p_work;
	struct dl_p2p_dma p2p_req;
	struct dl_fabric_msg p2p_msg;
	struct dl_fabric *p2p_fab;
	bool p2p_busy;
	struct dl_lent_export exports[DL_P2P_EXPORTS_MAX];
	unsigned int nexports;
	unsigned long p2p_fenced;
	u64 p2p_fence_inc[DL_MAX_HOSTS];
	struct dl_fabric *p2p_fence_fab;
	struct work_struct p2p_fence_work;
	spinlock_t holder_lock;	/* see p2p.c */
	struct dl_fabric *pub_fab;
	u32 pub_peer;
	u64 pub_inc;

	atomic64_t cnt[DL_LCNT_NR];
	atomic64_t rej[DL_REJ_NR];
	struct rcu_head rcu;
};

/**
 * struct dl_lender - the lender side of this host.
 * @lock: see the top of this file.
 * @fabs: the fabrics served, each a &struct dl_lender_fab (@lock).
 * @devs: lent devices by dev_id.
 * @next_id: the next dev_id to give (@devs' lock).
 * @rej: rejections of requests that name no device.
 * @debugfs: /sys/kernel/debug/devlend/lender.
 * @debugfs_maps: /sys/kernel/debug/devlend/lender_maps.
 */
struct dl_lender {
	struct mutex lock;	/* see above */
	struct list_head fabs;
	struct xarray devs;
	u32 next_id;
	atomic64_t rej[DL_REJ_NR];
	struct dentry *debugfs;
	struct dentry *debugfs_maps;
};

extern struct dl_lender dl_lender;
extern struct pci_driver dl_lender_driver;

static inline void dl_lent_count(struct dl_lent *lent,
				 enum dl_lender_counter c)
{
	atomic64_inc(&lent->cnt[c]);
}

static inline void dl_lent_reject(struct dl_lent *lent,
				  enum dl_lender_reject r)
{
	atomic64_inc(lent ? &lent->rej[r] : &dl_lender.rej[r]);
}

static inline const char *dl_lent_state_name(enum dl_lent_state s)
{
	switch (s) {
	case DL_LENT_AVAILABLE:
		return "available";
	case DL_LENT_BORROWED:
		return "borrowed";
	case DL_LENT_RETURNING:
		return "returning";
	case DL_LENT_FAILED:
		return "failed";
	}
	return "?";
}

/* Whether the relay's INTx handler is registered; @lent->lock held. */
static inline bool dl_lent_intx_relayed(struct dl_lent *lent)
{
	return lent->vecs && lent->vec_type == DL_IRQ_INTX;
}

/*
 * Whether the holder's BAR accesses end a relayed INTx (a holder that does
 * not send unmasks); @lent->lock held.
 */
static inline bool dl_lent_intx_ends_on_access(struct dl_lent *lent)
{
	return dl_lent_intx_relayed(lent) && !lent->intx_unmask_msg;
}

/**
 * dl_lent_mem_bar() - a memory BAR of the device, by an index from a peer.
 * @lent: the device.
 * @bar: the index: anything.
 * @b: set to the BAR.
 *
 * Return: 0; -EINVAL for a BAR the device does not have; -EOPNOTSUPP for
 * an I/O BAR (or one this host could not map).
 */
static inline int dl_lent_mem_bar(struct dl_lent *lent, unsigned int bar,
				  struct dl_lent_bar **b)
{
	if (bar >= DL_NUM_BARS || !lent->bars[bar].size)
		return -EINVAL;
	*b = &lent->bars[bar];
	if (!(*b)->map || ((*b)->flags & DL_BAR_F_IO))
		return -EOPNOTSUPP;
	return 0;
}

/* bar.c */
int dl_lent_bar_verdict(struct dl_lent *lent, const struct dl_bar_access *a,
			enum dl_lender_reject *why);
u64 dl_lent_bar_read(struct dl_lent *lent, const struct dl_bar_access *a);
int dl_lent_bar_window(struct dl_lent *lent, struct dl_fabric *fab, u32 peer,
		       unsigned int bar, u64 *token, u64 *len);
void dl_lent_bar_windows_revoke(struct dl_lent *lent);
void dl_lent_bar_write(struct dl_lent *lent, const struct dl_bar_access *a);
void dl_lent_fast_update(struct dl_lent *lent);
void dl_lent_fast_close(struct dl_lent *lent);
void dl_lent_slow_mark(struct dl_lent *lent, unsigned int bit);
bool dl_lender_on_bar_write_atomic(struct dl_fabric *fab,
				   const struct dl_fabric_msg *msg, void *priv);

/* main.c */
/*
 * Tests only (module parameter fault_reclaim_reset_fails): the next N
 * take-backs (dl_lent_reclaim()) report their function reset as failed
 * after doing it, so the check of a device whose reset fails can run on
 * emulated devices that always reset.
 */
extern atomic_t dl_fault_reclaim_reset_fails;

/*
 * Tests only (module parameter fault_p2p_revoke_ignore): other lenders'
 * %DL_MSG_P2P_REVOKE go unanswered and drop nothing, as from a lender
 * that is up but does not answer, so that the fence it leaves
 * (p2p_remote.c) can be checked.
 */
extern bool dl_fault_p2p_revoke_ignore;

/*
 * Tests only (module parameter fault_p2p_lookup_stall_ms): this lender
 * answers other lenders' %DL_MSG_P2P_LOOKUP that many ms late (at most
 * 10 s), its receive work held up meanwhile, as a stalled host's is.
 */
extern unsigned int dl_fault_p2p_lookup_stall_ms;

/*
 * Tests only (module parameter fault_mig_unsettled): the settle rule of
 * a migration's quiesce sees an interrupt at each look, as for a device
 * that keeps interrupting (a NIC under a flood), so it never settles and
 * the holder is told -ETIMEDOUT (migrate.c).
 */
extern bool dl_fault_mig_unsettled;

/**
 * struct dl_lender_fab - the lender's context for one fabric it serves;
 *	added and removed by main.c, walked by the broadcast (peers.c).
 * @node: in dl_lender.fabs.
 * @fab: the fabric.
 */
struct dl_lender_fab {
	struct list_head node;
	struct dl_fabric *fab;
};

/* lent.c */
void dl_lent_put(struct dl_lent *lent);
struct dl_lent *dl_lent_get(u32 dev_id);
struct dl_lent *dl_lent_next(unsigned long *idx);
bool dl_lent_is_holder(struct dl_lent *lent, struct dl_fabric *fab, u32 peer);

/* peers.c */
void dl_lender_respond(struct dl_fabric *fab, const struct dl_fabric_msg *msg,
		       int err, const void *data, size_t len);
void dl_lender_broadcast_changed(u32 dev_id);
void dl_lent_changed_work(struct work_struct *work);
void dl_lent_changed_queue(struct dl_lent *lent);

/* Every host id: a device is lent to all hosts unless told otherwise. */
#define DL_ALL_HOSTS	GENMASK(DL_MAX_HOSTS - 1, 0)

/* Whether @host may see and borrow @lent (see &dl_lent.allowed). */
static inline bool dl_lent_allows(const struct dl_lent *lent, u32 host)
{
	return host < DL_MAX_HOSTS && (READ_ONCE(lent->allowed) & BIT(host));
}

/* driver.c */
int dl_lender_driver_init(void);
void dl_lender_driver_exit(void);

/* msg.c */
int dl_lender_register_handlers(struct dl_fabric *fab);
void dl_lender_unregister_handlers(struct dl_fabric *fab);

/* slow.c */
/* Bits of &dl_lent.slow_busy. */
#define DL_LENT_SLOW_BUSY	0	/* a request waits in @slow_msg */
#define DL_LENT_SLOW_RECLAIM	1	/* its holder went down: take it back */
void dl_lent_reclaim(struct dl_lent *lent, const char *why);
void dl_lent_slow_work(struct work_struct *work);
void dl_lent_slow_cancel(struct dl_lent *lent);
void dl_lent_slow_queue(struct dl_lent *lent);
void dl_lender_peer_down(struct dl_fabric *fab, u32 peer);
void dl_lender_fabric_removing(struct dl_fabric *fab);
void dl_lender_flush_slow(void);

/*
 * Return flags of dl_lent_cfg_write(): part of the write was kept from the
 * hardware; the write asked for a function-level reset, left to the
 * caller (dl_lent_reset()).
 */
#define DL_CFG_WRITE_FILTERED	BIT(0)
#define DL_CFG_WRITE_RESET	BIT(1)

/* decode.c */
bool dl_lent_memory_enable(struct dl_lent *lent);
void dl_lent_memory_restore(struct dl_lent *lent, bool enabled);

/* cfg.c */
int dl_lent_cfg_init(struct dl_lent *lent);
void dl_lent_cfg_free(struct dl_lent *lent);
void dl_lent_cfg_restore(struct dl_lent *lent);
int dl_lent_cfg_read(struct dl_lent *lent, unsigned int pos,
		     unsigned int size, u32 *val);
int dl_lent_cfg_write(struct dl_lent *lent, unsigned int pos,
		      unsigned int size, u32 val);
int dl_lent_reset(struct dl_lent *lent);

/* bar_dma.c */
int dl_lent_bar_dma(struct dl_lent *lent, struct dl_fabric *fab, u32 peer,
		    unsigned int bar, bool map, u64 iova);
void dl_lent_unmap_all(struct dl_lent *lent);

/**
 * dl_lent_bar_dma_busy() - whether a BAR is mapped for its device's DMA
 *	(bar_dma.c) anywhere in [@first, @last].
 * @lent: the device; @lent->lock held.
 * @first: the first IOVA.
 * @last: the last IOVA.
 *
 * Return: true if one is (its whole span counts, skipped pages too).
 */
static inline bool dl_lent_bar_dma_busy(struct dl_lent *lent, u64 first,
					u64 last)
{
	const struct dl_lent_bar *b;
	unsigned int i;

	for (i = 0; i < DL_NUM_BARS; i++) {
		b = &lent->bars[i];
		if (b->dma && first <= b->dma_iova + PAGE_ALIGN(b->size) - 1 &&
		    last >= b->dma_iova)
			return true;
	}
	return false;
}

/**
 * dl_lent_msix_skips() - the page spans of the device's MSI-X table and
 *	PBA in BAR @bar: what no DMA may reach.
 * @lent: the device.
 * @bar: the BAR.
 * @skip: filled, at most %DL_BAR_DMA_MAX_SKIPS.
 *
 * Return: how many.
 */
static inline unsigned int dl_lent_msix_skips(struct dl_lent *lent,
					      unsigned int bar,
					      struct dl_bar_dma_span *skip)
{
	unsigned int n = 0;

	if (lent->msix_bar == bar) {
		skip[n].start = round_down(lent->msix_start, PAGE_SIZE);
		skip[n++].end = round_up(lent->msix_end, PAGE_SIZE);
	}
	if (lent->pba_bar == bar) {
		skip[n].start = round_down(lent->pba_start, PAGE_SIZE);
		skip[n++].end = round_up(lent->pba_end, PAGE_SIZE);
	}
	return n;
}

/**
 * dl_lent_p2p_busy_locked() - whether another device's BAR is mapped for
 *	the device's DMA (p2p.c) anywhere in [@first, @last].
 * @lent: the device; @lent->p2p_lock held.
 * @first: the first IOVA.
 * @last: the last IOVA.
 *
 * Return: true if one is (its whole span counts, skipped pages too).
 */
static inline bool dl_lent_p2p_busy_locked(struct dl_lent *lent, u64 first,
					   u64 last)
{
	unsigned int i;

	lockdep_assert_held(&lent->p2p_lock);

	for (i = 0; i < lent->np2p; i++)
		if (first <= lent->p2p[i].iova + lent->p2p[i].len - 1 &&
		    last >= lent->p2p[i].iova)
			return true;
	return false;
}

/*
 * The same, with @lent->lock held (not @lent->p2p_lock). Mappings are
 * added only under @lent->lock, so none is if there is none now.
 */
static inline bool dl_lent_p2p_busy(struct dl_lent *lent, u64 first, u64 last)
{
	bool busy;

	lockdep_assert_held(&lent->lock);

	if (!READ_ONCE(lent->np2p))
		return false;
	mutex_lock(&lent->p2p_lock);
	busy = dl_lent_p2p_busy_locked(lent, first, last);
	mutex_unlock(&lent->p2p_lock);
	return busy;
}

/* p2p.c */
extern atomic_t dl_p2p_revoke_gen;
void dl_lent_holder_publish(struct dl_lent *lent);

/*
 * The device's domain is fresh: no page table is left to count (dma.c,
 * and group.c for a group's domain).
 */
static inline void dl_lent_tables_forget(struct dl_lent *lent)
{
	xa_destroy(&lent->dma_leaves);
	xa_destroy(&lent->dma_mids);
	WRITE_ONCE(lent->dma_nleaves, 0);
	WRITE_ONCE(lent->dma_nmids, 0);
}

/* group.c */
/* Functions of one slot: a group of more is not a multi-function device. */
#define DL_GRP_MAX_MEMBERS	8
int dl_lent_group_scan(struct pci_dev *pdev, unsigned int *n);
int dl_lent_group_pdevs(struct pci_dev *pdev,
			struct pci_dev *m[DL_GRP_MAX_MEMBERS], unsigned int *n);
int dl_lent_group_join(struct dl_lent *lent, struct iommu_group *group,
		       struct iommu_domain *domain);
void dl_lent_group_leave(struct dl_lent *lent);
int dl_lent_domain_attach(struct dl_lent *lent, struct iommu_domain *domain);
void dl_lent_domain_detach(struct dl_lent *lent, struct iommu_domain *domain);
int dl_lent_group_lock(struct dl_lent *lent, struct dl_fabric *fab, u32 peer,
		       u64 inc);
void dl_lent_group_unlock(struct dl_lent *lent);
bool dl_lent_group_defer_reset(struct dl_lent *lent);
void dl_lent_group_reset_queue(struct dl_lent *lent);
void dl_lent_group_reset_work(struct work_struct *work);
void dl_lent_group_dma_lock(struct dl_lent *lent);
void dl_lent_group_dma_unlock(struct dl_lent *lent);
bool dl_lent_group_next_shared(struct dl_lent *lent, u64 first, u64 last,
			       u64 *s_first, u64 *s_last, phys_addr_t *s_phys);
u32 dl_lent_group_id(struct dl_lent *lent);

/* migrate.c */
int dl_lent_mig_quiesce(struct dl_lent *lent, const struct dl_mig_quiesce *q,
			struct dl_mig_ticket *t);
int dl_lent_mig_resume(struct dl_lent *lent);
void dl_lent_mig_forget(struct dl_lent *lent);
int dl_lent_mig_takeover(struct dl_lent *lent, struct dl_fabric *fab, u32 peer,
			 const struct dl_mig_takeover *t);

/* reset.c */
bool dl_lent_probe_resets_alone(struct pci_dev *pdev);
int dl_lent_reset_bus(struct pci_dev *pdev);

int dl_lent_p2p_dma(struct dl_lent *x, struct dl_fabric *fab, u32 peer,
		    u32 target_id, unsigned int bar, bool map, u64 iova);
void dl_lent_p2p_unmap_all(struct dl_lent *x);
void dl_lent_p2p_revoke_target(struct dl_lent *y);
int dl_lent_p2p_map_remote(struct dl_lent *x, struct dl_fabric *fab,
			   u32 rhost, u64 rinc, u32 rdev, unsigned int bar,
			   u64 iova, phys_addr_t phys, u64 len, u32 gen);
void dl_lent_p2p_unmap_remote(struct dl_lent *x, u32 rhost, u32 rdev,
			      unsigned int bar);
unsigned int dl_lent_p2p_drop_remote(struct dl_lent *x, struct dl_fabric *fab,
				     u32 rhost, u32 rdev, bool gone_only);

/* p2p_remote.c */
int dl_lent_p2p_dma_remote(struct dl_lent *x, struct dl_fabric *fab,
			   const struct dl_fabric_msg *msg,
			   const struct dl_p2p_dma *d);
void dl_lent_p2p_work(struct work_struct *work);
int dl_lent_p2p_export(struct dl_lent *y, struct dl_fabric *fab, u32 holder,
		       unsigned int bar, u32 to_host);
int dl_lent_p2p_lookup(struct dl_lent *y, struct dl_fabric *fab, u32 asker,
		       const struct dl_p2p_lookup *q, struct dl_p2p_window *w);
void dl_lent_p2p_exports_revoke(struct dl_lent *y);
int dl_lent_p2p_fence_check(struct dl_lent *y);
void dl_lent_p2p_fence_work(struct work_struct *work);
void dl_lent_p2p_fence_forget(struct dl_lent *y, struct dl_fabric *fab);
int dl_lender_register_p2p(struct dl_fabric *fab);
void dl_lender_unregister_p2p(struct dl_fabric *fab);
void dl_lender_p2p_peer_down(void);
void dl_lender_p2p_flush(void);

/* virtio.c */
int dl_lent_dma_bypass_check(struct dl_lent *lent);

/* dma.c */
void dl_lent_dma_init(struct dl_lent *lent);
bool dl_dma_in_resv(struct dl_lent *lent, u64 iova, u64 last);
bool dl_dma_busy(struct maple_tree *mt, u64 first, u64 last);
bool dl_dma_tables_room(struct dl_lent *lent, u64 iova, u64 last, u64 ram);
int dl_dma_tables_note(struct dl_lent *lent, u64 iova, u64 last);
int dl_dma_iommu_map(struct dl_lent *lent, u64 iova, phys_addr_t phys,
		     u64 len, int prot);
void dl_dma_iommu_unmap(struct dl_lent *lent, u64 iova, u64 len);
int dl_lent_dma_map(struct dl_lent *lent, struct dl_fabric *fab, u32 peer,
		    const struct dl_dma_range *ranges, u32 count);
int dl_lent_dma_unmap(struct dl_lent *lent, u64 iova, u64 len);
void dl_lent_dma_unmap_all(struct dl_lent *lent);
bool dl_lent_dma_show(struct seq_file *s, struct dl_lent *lent,
		      unsigned long *from, unsigned int max);
int dl_lent_fault_handler(struct iommu_domain *domain, struct device *dev,
			  unsigned long iova, int flags, void *token);
void dl_lent_fault_work(struct work_struct *work);

/* irq.c */
int dl_lent_irq_set(struct dl_lent *lent, struct dl_fabric *fab, u32 peer,
		    u16 type, u32 count, u16 set_flags);
void dl_lent_irq_release(struct dl_lent *lent);
int dl_lent_irq_direct(struct dl_lent *lent, struct dl_fabric *fab, u32 peer,
		       u16 type, u16 index, u16 db_vector);
int dl_lent_irq_direct_reserve(struct dl_lent *lent);
int dl_lent_irq_direct_map(struct dl_lent *lent, struct iommu_domain *domain);
void dl_lent_irq_direct_restore(struct dl_lent *lent);
void dl_lent_intx_mask(struct dl_lent *lent);
void dl_lent_intx_eoi(struct dl_lent *lent);
void dl_lent_intx_bar_access(struct dl_lent *lent);
int dl_lent_intx_set_masked(struct dl_lent *lent, bool mask);
void dl_lent_intx_vdisable(struct dl_lent *lent, bool disable);

/* debugfs.c */
void dl_lender_debugfs_add(void);
void dl_lender_debugfs_remove(void);

#endif /* DL_LENDER_INTERNAL_H */
