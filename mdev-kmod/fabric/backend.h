/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The boundary between the fabric core and a fabric backend.
 *
 * A backend owns the hardware: it finds the fabric adapter, maps the
 * control area (host info slots and message rings), rings doorbells,
 * receives doorbell interrupts and knows the memory windows onto peers.
 * The core owns everything above: peers and liveness, rings, requests,
 * sysfs and debugfs. A backend is a module of its own that calls the
 * functions below (exported by devlend_fabric.ko); the emulated backend
 * is backends/ivshmem.c, and a backend for real NTB adapters provides
 * the same operations.
 */
#ifndef DL_FABRIC_BACKEND_H
#define DL_FABRIC_BACKEND_H

#include <linux/types.h>

struct device;
struct dl_fabric;
struct dl_fabric_span;
struct pci_dev;

/**
 * struct dl_fabric_window - a memory window a backend offers, onto the RAM
 * of some peer. The backend embeds it in its own window object.
 * @dev: the device providing the window.
 * @phys_addr: CPU physical address of the window.
 * @size: bytes in the window.
 */
struct dl_fabric_window {
	struct device *dev;
	phys_addr_t phys_addr;
	resource_size_t size;
};

/**
 * struct dl_fabric_ident - how to recognize the window onto a peer.
 * @offset: window offset of the peer's identification page.
 * @token: the little-endian 64-bit value the peer wrote there.
 * @min_size: bytes the window must have at least (the peer's RAM).
 */
struct dl_fabric_ident {
	u64 offset;
	u64 token;
	u64 min_size;
};

/**
 * struct dl_fabric_backend_ops - what the core asks of a backend.
 * @name: backend name, for logs.
 * @peer_db_set: ring doorbell @vector of @peer. Any context.
 * @window_find: find an unclaimed window that shows @id, claim it and
 *	return it, or return NULL. Process context, may sleep.
 * @window_put: give a claimed window back. Process context, may sleep.
 * @peer_inbound: let @peer reach this host's RAM through its window onto
 *	it (@open), or stop its stores and DMA from reaching it: called with
 *	false when an incarnation of the peer is over (it left, is attaching
 *	anew or restarted, or this host leaves), with true before a ring pair
 *	is bound to a new one. On NTB, the peer's inbound translation.
 *	Optional: a backend that cannot stop a peer (the emulated fabric's
 *	windows are fixed views of RAM files) leaves it NULL. Process
 *	context, may sleep; called under the fabric's liveness lock.
 * @window_xlate: where offset @off of @win is, as a CPU physical address
 *	(*@addr) and how many bytes from there are contiguous (*@run, at
 *	least a page, at most @len). Optional: a backend whose windows are
 *	linear ranges (every real adapter: a BAR) leaves it NULL. The
 *	emulated NTB port needs it, since its peers translate where the
 *	hardware would. Process context, may sleep.
 * @inbound_map: with &dl_fabric_config.inbound_size, make offset @off of
 *	@peer's window onto this host reach @phys, @len bytes (physically
 *	contiguous, page aligned). Return -ENODEV for a host id the adapter
 *	has no port for. Optional: without it, the bounded window shows bus
 *	addresses [0, inbound_size) one to one (no translating IOMMU).
 *	Process context, may sleep.
 * @inbound_unmap: undo @inbound_map, for that range or a part of it.
 * @bar_expose: show memory BAR @bar of @pdev, a device of this host, to
 *	@peer: *@token names the window for the peer's @peer_bar, and *@len
 *	bytes from the BAR's start are shown (page aligned). The pages of
 *	@skip (@nskip spans, page aligned: the MSI-X table and PBA) must not
 *	be reached through it; a backend that cannot keep them out refuses.
 *	-EOPNOTSUPP when the backend cannot show this BAR (NTB: no window
 *	room either, -ENOSPC). Optional. Process context, may sleep.
 * @bar_revoke: stop showing what @bar_expose showed: afterwards the peer's
 *	accesses through it reach nothing of this host. Optional, also
 *	with @bar_expose (the emulated fabric's windows are files that it
 *	cannot take back). Process context, may sleep.
 * @peer_bar: where the window @token that @peer showed (its @bar_expose)
 *	is in this host's physical address space, for at least @len bytes:
 *	*@phys, uncached MMIO of this host's adapter. Optional. Process
 *	context, may sleep.
 * @peer_bar_capable: whether @peer_bar may find anything of @peer, so a
 *	borrower asks the lender only then. Optional with @peer_bar (then
 *	it may). Process context, may sleep.
 * @peer_db_msg: the memory write that rings doorbell @vector of @peer when
 *	a device of this host makes it (an MSI-X message): a 32-bit write
 *	of *@data to bus address *@addr, whose page holds nothing else a
 *	device's writes could harm. Optional: NULL when the adapter has no
 *	such register (on NTB, ntb_peer_db_addr() gives it). Process
 *	context.
 */
