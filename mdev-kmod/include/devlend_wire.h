/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * devlend fabric wire format, version 1.
 *
 * This header is the one definition of everything that crosses the fabric
 * or lives in fabric-shared memory. The kernel module includes it directly;
 * the Rust crates generate their types from it with bindgen, so the two can
 * never disagree. Every multi-byte field is little-endian.
 *
 * The emulated fabric has one shared "control area" (the shared memory of
 * the ivshmem-doorbell device, created and formatted by devlend's ivshmem
 * server). It plays the part that scratchpad registers and a message
 * window play on an NTB adapter:
 *
 *   offset 0              struct dl_ctl_header       (written by the server)
 *   hosts_off + i*stride  struct dl_host_info        (written by host i only)
 *   rings_off + (s*max_hosts + d)*ring_stride
 *                         struct dl_ring_ctrl, then ring_slots slots of
 *                         slot_size bytes: messages from host s to host d.
 *                         prod is written by s only, cons by d only.
 *
 * Nothing read from the control area is trusted: every host, and the
 * server, is a peer that may be faulty or hostile. Readers copy a message
 * out of its slot before parsing it and check every index and length.
 */
#ifndef DEVLEND_WIRE_H
#define DEVLEND_WIRE_H

#include <linux/types.h>

/* "DLFABRIC" as little-endian bytes. */
#define DL_CTL_MAGIC		0x4349524241464c44ULL
/* "DLHOSTIN" as little-endian bytes. */
#define DL_HOST_MAGIC		0x4e4954534f484c44ULL

/* Layout of the control area; bumped on any incompatible layout change. */
#define DL_CTL_LAYOUT_VERSION	1

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
/* ... and a peer whose heartbeat stands still this long is down. */
#define DL_PEER_TIMEOUT_MS	3000

/* Doorbell vectors of the fabric adapter. */
#define DL_DB_VEC_MSG		0	/* messages waiting in a ring to you */
#define DL_DB_VECTORS		4

/**
 * struct dl_ctl_header - describes the control area; written once by the
 * ivshmem server before any host attaches.
 * @magic: %DL_CTL_MAGIC.
 * @layout_version: %DL_CTL_LAYOUT_VERSION.
 * @max_hosts: number of host info slots and ring rows/columns.
 * @ring_slots: slots per ring, a power of two.
 * @slot_size: bytes per slot, header included; a multiple of 64.
 * @hosts_off: offset of host info slot 0.
 * @host_stride: bytes between host info slots.
 * @rings_off: offset of ring (0, 0).
 * @ring_stride: bytes between rings.
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
	__le32 rings_off;
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
 * @ram_size: bytes of RAM, which is the size of the peers' window onto it.
 * @ram_low_size: RAM mapped at physical 0; the rest starts at
 *	@ram_high_base. Window offset of physical address p is p below
 *	@ram_low_size, and p - @ram_high_base + @ram_low_size above.
 * @ram_high_base: physical base of RAM above the PCI hole (4 GiB on q35).
 * @ident_phys: physical address of a page of the owner's RAM that holds
 *	@ident_token in its first 8 bytes; a peer finds which of its windows
 *	shows this host by looking for the token there.
 * @ident_token: random, new each incarnation.
 * @name: the owner's host name, NUL-padded, for humans only.
 */
struct dl_host_info {
	__le64 magic;
	__le32 state;
	__le32 host_id;
	__le64 incarnation;
	__le64 heartbeat;
	__le16 proto_min;
	__le16 proto_max;
	__le32 reserved0;
	__le64 ram_size;
	__le64 ram_low_size;
	__le64 ram_high_base;
	__le64 ident_phys;
	__le64 ident_token;
	char name[32];
	__u8 reserved[144];
} __attribute__((packed));

/**
 * struct dl_ring_ctrl - producer and consumer indices of one ring, on
 * separate cache lines. Both count messages and wrap at 2^32; the slot of
 * index i is i & (ring_slots - 1). A ring is full when prod - cons equals
 * ring_slots; prod - cons greater than that is a corrupt ring.
 * @prod: messages published by the sender; written only by the sender.
 * @cons: messages consumed by the receiver; written only by the receiver.
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

#define DL_CTL_HEADER_SIZE	128
#define DL_HOST_INFO_SIZE	256
#define DL_RING_CTRL_SIZE	128
#define DL_MSG_HDR_SIZE		32
#define DL_PING_SIZE		16

#endif /* DEVLEND_WIRE_H */
