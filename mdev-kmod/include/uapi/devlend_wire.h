/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * devlend fabric wire format: control area layout 3, message protocol 1.
 *
 * This header is the one definition of everything that crosses the fabric
 * or lives in fabric-shared memory. The kernel module includes it directly;
 * the Rust crates generate their types from it with bindgen, so the two can
 * never disagree. Every multi-byte field is little-endian.
 *
 * The emulated fabric has one shared "control area" (the shared memory of
 * the ivshmem-doorbell device, created and formatted by devlend's ivshmem
 * server; on NTB, a page range in the lower port's RAM). It plays the part
 * of an NTB adapter's scratchpads:
 *
 *   offset 0              struct dl_ctl_header       (written by the server)
 *   hosts_off + i*stride  struct dl_host_info        (written by host i only)
 *
 * Messages travel in rings that live in the receiver's own RAM, as
 * ntb_transport places them. Each host allocates an "inbox" of inbox_size
 * bytes, physically contiguous, and names it in its host info. Entry p of
 * host d's inbox, at p * ring_stride, belongs to peer p:
 *
 *   struct dl_ring_ctrl   prod: messages p has published to d;
 *                         cons: messages p has consumed of the ring from
 *                         d to p (which lives in p's inbox): the mirror
 *                         that lets d know its free slots by a local read
 *   ring_slots slots of slot_size bytes: the messages from p to d
 *
 * Everything in entry p is written by p only, through p's window onto d's
 * RAM, and read by d only: every read is local, every store crosses the
 * fabric once. Entry d of d's own inbox is unused.
 *
 * Binding. A ring pair is used by one incarnation of each host. Host d
 * zeroes entry p, starts its indices for p at 0, and only then publishes
 * bound[p] = p's incarnation. Host p writes into d's inbox only while d's
 * slot says UP, shows the incarnation p bound to and has bound[p] equal
 * to p's own incarnation; it checks that before every batch of stores.
 * When p stops writing into d's inbox for good (d left, re-attached or
 * restarted, or p leaves), it sets its own bound[d] to 0. A host that
 * leaves waits for that from every peer before it frees its inbox.
 *
 * Nothing read from the control area or an inbox is trusted: every host,
 * and the server, is a peer that may be faulty or hostile. Readers copy a
 * message out of its slot before parsing it and check every index and
 * length.
 */
#ifndef DEVLEND_WIRE_H
#define DEVLEND_WIRE_H

#include <linux/types.h>

/* "DLFABRIC" as little-endian bytes. */
#define DL_CTL_MAGIC		0x4349524241464c44ULL
/* "DLHOSTIN" as little-endian bytes. */
#define DL_HOST_MAGIC		0x4e4954534f484c44ULL

/*
 * Layout of the control area; bumped on any incompatible layout change
 * (3: a host info slot says how peers address the host's RAM, @inbound).
 */
#define DL_CTL_LAYOUT_VERSION	3

/* Message protocol versions a host may speak. Peers use the highest common. */
#define DL_PROTO_V1		1
#define DL_PROTO_MIN		DL_PROTO_V1
#define DL_PROTO_MAX		DL_PROTO_V1

/* Limits of this implementation; the header's values must not exceed them. */
#define DL_MAX_HOSTS		8
#define DL_MAX_SLOT_SIZE	4096
#define DL_MIN_SLOT_SIZE	128
#define DL_MAX_RING_SLOTS	1024

/* Defaults the server formats the area with. */
#define DL_DEFAULT_RING_SLOTS	128
#define DL_DEFAULT_SLOT_SIZE	256
#define DL_DEFAULT_CTL_SIZE	(4U << 20)

/* Liveness: a host bumps its heartbeat this often ... */
#define DL_HEARTBEAT_MS		200
/*
 * ... and a peer whose heartbeat stands still this long is down. Generous:
 * TCG-emulated hosts on a busy machine were seen to stall for 3 s, and a
 * peer declared down loses the devices it borrowed.
 */
#define DL_PEER_TIMEOUT_MS	8000

/* Doorbell vectors of the fabric adapter. */
#define DL_DB_VEC_MSG		0	/* messages waiting in a ring to you */
#define DL_DB_VECTORS		4
/*
 * Vectors an adapter may have beyond those: the emulated fabric's adapter
 * has this many, and vectors above DL_DB_VEC_MSG are claimed by borrowers
 * for the devices' interrupts straight through the fabric
 * (%DL_MSG_IRQ_DIRECT). Every host must handle at least %DL_DB_VECTORS.
 */
#define DL_DB_VECTORS_MAX	16

/**
 * struct dl_ctl_header - describes the control area; written once by the
 * ivshmem server before any host attaches.
 * @magic: %DL_CTL_MAGIC.
 * @layout_version: %DL_CTL_LAYOUT_VERSION.
 * @max_hosts: number of host info slots, and of entries in an inbox.
 * @ring_slots: slots per ring, a power of two.
 * @slot_size: bytes per slot, header included; a multiple of 64.
 * @hosts_off: offset of host info slot 0.
 * @host_stride: bytes between host info slots.
 * @inbox_size: bytes of each host's inbox: @max_hosts * @ring_stride.
 * @ring_stride: bytes between the entries of an inbox, a multiple of 64:
 *	a struct dl_ring_ctrl and @ring_slots slots.
 * @total_size: size of the whole area in bytes.
 * @fabric_id: random id of this fabric instance, for logs.
 */
struct dl_ctl_header {
	__le64 magic;
	__le32 layout_version;
	__le32 max_hosts;
	__le32 ring_slots;
	__le32 slot_size;
	__le32 hosts_off;
	__le32 host_stride;
	__le32 inbox_size;
	__le32 ring_stride;
	__le64 total_size;
	__le64 fabric_id;
	__u8 reserved[72];
} __attribute__((packed));

/* Host states in struct dl_host_info. */
enum dl_host_state {
	DL_HOST_ABSENT = 0,	/* never attached, or left cleanly */
	DL_HOST_INIT = 1,	/* attaching: fields may be changing */
	DL_HOST_UP = 2,		/* fields valid, heartbeat running */
};

/*
 * struct dl_host_info.inbound: how a peer reaches the host's RAM, and so
 * what the addresses the host hands out (@ident_phys, @inbox_phys, the
 * @addr of its DMA runs) are. Either way a peer turns such an address
 * into an offset of its window onto the host with the RAM layout
 * (@ram_size, @ram_low_size, @ram_high_base) and checks it against it.
 */
/*
 * Each peer's window shows all of the host's RAM, laid out as its layout
 * says (the emulated fabric's RAM files): addresses are physical.
 */
#define DL_INBOUND_RAM		0
/*
 * Each peer's window onto the host has @ram_size bytes (an NTB memory
 * window), whose offsets the host hands out and translates itself (its
 * adapter's IOMMU or LUTs): addresses are window offsets, and the layout
 * says so: @ram_low_size and @ram_high_base equal @ram_size.
 */
#define DL_INBOUND_WINDOW	1

/**
 * struct dl_host_info - what a host tells its peers about itself; the
 * scratchpad of the emulated fabric. Written only by its owner.
 * @magic: %DL_HOST_MAGIC once the owner has written it.
 * @state: an &enum dl_host_state.
 * @host_id: the owner's id (its ivshmem IVPosition); equals the slot index.
 * @incarnation: random, new each time the owner attaches; peers reset
 *	their per-peer state when it changes.
 * @heartbeat: bumped by the owner every %DL_HEARTBEAT_MS.
 * @proto_min: lowest message protocol version the owner speaks.
 * @proto_max: highest message protocol version the owner speaks.
 * @inbound: %DL_INBOUND_RAM or %DL_INBOUND_WINDOW (layout 3; was zero).
 * @ram_size: bytes of RAM, which is the size of the peers' window onto it;
 *	with %DL_INBOUND_WINDOW, the window's size.
 * @ram_low_size: RAM mapped at physical 0; the rest starts at
 *	@ram_high_base. Window offset of physical address p is p below
 *	@ram_low_size, and p - @ram_high_base + @ram_low_size above.
 * @ram_high_base: physical base of RAM above the PCI hole (4 GiB on q35).
 * @ident_phys: address (see @inbound) of a page of the owner's RAM that
 *	holds @ident_token in its first 8 bytes; a peer finds which of its
 *	windows shows this host by looking for the token there.
 * @ident_token: random, new each incarnation.
 * @name: the owner's host name, NUL-padded, for humans only.
 * @inbox_phys: address (see @inbound) of the owner's inbox, page
 *	aligned, in the RAM layout above.
 * @bound: entry p is the incarnation of host p that the owner has bound
 *	a ring pair to, 0 if none: its inbox entry p is ready for that
 *	incarnation, and the owner may write into host p's inbox.
 */
struct dl_host_info {
	__le64 magic;
	__le32 state;
	__le32 host_id;
	__le64 incarnation;
	__le64 heartbeat;
	__le16 proto_min;
	__le16 proto_max;
	__le32 inbound;
	__le64 ram_size;
	__le64 ram_low_size;
	__le64 ram_high_base;
	__le64 ident_phys;
	__le64 ident_token;
	char name[32];
	__le64 inbox_phys;
	__le64 bound[DL_MAX_HOSTS];
	__u8 reserved[72];
} __attribute__((packed));

/**
 * struct dl_ring_ctrl - the indices at the start of an inbox entry, on
 * separate cache lines; both are written by the peer the entry belongs to.
 * Indices count messages from 0 at binding and wrap at 2^32; the slot of
 * index i is i & (ring_slots - 1). A ring is full when prod - cons equals
 * ring_slots; prod - cons greater than that is a corrupt ring.
 * @prod: producer index of the ring in this entry (peer to owner).
 * @cons: consumer index of the ring the other way (owner to peer), which
 *	lives in the peer's inbox.
 */
struct dl_ring_ctrl {
	__le32 prod;
	__u8 pad0[60];
	__le32 cons;
	__u8 pad1[60];
} __attribute__((packed));

/* Message types. Requests expect a response with the same @req_id. */
enum dl_msg_type {
	DL_MSG_PING = 1,	/* echo request: struct dl_ping payload */
	/* Device lending; payloads below, "post" = posted, no response. */
	DL_MSG_DEV_LIST = 16,	/* dl_dev_ref (start id) -> dl_dev_list */
	DL_MSG_DEV_INFO = 17,	/* dl_dev_ref -> dl_dev_info [+ dl_dev_info_ext] */
	DL_MSG_DEV_CHANGED = 18,	/* post, lender: dl_dev_ref, re-read it */
	DL_MSG_DEV_ACQUIRE = 19,	/* dl_dev_ref -> dl_dev_ref; EBUSY if held */
	DL_MSG_DEV_RELEASE = 20,	/* dl_dev_ref -> empty: reset, offer again */
	DL_MSG_DEV_RESET = 21,	/* dl_dev_ref -> empty: function reset */
	DL_MSG_CFG_READ = 22,	/* dl_cfg_access -> dl_cfg_access */
	DL_MSG_CFG_WRITE = 23,	/* dl_cfg_access -> empty */
	DL_MSG_BAR_READ = 24,	/* dl_bar_access -> dl_bar_access */
	DL_MSG_BAR_WRITE = 25,	/* post: dl_bar_access, kept in ring order */
	DL_MSG_DMA_MAP = 26,	/* dl_dma_map -> empty */
	DL_MSG_DMA_UNMAP = 27,	/* dl_dma_unmap -> empty */
	DL_MSG_IRQ_SET = 28,	/* dl_irq_set -> empty */
	DL_MSG_IRQ_FIRE = 29,	/* post, lender: dl_irq_fire */
	DL_MSG_DEV_FAULT = 30,	/* post, lender: dl_dev_fault */
	DL_MSG_CFG_READ_BLOCK = 31,	/* dl_cfg_block_req -> dl_cfg_block */
	DL_MSG_IRQ_MASK = 32,	/* post, borrower: dl_irq_mask */
	DL_MSG_IRQ_DIRECT = 33,	/* dl_irq_direct -> empty */
	DL_MSG_BAR_WINDOW = 34,	/* dl_bar_window -> dl_bar_window */
	DL_MSG_BAR_DMA = 35,	/* dl_bar_dma -> empty */
	DL_MSG_P2P_DMA = 36,	/* dl_p2p_dma -> empty */
	DL_MSG_P2P_EXPORT = 37,	/* dl_p2p_export -> empty */
	DL_MSG_P2P_LOOKUP = 38,	/* lender: dl_p2p_lookup -> dl_p2p_window */
	DL_MSG_P2P_REVOKE = 39,	/* lender: dl_dev_ref -> empty */
	/* The emulated NTB hardware (devlend_ntb_emu), port to port. */
	DL_MSG_NTB_HELLO = 40,	/* post: dl_ntb_hello, the sender's port */
	DL_MSG_NTB_DB = 41,	/* post: dl_ntb_db, doorbell bits to set */
	DL_MSG_NTB_SPAD = 42,	/* post: dl_ntb_reg, write a scratchpad */
	DL_MSG_NTB_SPAD_READ = 43,	/* dl_ntb_reg (index) -> dl_ntb_reg */
	DL_MSG_NTB_MSG = 44,	/* post: dl_ntb_reg, a message register */
	DL_MSG_NTB_MW = 45,	/* post: dl_ntb_mw, an inbound translation */
	DL_MSG_NTB_XLATE = 46,	/* dl_ntb_xlate -> dl_ntb_xlate: an emulation hook */
	/* Live migration of a borrower's guest (docs/migration.md). */
	DL_MSG_MIG_QUIESCE = 47,	/* dl_mig_quiesce -> dl_mig_ticket */
	DL_MSG_MIG_RESUME = 48,	/* dl_dev_ref -> empty: bus mastering back */
	DL_MSG_MIG_TAKEOVER = 49,	/* dl_mig_takeover -> dl_dev_ref */
};

/* struct dl_msg_hdr.flags */
#define DL_MSG_F_RESPONSE	0x0001

/* struct dl_msg_hdr.status of responses: 0 or one of these. */
enum dl_msg_status {
	DL_STATUS_OK = 0,
	DL_STATUS_EINVAL = 1,	/* malformed or out-of-range request */
	DL_STATUS_ENOTSUPP = 2,	/* unknown type or version */
	DL_STATUS_EBUSY = 3,	/* resource held by someone else */
	DL_STATUS_ENODEV = 4,	/* no such device */
	DL_STATUS_EIO = 5,	/* the operation failed on the device */
	DL_STATUS_ETIMEDOUT = 6,	/* the device did not settle in time */
};

/**
 * struct dl_msg_hdr - header of every message, at the start of a slot.
 * @type: an &enum dl_msg_type.
 * @proto: protocol version the message is encoded with.
 * @len: payload bytes after the header; at most slot_size - header size.
 * @flags: %DL_MSG_F_RESPONSE for responses.
 * @src: sender's host id; must match the ring it came from.
 * @epoch: low 32 bits of the sender's incarnation.
 * @seq: per-ring sequence number, from 0 in each sender incarnation; a
 *	receiver that sees a gap, a repeat or a reordering counts an error.
 * @status: an &enum dl_msg_status, in responses.
 * @req_id: nonzero in requests and their responses; chosen by the
 *	requester, which looks responses up by it (never by a pointer).
 */
struct dl_msg_hdr {
	__le16 type;
	__le16 proto;
	__le16 len;
	__le16 flags;
	__le32 src;
	__le32 epoch;
	__le32 seq;
	__le32 status;
	__le64 req_id;
} __attribute__((packed));

/**
 * struct dl_ping - payload of %DL_MSG_PING and its response, which echoes
 * it. The fabric self-test uses it to check integrity and order.
 * @test_seq: the sender's count of pings in this test run, from 0.
 * @data_crc: crc32 (IEEE, as zlib) of @data.
 * @nonce: random per test run.
 * @data: test bytes; the message length says how many.
 */
struct dl_ping {
	__le32 test_seq;
	__le32 data_crc;
	__le64 nonce;
	__u8 data[];
} __attribute__((packed));

/*
 * Device lending (protocol v1). A lender offers devices; a borrower reads
 * the list, acquires one device, then reaches it through the messages
 * below, all of which name the device by the lender's dev_id. A dev_id is
 * never reused within a lender incarnation. The lender serves every
 * request in ring order, so a read after posted writes sees their effect.
 * Every field is checked by the receiver: dev_id against its table and the
 * sender against the device's borrower, offsets and sizes against the
 * region, DMA ranges against the borrower's RAM and the device's limits.
 */

/* Device states in struct dl_dev_info. */
enum dl_lent_state {
	DL_LENT_AVAILABLE = 0,	/* lent, nobody holds it */
	DL_LENT_BORROWED = 1,	/* held by @borrower */
	DL_LENT_RETURNING = 2,	/* being reset after release; soon available */
	/* Its reset failed: lent to nobody until it is lent again. */
	DL_LENT_FAILED = 3,
};

/* struct dl_dev_info.flags */
#define DL_DEV_F_MSIX		0x0001
#define DL_DEV_F_MSI		0x0002
#define DL_DEV_F_INTX		0x0004
#define DL_DEV_F_PCIE		0x0008
/* An SR-IOV virtual function; its physical function stays with the lender. */
#define DL_DEV_F_VF		0x0010
/*
 * No function reset: a function of a lent group with neither FLR nor a PM
 * reset, which only its bus's reset resets, with its siblings. The
 * lender resets that bus once every function is back; a DL_MSG_DEV_RESET
 * of it is refused (ENOTSUPP), so a borrower offers its VMM no reset.
 */
#define DL_DEV_F_NO_RESET	0x0020

/* struct dl_bar_desc.flags */
#define DL_BAR_F_PRESENT	0x0001
#define DL_BAR_F_IO		0x0002
#define DL_BAR_F_MEM64		0x0004
#define DL_BAR_F_PREFETCH	0x0008

#define DL_NUM_BARS		6
#define DL_NO_HOST		0xffff

/**
 * struct dl_bar_desc - one BAR of a lent device.
 * @size: bytes; 0 if the BAR is absent.
 * @flags: DL_BAR_F_*.
 * @reserved: zero.
 */
struct dl_bar_desc {
	__le64 size;
	__le32 flags;
	__le32 reserved;
} __attribute__((packed));

/**
 * struct dl_dev_info - a lent device as its lender describes it
 * (response to %DL_MSG_DEV_INFO).
 * @dev_id: the lender's handle.
 * @vendor: PCI vendor id.
 * @device: PCI device id.
 * @subsys_vendor: PCI subsystem vendor id.
 * @subsys_device: PCI subsystem id.
 * @class_rev: class code << 8 | revision.
 * @state: an &enum dl_lent_state.
 * @borrower: host id of the borrower, %DL_NO_HOST if none.
 * @flags: DL_DEV_F_*.
 * @msix_count: MSI-X vectors the device has.
 * @msi_count: MSI vectors the device has.
 * @cfg_size: bytes of config space (256 or 4096).
 * @bars: the six BARs.
 * @name: the device's PCI address on the lender, NUL-padded, for humans.
 */
struct dl_dev_info {
	__le32 dev_id;
	__le16 vendor;
	__le16 device;
	__le16 subsys_vendor;
	__le16 subsys_device;
	__le32 class_rev;
	__le16 state;
	__le16 borrower;
	__le32 flags;
	__le16 msix_count;
	__le16 msi_count;
	__le32 cfg_size;
	struct dl_bar_desc bars[DL_NUM_BARS];
	char name[16];
} __attribute__((packed));

/**
 * struct dl_dev_info_ext - what a lender adds to &struct dl_dev_info when
 * asked with %DL_DEV_REF_F_INFO_EXT (protocol 1 addition).
 * @pf_name: for a virtual function (%DL_DEV_F_VF), the PCI address on the
 *	lender of its physical function, NUL-padded, for humans; else zero.
 * @group: for a function lent with the other functions of its slot, which
 *	share its IOMMU group (protocol 1 addition): a number the same for
 *	them and for no other device of the lender, never zero; zero for a
 *	device alone in its group (and from older lenders). A borrower gives
 *	the devices of one group to one VM only.
 * @reserved: zero.
 */
struct dl_dev_info_ext {
	char pf_name[16];
	__le32 group;
	__le32 reserved[3];
} __attribute__((packed));

/**
 * struct dl_dev_info_full - the answer to %DL_MSG_DEV_INFO asked with
 * %DL_DEV_REF_F_INFO_EXT.
 * @info: as without the flag.
 * @ext: what the flag adds.
 */
struct dl_dev_info_full {
	struct dl_dev_info info;
	struct dl_dev_info_ext ext;
} __attribute__((packed));

/* struct dl_dev_ref.flags, in %DL_MSG_DEV_INFO only: answer with the ext. */
#define DL_DEV_REF_F_INFO_EXT	0x0001

/**
 * struct dl_dev_ref - names one device (payload of requests that need
 * nothing else, and of %DL_MSG_DEV_CHANGED).
 * @dev_id: the lender's handle.
 * @flags: zero, but in %DL_MSG_DEV_INFO, where %DL_DEV_REF_F_INFO_EXT
 *	asks for &struct dl_dev_info_ext after &struct dl_dev_info (a lender
 *	without it refuses the request as malformed; ask again without).
 */
struct dl_dev_ref {
	__le32 dev_id;
	__le32 flags;
} __attribute__((packed));

#define DL_DEV_LIST_MAX		32

/**
 * struct dl_dev_list - response to %DL_MSG_DEV_LIST (request payload: a
 * struct dl_dev_ref whose dev_id is the first id wanted, 0 for all).
 * @total: devices the lender offers.
 * @count: ids that follow (at most %DL_DEV_LIST_MAX), ascending.
 * @ids: dev_ids >= the requested start.
 */
struct dl_dev_list {
	__le32 total;
	__le32 count;
	__le32 ids[DL_DEV_LIST_MAX];
} __attribute__((packed));

/**
 * struct dl_cfg_access - a config space read or write.
 * @dev_id: the device.
 * @offset: byte offset in config space.
 * @size: 1, 2 or 4, naturally aligned.
 * @reserved: zero.
 * @value: the value written, or read (in the response).
 */
struct dl_cfg_access {
	__le32 dev_id;
	__le16 offset;
	__u8 size;
	__u8 reserved;
	__le32 value;
} __attribute__((packed));

/* Most config bytes one DL_MSG_CFG_READ_BLOCK reads: fits the smallest slot. */
#define DL_CFG_BLOCK_MAX	64

/**
 * struct dl_cfg_block_req - read a run of config space (DL_MSG_CFG_READ_BLOCK),
 *	as that many 4-byte DL_MSG_CFG_READs would, in one round trip.
 * @dev_id: the device.
 * @offset: byte offset in config space, a multiple of 4.
 * @len: bytes, a multiple of 4, from 4 to %DL_CFG_BLOCK_MAX; the run ends
 *	within the device's config space.
 *
 * A lender that does not know the type answers %DL_STATUS_ENOTSUPP; the
 * borrower then reads dword by dword.
 */
struct dl_cfg_block_req {
	__le32 dev_id;
	__le16 offset;
	__le16 len;
} __attribute__((packed));

/**
 * struct dl_cfg_block - the answer to a struct dl_cfg_block_req.
 * @dev_id: as asked.
 * @offset: as asked.
 * @len: as asked.
 * @data: @len bytes of config space from @offset; the rest zero.
 */
struct dl_cfg_block {
	__le32 dev_id;
	__le16 offset;
	__le16 len;
	__u8 data[DL_CFG_BLOCK_MAX];
} __attribute__((packed));

/**
 * struct dl_bar_access - a BAR read or write.
 * @dev_id: the device.
 * @bar: BAR index, 0-5.
 * @size: 1, 2, 4 or 8, naturally aligned.
 * @reserved: zero.
 * @offset: byte offset in the BAR.
 * @value: the value written, or read (in the response).
 */
struct dl_bar_access {
	__le32 dev_id;
	__u8 bar;
	__u8 size;
	__le16 reserved;
	__le64 offset;
	__le64 value;
} __attribute__((packed));

/**
 * struct dl_dma_range - one contiguous run of a DMA mapping.
 * @iova: the device-visible address (the guest-physical address).
 * @addr: where the lender reaches the pinned memory behind it, as the
 *	borrower's host info says (@inbound): its physical address, or the
 *	offset in the borrower's window for the lender that it mapped it at.
 * @len: bytes; @iova, @addr and @len are page aligned.
 */
struct dl_dma_range {
	__le64 iova;
	__le64 addr;
	__le64 len;
} __attribute__((packed));

/**
 * struct dl_dma_map - %DL_MSG_DMA_MAP: map runs of borrower memory for the
 * device, through the lender's window onto the borrower.
 * @dev_id: the device.
 * @count: runs that follow; as many as fit in a slot.
 * @ranges: the runs.
 */
struct dl_dma_map {
	__le32 dev_id;
	__le32 count;
	struct dl_dma_range ranges[];
} __attribute__((packed));

/* struct dl_dma_unmap.flags */
#define DL_DMA_UNMAP_F_ALL	0x0001	/* every mapping of the device */

/**
 * struct dl_dma_unmap - %DL_MSG_DMA_UNMAP.
 * @dev_id: the device.
 * @flags: DL_DMA_UNMAP_F_*.
 * @iova: start (ignored with %DL_DMA_UNMAP_F_ALL).
 * @len: bytes (ignored with %DL_DMA_UNMAP_F_ALL).
 */
struct dl_dma_unmap {
	__le32 dev_id;
	__le32 flags;
	__le64 iova;
	__le64 len;
} __attribute__((packed));

/* Interrupt types, as VFIO's indices. */
enum dl_irq_type {
	DL_IRQ_INTX = 0,
	DL_IRQ_MSI = 1,
	DL_IRQ_MSIX = 2,
};

/*
 * struct dl_irq_set.flags: with %DL_IRQ_INTX only. The borrower ends each
 * relayed INTx itself, with a %DL_MSG_IRQ_MASK that unmasks it (VFIO's
 * unmask, which a VMM sends at the guest's EOI). Without it the lender
 * ends an INTx at the holder's next BAR access, as a lender that does not
 * know the flag does (it refuses the request as malformed).
 */
#define DL_IRQ_SET_F_UNMASK_MSG	0x0001

/**
 * struct dl_irq_set - %DL_MSG_IRQ_SET: have the lender take (@count > 0)
 * or release (@count == 0) the device's vectors of @type. Vectors the
 * lender takes fire %DL_MSG_IRQ_FIRE to the borrower.
 * @dev_id: the device.
 * @type: an &enum dl_irq_type.
 * @flags: DL_IRQ_SET_F_*, zero unless @type is %DL_IRQ_INTX.
 * @count: vectors, 0 to release all of @type.
 */
struct dl_irq_set {
	__le32 dev_id;
	__le16 type;
	__le16 flags;
	__le32 count;
} __attribute__((packed));

/**
 * struct dl_irq_mask - %DL_MSG_IRQ_MASK, borrower to lender, posted: mask
 * or unmask a relayed INTx at the device (VFIO's SET_IRQS MASK and UNMASK
 * of the INTx index). The lender masks INTx itself when it fires; an
 * unmask ends it, and if the device still asserts it, it fires again.
 * Only while the holder has INTx set up with %DL_IRQ_SET_F_UNMASK_MSG.
 * @dev_id: the device.
 * @type: %DL_IRQ_INTX (the only maskable type).
 * @vector: 0.
 * @mask: 1 to mask, 0 to unmask.
 * @reserved: zero.
 */
struct dl_irq_mask {
	__le32 dev_id;
	__le16 type;
	__le16 vector;
	__u8 mask;
	__u8 reserved[3];
} __attribute__((packed));

/**
 * struct dl_irq_direct - %DL_MSG_IRQ_DIRECT, borrower to lender: have MSI-X
 * vector @vector of the device, which the holder has taken with
 * %DL_MSG_IRQ_SET, ring the holder's doorbell vector @db_vector itself,
 * through the fabric, instead of being relayed as %DL_MSG_IRQ_FIRE by the
 * lender's CPU. It stays so until the holder releases its vectors (or
 * takes vectors anew). The lender refuses (and the vector stays relayed)
 * when its backend cannot (ENOTSUPP, also from a lender that does not
 * know the message), or for a vector not taken (EINVAL).
 * @dev_id: the device.
 * @type: %DL_IRQ_MSIX (MSI's 16-bit data cannot carry a doorbell).
 * @vector: the device's vector, below the count the holder took.
 * @db_vector: the holder's doorbell vector, above %DL_DB_VEC_MSG and below
 *	%DL_DB_VECTORS_MAX.
 * @reserved: zero.
 */
struct dl_irq_direct {
	__le32 dev_id;
	__le16 type;
	__le16 vector;
	__le16 db_vector;
	__u8 reserved[6];
} __attribute__((packed));

/**
 * struct dl_bar_window - %DL_MSG_BAR_WINDOW, borrower to lender, and its
 * answer (protocol 1 addition): show memory BAR @bar of the device to the
 * holder through the fabric, so that the holder maps it instead of
 * relaying each access. The request carries @dev_id and @bar, the rest
 * zero. The answer says where: @token names the window (the backend's:
 * an offset of the holder's outbound window onto the lender, or a window
 * the emulated fabric knows by a tag), and [@offset, @offset + @len) of
 * the BAR is what it shows, page aligned. The MSI-X table and PBA pages
 * are never reached through it (the holder keeps relaying those). The
 * window is the holder's until it gives the device back or loses it.
 * ENOTSUPP (also from a lender that does not know the message): no window
 * for this BAR (an I/O BAR, no window room, a backend that cannot); its
 * accesses stay relayed.
 * @dev_id: the device.
 * @bar: the BAR, below %DL_NUM_BARS.
 * @reserved: zero.
 * @token: in the answer, the window.
 * @offset: in the answer, the BAR offset the window starts at.
 * @len: in the answer, the bytes it shows.
 */
struct dl_bar_window {
	__le32 dev_id;
	__u8 bar;
	__u8 reserved[3];
	__le64 token;
	__le64 offset;
	__le64 len;
} __attribute__((packed));

/* struct dl_bar_dma.flags */
#define DL_BAR_DMA_F_MAP	0x0001	/* map at @iova; without it, unmap */

/**
 * struct dl_bar_dma - %DL_MSG_BAR_DMA, borrower to lender (protocol 1
 * addition): make memory BAR @bar of the device reachable by the device's
 * own DMA at @iova, the address its holder's guest gave the BAR, or with
 * no %DL_BAR_DMA_F_MAP no longer. A driver may hand its device the bus address
 * of the device's own BAR (the LSI 53C895A runs its SCRIPTS from its RAM
 * BAR and moves its registers by address); in the guest that is where the
 * guest put the BAR, which the lender's IOMMU maps onto the BAR itself.
 * A map moves the BAR's mapping from where it was; a map where it is, and
 * an unmap of a BAR not mapped, change nothing (a replay is harmless).
 * Both BAR and @iova must be page aligned; the pages of the MSI-X table
 * and PBA are left out (the device cannot write its own table); @iova
 * must lie in the domain's aperture, clear of reserved regions and of
 * every other mapping of the device. Every such mapping goes when all
 * DMA mappings do (bus mastering off, a reset, a take-back). EINVAL:
 * not a memory BAR of the device, or an @iova that cannot be; ENOTSUPP
 * (also from a lender that does not know the message): not this BAR;
 * the device's DMA there faults as before.
 * @dev_id: the device.
 * @bar: the BAR, below %DL_NUM_BARS.
 * @flags: DL_BAR_DMA_F_*.
 * @reserved: zero.
 * @iova: with %DL_BAR_DMA_F_MAP, the BAR's address in the holder's
 *	guest, page aligned; else zero.
 */
struct dl_bar_dma {
	__le32 dev_id;
	__u8 bar;
	__u8 flags;
	__le16 reserved;
	__le64 iova;
} __attribute__((packed));

/* struct dl_p2p_dma.flags */
#define DL_P2P_DMA_F_MAP	0x01	/* map at @iova; without it, unmap */

/**
 * struct dl_p2p_dma - %DL_MSG_P2P_DMA, borrower to lender (protocol 1
 * addition): make memory BAR @bar of device @target_id, which the same
 * holder holds, reachable by the DMA of device @dev_id at @iova, the
 * address the holder's guest gave that BAR, or with no
 * %DL_P2P_DMA_F_MAP no longer (peer-to-peer between two devices of one
 * guest). The same rules as %DL_MSG_BAR_DMA, the target's MSI-X table
 * and PBA pages left out, and the target must be held by the holder of
 * @dev_id, with the same incarnation. With @target_host another lender
 * (protocol 1 addition, case 3 of docs/p2p.md), the holder has first
 * asked that lender to show the BAR to this one (%DL_MSG_P2P_EXPORT);
 * this lender asks it where (%DL_MSG_P2P_LOOKUP) before it answers, and
 * maps onto its window there. Every take-back of the target revokes such
 * mappings onto it first, before its reset (%DL_MSG_P2P_REVOKE across
 * lenders); they go with the others of @dev_id too. EINVAL: a target or
 * an @iova that cannot be; EIO: the other lender shows this one no such
 * BAR for the holder, or did not answer; ENOTSUPP (also from a lender
 * that does not know the message): the DMA there faults as before.
 * @dev_id: the device whose DMA reaches the target.
 * @target_id: the device whose BAR it reaches.
 * @bar: the target's BAR, below %DL_NUM_BARS.
 * @flags: DL_P2P_DMA_F_*.
 * @reserved: zero.
 * @target_host: the host lending @target_id.
 * @iova: with %DL_P2P_DMA_F_MAP, the target BAR's address in the
 *	holder's guest, page aligned; else zero.
 */
struct dl_p2p_dma {
	__le32 dev_id;
	__le32 target_id;
	__u8 bar;
	__u8 flags;
	__le16 reserved;
	__le32 target_host;
	__le64 iova;
} __attribute__((packed));

/**
 * struct dl_p2p_export - %DL_MSG_P2P_EXPORT, borrower to the lender of a
 * device it holds (protocol 1 addition): show memory BAR @bar of @dev_id
 * to lender @to_host, for the DMA of a device that lender lends to the
 * same holder (case 3 of docs/p2p.md). The lender opens a window of the
 * fabric onto the BAR for @to_host, as for %DL_MSG_BAR_WINDOW (the MSI-X
 * table and PBA kept out, or refused), and answers @to_host's
 * %DL_MSG_P2P_LOOKUP with it while the holder holds the device. Every
 * take-back of the device closes such windows, after telling each
 * @to_host (%DL_MSG_P2P_REVOKE); one that is up and does not answer
 * keeps the device from every holder until it does, goes down or
 * restarts. A replay changes nothing. EINVAL: a BAR
 * or host that cannot be; ENOSPC: too many; ENOTSUPP: the fabric cannot
 * show this BAR.
 * @dev_id: the device.
 * @bar: its BAR, below %DL_NUM_BARS.
 * @reserved: zero.
 * @to_host: the lender whose device's DMA is to reach it: a peer, neither
 *	the holder nor this lender.
 */
struct dl_p2p_export {
	__le32 dev_id;
	__u8 bar;
	__u8 reserved[3];
	__le32 to_host;
	__le32 reserved2;
} __attribute__((packed));

/**
 * struct dl_p2p_lookup - %DL_MSG_P2P_LOOKUP, lender to lender (protocol 1
 * addition): where, on the asker, is the window onto BAR @bar of device
 * @dev_id that its holder had shown to the asker (%DL_MSG_P2P_EXPORT)?
 * Answered only if @holder, in incarnation @holder_inc, holds the device
 * here and exported that BAR to the asker (EIO otherwise): the asker maps
 * it for a device the same holder holds there.
 * @dev_id: the device, on the receiver.
 * @bar: its BAR.
 * @reserved: zero.
 * @holder: the host the asker lends its own device to.
 * @holder_inc: that host's incarnation, as the asker knows it.
 */
struct dl_p2p_lookup {
	__le32 dev_id;
	__u8 bar;
	__u8 reserved[3];
	__le32 holder;
	__le32 reserved2;
	__le64 holder_inc;
} __attribute__((packed));

/**
 * struct dl_p2p_window - the answer to %DL_MSG_P2P_LOOKUP.
 * @token: the window, as the fabric names it to the asker
 *	(dl_fabric_peer_bar()).
 * @len: the bytes of the BAR it shows, from the BAR's start.
 */
struct dl_p2p_window {
	__le64 token;
	__le64 len;
} __attribute__((packed));

/**
 * struct dl_irq_fire - %DL_MSG_IRQ_FIRE, lender to borrower, posted.
 * @dev_id: the device.
 * @type: an &enum dl_irq_type.
 * @vector: the vector that fired.
 */
struct dl_irq_fire {
	__le32 dev_id;
	__le16 type;
	__le16 vector;
} __attribute__((packed));

/**
 * struct dl_dev_fault - %DL_MSG_DEV_FAULT, lender to borrower, posted:
 * the lender's IOMMU blocked a DMA of the device.
 * @dev_id: the device.
 * @flags: bit 0: it was a write.
 * @iova: the address the device used.
 */
struct dl_dev_fault {
	__le32 dev_id;
	__le32 flags;
	__le64 iova;
} __attribute__((packed));

/*
 * The emulated NTB hardware: what each host's port has. Scratchpads and
 * message registers are 32 bits; doorbell bit i of a port is rung by
 * whoever sets it (ntb_pingpong rings bit <port number>).
 */
#define DL_NTB_SPADS		16
#define DL_NTB_MSGS		4
#define DL_NTB_MWS		2
#define DL_NTB_DB_BITS		16

/* struct dl_ntb_hello.flags */
#define DL_NTB_F_PRESENT	0x1	/* the port is registered */
#define DL_NTB_F_LINK		0x2	/* its side of the link is enabled */
#define DL_NTB_F_ASK		0x4	/* answer with a hello of yours */

/**
 * struct dl_ntb_hello - %DL_MSG_NTB_HELLO: the sender's port changed, or
 * it wants to know the receiver's. A port absent says so (no flags).
 * @flags: DL_NTB_F_*.
 * @reserved: zero.
 */
struct dl_ntb_hello {
	__le32 flags;
	__le32 reserved;
} __attribute__((packed));

/**
 * struct dl_ntb_db - %DL_MSG_NTB_DB: set these bits of the receiver's
 * doorbell register (below %DL_NTB_DB_BITS).
 * @bits: the bits.
 */
struct dl_ntb_db {
	__le64 bits;
} __attribute__((packed));

/**
 * struct dl_ntb_reg - a scratchpad or message register of the receiver:
 * %DL_MSG_NTB_SPAD, %DL_MSG_NTB_MSG, %DL_MSG_NTB_SPAD_READ and its answer.
 * @index: below %DL_NTB_SPADS or %DL_NTB_MSGS.
 * @value: the value (ignored in a read request).
 */
struct dl_ntb_reg {
	__le32 index;
	__le32 value;
} __attribute__((packed));

/*
 * struct dl_ntb_mw.flags: @addr is a bus address of the sender's adapter,
 * which sits behind a translating IOMMU: where each page lands is asked
 * with %DL_MSG_NTB_XLATE (the window is then no linear range).
 */
#define DL_NTB_MW_F_BUS		0x1

/**
 * struct dl_ntb_mw - %DL_MSG_NTB_MW: the sender's inbound memory window
 * @index (below %DL_NTB_MWS) for the receiver now translates to the
 * sender's physical @addr, @size bytes; @size 0: no translation.
 * @index: the window.
 * @flags: DL_NTB_MW_F_* (was reserved, zero).
 * @addr: a physical address in the sender's RAM (or, with
 *	%DL_NTB_MW_F_BUS, a bus address of its adapter).
 * @size: bytes.
 */
struct dl_ntb_mw {
	__le32 index;
	__le32 flags;
	__le64 addr;
	__le64 size;
} __attribute__((packed));

/**
 * struct dl_ntb_xlate - %DL_MSG_NTB_XLATE and its answer, an emulation
 * hook: where stores at offset @off of the receiver's inbound window
 * @index for the sender land. A real adapter's IOMMU translates each
 * store as it arrives; the emulated peer stores into RAM directly, so the
 * sender asks before it maps the window (the lender's IOMMU mapping of a
 * borrower's pages), and the receiver translates through its adapter's
 * IOMMU domain as the hardware would.
 * @index: the window (below %DL_NTB_MWS), translated by bus address.
 * @reserved: zero.
 * @off: offset in the window, page aligned; the answer repeats it.
 * @len: bytes wanted, page aligned, nonzero; in the answer, the bytes
 *	from @addr that are physically contiguous (at least a page, at most
 *	as asked).
 * @addr: zero; in the answer, the physical address in the receiver's RAM.
 */
struct dl_ntb_xlate {
	__le32 index;
	__le32 reserved;
	__le64 off;
	__le64 len;
	__le64 addr;
} __attribute__((packed));

/*
 * Live migration (protocol 1 addition, docs/migration.md). The holder's
 * guest stops: it asks its lender to quiesce the device (wait until it
 * settles, then stop its DMA) and gets a ticket. The ticket travels in
 * the guest's migration stream (struct dl_mig_state) to the destination
 * borrower, which presents it to take the device over. The lender checks
 * that the device is quiesced for that ticket and still held by the host
 * the ticket names, unmaps everything the old holder had mapped, lets its
 * interrupt vectors go, and makes the sender the holder; bus mastering
 * stays off until the new holder resumes the device (%DL_MSG_MIG_RESUME).
 * A holder whose migration failed resumes it too, and the ticket is void.
 */

/* Most a holder may ask the lender to wait for the device to settle. */
#define DL_MIG_TIMEOUT_MAX_MS	10000

/**
 * struct dl_mig_quiesce - %DL_MSG_MIG_QUIESCE, holder to lender: stop the
 * device once it settles: no interrupt and no pending transaction (PCIe
 * Device Status) for @settle_ms, within @timeout_ms; then bus mastering
 * goes off. Answered with a &struct dl_mig_ticket, or -ETIMEDOUT if the
 * device did not settle (bus mastering is then left as it was).
 * @dev_id: the device.
 * @settle_ms: quiet time asked for, at least 1.
 * @timeout_ms: most time to wait, at least @settle_ms, at most
 *	%DL_MIG_TIMEOUT_MAX_MS.
 * @reserved: zero.
 */
struct dl_mig_quiesce {
	__le32 dev_id;
	__le32 settle_ms;
	__le32 timeout_ms;
	__le32 reserved;
} __attribute__((packed));

/**
 * struct dl_mig_ticket - the answer to %DL_MSG_MIG_QUIESCE.
 * @dev_id: the device.
 * @waited_ms: how long the lender waited for it to settle.
 * @ticket: what the next holder presents (nonzero; the lender's alone,
 *	random, valid until it is used, the device resumed or taken back).
 */
struct dl_mig_ticket {
	__le32 dev_id;
	__le32 waited_ms;
	__le64 ticket;
} __attribute__((packed));

/**
 * struct dl_mig_takeover - %DL_MSG_MIG_TAKEOVER, the migration's
 * destination to the lender: make me the holder of @dev_id, quiesced by
 * @from_host with @ticket. Answered with the &struct dl_dev_ref, or
 * -EBUSY (not quiesced, not held by @from_host, the ticket is not the
 * one) or -EINVAL (the sender is @from_host, or not up).
 * @dev_id: the device.
 * @from_host: its holder, the migration's source.
 * @ticket: from the source's &struct dl_mig_ticket.
 */
struct dl_mig_takeover {
	__le32 dev_id;
	__le32 from_host;
	__le64 ticket;
} __attribute__((packed));

#define DL_MIG_STATE_MAGIC	0x474d4c44	/* "DLMG" */
#define DL_MIG_STATE_VERSION	1
/* Vectors whose interrupts a migration stream carries, at most. */
#define DL_MIG_PENDING_VECS	2048

/* struct dl_mig_state.flags */
#define DL_MIG_F_HELD		0x1	/* the source held the device, quiesced */

/**
 * struct dl_mig_state - what a borrower's mdev puts in its guest's
 * migration stream (the VFIO migration data of the device), read back by
 * the destination's mdev, which checks every field: it comes from a
 * migration stream, which the destination trusts no more than a peer.
 * All of it is little-endian whatever the hosts are.
 * @magic: %DL_MIG_STATE_MAGIC.
 * @version: %DL_MIG_STATE_VERSION.
 * @size: sizeof(struct dl_mig_state).
 * @flags: DL_MIG_F_*.
 * @lender: the lender's host id.
 * @dev_id: the device there.
 * @incarnation: the lender's incarnation that lent it.
 * @from_host: the source borrower's host id.
 * @reserved: zero.
 * @ticket: with %DL_MIG_F_HELD, the lender's &struct dl_mig_ticket.
 * @irq_index: the VFIO interrupt index whose vectors @pending counts
 *	(INTx 0, MSI 1, MSI-X 2).
 * @nr_pending: how many bits of @pending are set.
 * @pending: interrupts that fired after the source's guest stopped, one
 *	bit per vector: the destination signals them when its guest runs.
 */
struct dl_mig_state {
	__le32 magic;
	__le16 version;
	__le16 size;
	__le32 flags;
	__le32 lender;
	__le32 dev_id;
	__le32 from_host;
	__le64 incarnation;
	__le64 ticket;
	__le32 irq_index;
	__le32 nr_pending;
	__le64 reserved;
	__le64 pending[DL_MIG_PENDING_VECS / 64];
} __attribute__((packed));

#define DL_CTL_HEADER_SIZE	128
#define DL_HOST_INFO_SIZE	256
#define DL_RING_CTRL_SIZE	128
#define DL_MSG_HDR_SIZE		32
#define DL_PING_SIZE		16
#define DL_BAR_DESC_SIZE	16
#define DL_DEV_INFO_SIZE	144
#define DL_DEV_INFO_EXT_SIZE	32
#define DL_DEV_INFO_FULL_SIZE	176
#define DL_DEV_REF_SIZE		8
#define DL_DEV_LIST_SIZE	136
#define DL_CFG_ACCESS_SIZE	12
#define DL_CFG_BLOCK_REQ_SIZE	8
#define DL_CFG_BLOCK_SIZE	72
#define DL_BAR_ACCESS_SIZE	24
#define DL_DMA_RANGE_SIZE	24
#define DL_DMA_MAP_SIZE		8
#define DL_DMA_UNMAP_SIZE	24
#define DL_IRQ_SET_SIZE		12
#define DL_IRQ_FIRE_SIZE	8
#define DL_IRQ_MASK_SIZE	12
#define DL_IRQ_DIRECT_SIZE	16
#define DL_BAR_WINDOW_SIZE	32
#define DL_BAR_DMA_SIZE		16
#define DL_P2P_DMA_SIZE		24
#define DL_P2P_EXPORT_SIZE	16
#define DL_P2P_LOOKUP_SIZE	24
#define DL_P2P_WINDOW_SIZE	16
#define DL_DEV_FAULT_SIZE	16
#define DL_NTB_HELLO_SIZE	8
#define DL_NTB_DB_SIZE		8
#define DL_NTB_REG_SIZE		8
#define DL_NTB_MW_SIZE		24
#define DL_NTB_XLATE_SIZE	32
#define DL_MIG_QUIESCE_SIZE	16
#define DL_MIG_TICKET_SIZE	16
#define DL_MIG_TAKEOVER_SIZE	16
#define DL_MIG_STATE_SIZE	312

#endif /* DEVLEND_WIRE_H */