struct dl_fabric_backend_ops {
	const char *name;
	void (*peer_db_set)(struct dl_fabric *fab, u32 peer,
			    unsigned int vector);
	struct dl_fabric_window *(*window_find)(struct dl_fabric *fab,
						const struct dl_fabric_ident *id);
	void (*window_put)(struct dl_fabric *fab, struct dl_fabric_window *win);
	void (*peer_inbound)(struct dl_fabric *fab, u32 peer, bool open);
	int (*window_xlate)(struct dl_fabric *fab, struct dl_fabric_window *win,
			    u64 off, u64 len, phys_addr_t *addr, u64 *run);
	int (*inbound_map)(struct dl_fabric *fab, u32 peer, u64 off,
			   phys_addr_t phys, u64 len);
	void (*inbound_unmap)(struct dl_fabric *fab, u32 peer, u64 off,
			      u64 len);
	int (*peer_db_msg)(struct dl_fabric *fab, u32 peer, unsigned int vector,
			   phys_addr_t *addr, u32 *data);
	int (*bar_expose)(struct dl_fabric *fab, u32 peer, struct pci_dev *pdev,
			  int bar, const struct dl_fabric_span *skip,
			  unsigned int nskip, u64 *token, u64 *len);
	void (*bar_revoke)(struct dl_fabric *fab, u32 peer, u64 token,
			   u64 len);
	int (*peer_bar)(struct dl_fabric *fab, u32 peer, u64 token, u64 len,
			phys_addr_t *phys);
	bool (*peer_bar_capable)(struct dl_fabric *fab, u32 peer);
};

/*
 * The class of fabric devices a backend makes when its own device cannot
 * be the fabric's: an NTB device is named after its PCI function, which
 * may carry another fabric (and its mdev parent) already. Devices of this
 * class are /sys/class/devlend/<name>; the borrower's mdev types on them
 * are named devlend-<type>, as on the PCI adapter.
 */
extern const struct class dl_fabric_class;

/**
 * struct dl_fabric_config - what a backend hands the core to create a fabric.
 * @dev: the fabric's device; sysfs attributes go there, and the
 *	borrower's mdev parent.
 * @ops: the backend's operations.
 * @priv: backend data, returned by dl_fabric_backend_priv().
 * @ctl: the control area, mapped write-back.
 * @ctl_size: bytes mapped at @ctl.
 * @host_id: this host's id on the fabric.
 * @db_vectors: doorbell vectors the adapter receives.
 * @inbound_size: 0: every peer's window onto this host shows all of its
 *	RAM, laid out as the core finds it (the emulated fabric). Else the
 *	bytes of each peer's bounded window onto this host: offsets the core
 *	hands out and @ops->inbound_map translates, or without that op, bus
 *	addresses shown one to one. Page aligned.
 */
struct dl_fabric_config {
	struct device *dev;
	const struct dl_fabric_backend_ops *ops;
	void *priv;
	void *ctl;
	size_t ctl_size;
	u32 host_id;
	unsigned int db_vectors;
	u64 inbound_size;
};

struct dl_fabric *dl_fabric_create(const struct dl_fabric_config *cfg);
int dl_fabric_start(struct dl_fabric *fab);
void dl_fabric_stop(struct dl_fabric *fab);
void dl_fabric_destroy(struct dl_fabric *fab);
void *dl_fabric_backend_priv(struct dl_fabric *fab);
void dl_fabric_db_event(struct dl_fabric *fab, unsigned int vector);
void dl_fabric_window_lost(struct dl_fabric *fab, struct dl_fabric_window *win);
void dl_fabric_peer_bar_lost(struct dl_fabric *fab, phys_addr_t phys, u64 len);

#endif /* DL_FABRIC_BACKEND_H */
