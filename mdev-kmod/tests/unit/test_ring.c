// SPDX-License-Identifier: GPL-2.0
/*
 * fabric/ring.c, rx.c and status.c: how much of a ring each kind of message may
 * use, the producer/consumer arithmetic with indices that wrap at 2^32,
 * full and corrupt rings, messages written and taken through real slots,
 * and stores stopped when the peer's slot no longer vouches for its inbox.
 * Host 0 (this one) and host 1 (the peer) have two rings of 16 slots: the
 * peer's entry in our inbox (in_mem) and ours in the peer's (out_mem).
 */
#include <stdio.h>

#pragma GCC diagnostic push
/* The kernel builds with -Wextra but without these (Makefile.extrawarn). */
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include "../../fabric/ring.c"
#include "../../fabric/rx.c"
#include "../../fabric/status.c"
#pragma GCC diagnostic pop

#include "unit.h"

#define SLOTS		16
#define SLOT_SIZE	128
#define PEER		1
#define PEER_EPOCH	0x5eed0001U

struct ring_mem {
	struct dl_ring_ctrl ctrl;
	u8 slots[SLOTS][SLOT_SIZE];
};

static struct dl_fabric fab;
static struct ring_mem in_mem, out_mem;
static struct dl_host_info peer_info;
static u8 rx_buf[SLOT_SIZE];
static unsigned int ndoorbells;
static bool link_up;

/* What the receive side handed to dl_msg_dispatch(). */
static struct dl_fabric_msg got[2 * SLOTS];
static u8 got_data[2 * SLOTS][SLOT_SIZE];
static unsigned int ngot;

static void fake_db_set(struct dl_fabric *f, u32 peer, unsigned int vector)
{
	(void)f;
	(void)peer;
	(void)vector;
	ndoorbells++;
}

static const struct dl_fabric_backend_ops fake_ops = {
	.name = "fake",
	.peer_db_set = fake_db_set,
};

/* fabric/link.c, ctl.c and msg.c, as far as ring.c and rx.c see them. */
bool dl_peer_link(struct dl_peer *peer, u16 *proto, u32 *epoch)
{
	(void)peer;
	if (proto)
		*proto = DL_PROTO_V1;
	if (epoch)
		*epoch = PEER_EPOCH;
	return link_up;
}

struct dl_host_info *dl_ctl_host(struct dl_fabric *f, u32 id)
{
	(void)f;
	(void)id;
	return &peer_info;
}

void dl_inbox_entry(struct dl_fabric *f, void *inbox, u32 id,
		    struct dl_ring *ring)
{
	struct ring_mem *m = inbox;

	(void)f;
	(void)id;
	ring->ctrl = &m->ctrl;
	ring->slots = &m->slots[0][0];
}

void dl_msg_dispatch(struct dl_fabric *f, struct dl_peer *peer,
		     const struct dl_fabric_msg *msg, u16 flags, u32 status)
{
	(void)f;
	(void)peer;
	(void)flags;
	(void)status;
	if (ngot < ARRAY_SIZE(got)) {
		got[ngot] = *msg;
		memcpy(got_data[ngot], msg->data, msg->len);
	}
	ngot++;
}

/* Messages of type ATOMIC_TYPE have an atomic handler. */
#define ATOMIC_TYPE	70
static unsigned int ngot_atomic;

bool dl_msg_is_atomic(struct dl_fabric *f, u16 type, u16 flags, u64 req_id)
{
	(void)f;
	(void)flags;
	(void)req_id;
	return type == ATOMIC_TYPE;
}

/* While set, the atomic handler leaves messages to the work. */
static bool atomic_declines;

bool dl_msg_dispatch_atomic(struct dl_fabric *f,
			    const struct dl_fabric_msg *msg)
{
	(void)f;
	if (atomic_declines)
		return false;
	if (ngot < ARRAY_SIZE(got)) {
		got[ngot] = *msg;
		memcpy(got_data[ngot], msg->data, msg->len);
	}
	ngot++;
	ngot_atomic++;
	return true;
}

static struct dl_peer *setup(u32 ring_slots)
{
	struct dl_peer *peer = &fab.peers[PEER];

	memset(&fab, 0, sizeof(fab));
	memset(&out_mem, 0xa5, sizeof(out_mem));
	memset(&in_mem, 0xa5, sizeof(in_mem));
	memset(&peer_info, 0, sizeof(peer_info));
	fab.ops = &fake_ops;
	fab.geom.max_hosts = 2;
	fab.geom.ring_slots = ring_slots;
	fab.geom.slot_size = SLOT_SIZE;
	fab.geom.ring_stride = sizeof(struct ring_mem);
	fab.host_id = 0;
	fab.incarnation = 0xabcd00000000cafeULL;
	fab.rx_buf = rx_buf;
	fab.inbox = &in_mem;
	peer->fab = &fab;
	peer->id = PEER;
	peer_info.state = cpu_to_le32(DL_HOST_UP);
	peer_info.incarnation = cpu_to_le64(PEER_EPOCH);
	peer_info.bound[0] = cpu_to_le64(fab.incarnation);
	ndoorbells = 0;
	ngot = 0;
	ngot_atomic = 0;
	atomic_declines = false;
	kshim_lock_taken = false;
	kshim_warnings = 0;
	link_up = true;
	dl_ring_init(&fab, peer);
	dl_ring_bind(&fab, peer);
	/* The peer zeroed our entry in its inbox when it bound us. */
	memset(&out_mem, 0, sizeof(out_mem));
	dl_ring_open(&fab, peer, &out_mem, PEER_EPOCH);
	/* As after the receive side's first look at this binding. */
	peer->rx.gen = peer->bind_gen;
	return peer;
}

static void test_share(void)
{
	static const struct { u32 slots, share, normal; } t[] = {
		{ 1, 1, 1 }, { 2, 1, 1 }, { 4, 2, 1 }, { 16, 8, 4 },
		/* Below twice the urgent slots, half the share is kept. */
		{ 32, 16, 8 }, { 34, 17, 9 }, { 64, 32, 24 },
		{ DL_DEFAULT_RING_SLOTS, 64, 64 - DL_FABRIC_URGENT_SLOTS },
		{ DL_MAX_RING_SLOTS, 512, 512 - DL_FABRIC_URGENT_SLOTS },
	};
	unsigned int i;

	CHECK_EQ(DL_FABRIC_URGENT_SLOTS, 8);
	for (i = 0; i < ARRAY_SIZE(t); i++) {
		fab.geom.ring_slots = t[i].slots;
		CHECK_EQ(dl_ring_share(&fab), t[i].share);
		CHECK_EQ(dl_ring_share_normal(&fab), t[i].normal);
		/* Responses always have the other half. */
		CHECK(t[i].slots - dl_ring_share(&fab) >= t[i].slots / 2);
	}
}

/* Room for a response, an urgent and a normal message. */
static void check_room(struct dl_peer *peer, u32 resp, u32 urgent, u32 normal)
{
	spin_lock(&peer->tx.lock);
	CHECK_EQ(dl_ring_tx_room(&fab, peer, true, false), resp);
	CHECK_EQ(dl_ring_tx_room(&fab, peer, false, true), urgent);
	CHECK_EQ(dl_ring_tx_room(&fab, peer, false, false), normal);
	spin_unlock(&peer->tx.lock);
}

static void test_room_wrap(void)
{
	struct dl_peer *peer = setup(SLOTS);

	/* Empty, right below the wrap. */
	peer->tx.prod = 0xfffffffcU;
	in_mem.ctrl.cons = cpu_to_le32(0xfffffffcU);
	check_room(peer, 16, 8, 4);
	/* 2 used, across the wrap. */
	peer->tx.prod = 0x00000001U;
	in_mem.ctrl.cons = cpu_to_le32(0xffffffffU);
	check_room(peer, 14, 6, 2);
	/* 4 used: no room for normal requests, some for urgent ones. */
	peer->tx.prod = 0x00000002U;
	in_mem.ctrl.cons = cpu_to_le32(0xfffffffeU);
	check_room(peer, 12, 4, 0);
	/* 8 used: the share is full; responses still fit. */
	peer->tx.prod = 0x00000006U;
	check_room(peer, 8, 0, 0);
	/* Full. */
	peer->tx.prod = 0x0000000eU;
	check_room(peer, 0, 0, 0);
	CHECK_EQ(kshim_warnings, 0);
	CHECK_EQ(peer->tx.prod, 0x0000000eU);
}

static void test_room_corrupt(void)
{
	struct dl_peer *peer = setup(SLOTS);

	/* One more than a ring's worth used: the consumer index is bad. */
	peer->tx.prod = 0x00000007U;
	in_mem.ctrl.cons = cpu_to_le32(0xfffffff6U);
	spin_lock(&peer->tx.lock);
	CHECK_EQ(dl_ring_tx_room(&fab, peer, false, false), 4);
	spin_unlock(&peer->tx.lock);
	/* We continue from the peer's index, and publish that. */
	CHECK_EQ(peer->tx.prod, 0xfffffff6U);
	CHECK_EQ(le32_to_cpu(out_mem.ctrl.prod), 0xfffffff6U);
	CHECK_EQ(kshim_warnings, 1);

	/* A consumer ahead of the producer. */
	peer->tx.prod = 5;
	in_mem.ctrl.cons = cpu_to_le32(6);
	check_room(peer, 16, 8, 4);
	CHECK_EQ(peer->tx.prod, 6);
	CHECK_EQ(kshim_warnings, 2);
}

/* Responses answer a request of the incarnation the ring is bound to. */
static int send_epoch(struct dl_peer *peer, u16 type, u64 req_id, u16 flags,
		      bool urgent, size_t len, u32 epoch, u64 *bound_inc)
{
	u8 data[SLOT_SIZE];
	struct dl_fabric_msg msg = {
		.type = type, .req_id = req_id, .data = data, .len = len,
		.urgent = urgent, .epoch = epoch,
	};

	memset(data, type, sizeof(data));
	return dl_ring_send(&fab, peer, &msg, flags, 0, bound_inc);
}

static int send(struct dl_peer *peer, u16 type, u64 req_id, u16 flags,
		bool urgent, size_t len)
{
	return send_epoch(peer, type, req_id, flags, urgent, len, PEER_EPOCH,
			  NULL);
}

/* The message in the slot of index @idx of the ring to the peer. */
static void check_slot(u32 idx, u16 type, u32 seq, u16 flags, size_t len)
{
	const u8 *slot = out_mem.slots[idx % SLOTS];
	struct dl_msg_hdr hdr;

	memcpy(&hdr, slot, sizeof(hdr));
	CHECK_EQ(le16_to_cpu(hdr.type), type);
	CHECK_EQ(le16_to_cpu(hdr.proto), DL_PROTO_V1);
	CHECK_EQ(le16_to_cpu(hdr.len), len);
	CHECK_EQ(le16_to_cpu(hdr.flags), flags);
	CHECK_EQ(le32_to_cpu(hdr.src), 0);
	CHECK_EQ(le32_to_cpu(hdr.epoch), 0x0000cafe);
	CHECK_EQ(le32_to_cpu(hdr.seq), seq);
	CHECK_EQ(le64_to_cpu(hdr.req_id), 0x100ULL + seq);
	if (len)
		CHECK_EQ(slot[DL_MSG_HDR_SIZE + len - 1], type);
}

static void test_send_fill(void)
{
	const u32 start = 0xfffffffaU;
	struct dl_peer *peer;
	unsigned int i;
	u32 seq = 0;

	/* A binding starts at 0. */
	peer = setup(SLOTS);
	CHECK_EQ(peer->tx.prod, 0);
	CHECK_EQ(peer->tx.seq, 0);
	CHECK_EQ(le32_to_cpu(in_mem.ctrl.cons), 0);
	/* The peer consumed up to where we start, 6 before the wrap. */
	peer->tx.prod = start;
	in_mem.ctrl.cons = cpu_to_le32(start);

	/* Normal requests: the share less the urgent slots, 4. */
	for (i = 0; i < 4; i++, seq++)
		CHECK_EQ(send(peer, 20, 0x100 + seq, 0, false, 8 + i), 0);
	CHECK_EQ(send(peer, 20, 0x100 + seq, 0, false, 8), -EAGAIN);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_TX_RING_FULL]), 1);
	/* Urgent ones: up to the share, 8. */
	for (i = 0; i < 4; i++, seq++)
		CHECK_EQ(send(peer, 27, 0x100 + seq, 0, true, 24), 0);
	CHECK_EQ(send(peer, 27, 0x100 + seq, 0, true, 24), -EAGAIN);
	/* Responses: the whole ring. */
	for (i = 0; i < 8; i++, seq++)
		CHECK_EQ(send(peer, 26, 0x100 + seq, DL_MSG_F_RESPONSE, false,
			      0), 0);
	CHECK_EQ(send(peer, 26, 0x100 + seq, DL_MSG_F_RESPONSE, false, 0),
		 -EAGAIN);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_TX_RING_FULL]), 3);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_TX_MSGS]), 16);
	CHECK_EQ(ndoorbells, 16);

	/* Published across the wrap; each message in its slot. */
	CHECK_EQ(le32_to_cpu(out_mem.ctrl.prod), start + 16);
	CHECK_EQ(le32_to_cpu(out_mem.ctrl.prod), 0x0000000aU);
	for (i = 0; i < 4; i++)
		check_slot(start + i, 20, i, 0, 8 + i);
	check_slot(start + 6, 27, 6, 0, 24);	/* index 0: the wrap */
	check_slot(start + 15, 26, 15, DL_MSG_F_RESPONSE, 0);

	/* The peer takes 5: room again, as much as was freed. */
	in_mem.ctrl.cons = cpu_to_le32(start + 5);
	check_room(peer, 5, 0, 0);
	for (i = 0; i < 5; i++, seq++)
		CHECK_EQ(send(peer, 26, 0x100 + seq, DL_MSG_F_RESPONSE, false,
			      4), 0);
	check_slot(start + 20, 26, 20, DL_MSG_F_RESPONSE, 4);
	CHECK_EQ(kshim_warnings, 0);
}

static void test_send_atomic(void)
{
	struct dl_peer *peer = setup(SLOTS);
	struct dl_fabric_msg msg = { .type = 23, .len = 8 };
	u8 data[8] = { 23, 23, 23, 23, 23, 23, 23, 23 };
	unsigned long t0 = jiffies;
	unsigned int i;

	msg.data = data;
	/* Posted messages take the share less the urgent slots: 4 of 16. */
	for (i = 0; i < 4; i++)
		CHECK_EQ(dl_ring_send_atomic(&fab, peer, &msg), 0);
	{
		struct dl_msg_hdr hdr;

		memcpy(&hdr, out_mem.slots[3], sizeof(hdr));
		CHECK_EQ(le16_to_cpu(hdr.type), 23);
		CHECK_EQ(le32_to_cpu(hdr.seq), 3);
		CHECK_EQ(le16_to_cpu(hdr.flags), 0);
		CHECK_EQ(le64_to_cpu(hdr.req_id), 0);
		CHECK_EQ(out_mem.slots[3][DL_MSG_HDR_SIZE + 7], 23);
	}
	CHECK_EQ(ndoorbells, 4);
	/* Then it fails at once, counted, and never waits. */
	CHECK_EQ(dl_ring_send_atomic(&fab, peer, &msg), -EAGAIN);
	CHECK_EQ(jiffies, t0);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_TX_RING_FULL]), 1);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_TX_MSGS]), 4);
	msg.len = SLOT_SIZE;
	CHECK_EQ(dl_ring_send_atomic(&fab, peer, &msg), -EMSGSIZE);
	link_up = false;
	msg.len = 0;
	CHECK_EQ(dl_ring_send_atomic(&fab, peer, &msg), -ENOTCONN);
	CHECK_EQ(peer->tx.prod, 4);
}

static void test_send_errors(void)
{
	struct dl_peer *peer = setup(SLOTS);

	CHECK_EQ(send(peer, 20, 1, 0, false, SLOT_SIZE - DL_MSG_HDR_SIZE), 0);
	CHECK_EQ(send(peer, 20, 1, 0, false, SLOT_SIZE - DL_MSG_HDR_SIZE + 1),
		 -EMSGSIZE);
	link_up = false;
	CHECK_EQ(send(peer, 20, 1, 0, false, 0), -ENOTCONN);
	CHECK_EQ(peer->tx.prod, 1);
	CHECK_EQ(ndoorbells, 1);
}

static void test_send_bound_incarnation(void)
{
	struct dl_peer *peer = setup(SLOTS);
	u64 inc = 0;

	/* A request learns which incarnation it went to. */
	CHECK_EQ(send_epoch(peer, 20, 0x100, 0, false, 4, 0, &inc), 0);
	CHECK_EQ(inc, PEER_EPOCH);
	/* The answer to a request of this incarnation goes out. */
	CHECK_EQ(send_epoch(peer, 26, 0x101, DL_MSG_F_RESPONSE, false, 0,
			    PEER_EPOCH, NULL), 0);
	CHECK_EQ(peer->tx.prod, 2);
	/*
	 * One its earlier incarnation asked for does not: ids restart with
	 * each incarnation, so it could pass for the answer to a new one.
	 */
	CHECK_EQ(send_epoch(peer, 26, 0x102, DL_MSG_F_RESPONSE, false, 0,
			    PEER_EPOCH - 1, NULL), -ENOTCONN);
	CHECK_EQ(peer->tx.prod, 2);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_STALE_ANSWERS]), 1);
	CHECK_EQ(ndoorbells, 2);
}

/* The peer puts a message into the ring to us at index @idx. */
static void peer_put(u32 idx, u16 type, u32 seq, u16 len, u32 src, u32 epoch)
{
	u8 *slot = in_mem.slots[idx % SLOTS];
	struct dl_msg_hdr hdr = {
		.type = cpu_to_le16(type),
		.proto = cpu_to_le16(DL_PROTO_V1),
		.len = cpu_to_le16(len),
		.src = cpu_to_le32(src),
		.epoch = cpu_to_le32(epoch),
		.seq = cpu_to_le32(seq),
		.req_id = cpu_to_le64(0x900 + seq),
	};

	memcpy(slot, &hdr, sizeof(hdr));
	if (len <= SLOT_SIZE - DL_MSG_HDR_SIZE)
		memset(slot + DL_MSG_HDR_SIZE, seq & 0xff, len);
}

static void test_receive(void)
{
	const u32 start = 0xfffffffdU;
	struct dl_peer *peer;
	bool held = false;
	unsigned int i;

	/* What was in the peer's entry at binding is gone. */
	peer = setup(SLOTS);
	CHECK_EQ(le32_to_cpu(in_mem.ctrl.prod), 0);
	CHECK_EQ(in_mem.slots[SLOTS - 1][SLOT_SIZE - 1], 0);
	CHECK(!dl_rx_peer(&fab, peer, &held));
	CHECK_EQ(peer->rx.cons, 0);
	CHECK_EQ(ngot, 0);
	/* Somewhere near the wrap. */
	peer->rx.cons = start;
	in_mem.ctrl.prod = cpu_to_le32(start);

	/* Five messages across the wrap, taken in order. */
	for (i = 0; i < 5; i++)
		peer_put(start + i, 40 + i, 7 + i, 3 * i, PEER, PEER_EPOCH);
	in_mem.ctrl.prod = cpu_to_le32(start + 5);
	CHECK(!dl_rx_peer(&fab, peer, &held));
	CHECK_EQ(ngot, 5);
	for (i = 0; i < 5 && i < ngot; i++) {
		CHECK_EQ(got[i].type, 40 + i);
		CHECK_EQ(got[i].peer, PEER);
		CHECK_EQ(got[i].req_id, 0x900 + 7 + i);
		CHECK_EQ(got[i].len, 3 * i);
		if (i)
			CHECK_EQ(got_data[i][3 * i - 1], 7 + i);
	}
	CHECK_EQ(peer->rx.cons, 2);
	CHECK_EQ(le32_to_cpu(out_mem.ctrl.cons), 2);
	CHECK_EQ(peer->rx.next_seq, 12);

	/*
	 * A full ring (16) is taken in one pass. Among them a sequence gap,
	 * a message too long for a slot, one with another source and one
	 * from an earlier incarnation of the peer: all are consumed, only
	 * the good ones dispatched.
	 */
	ngot = 0;
	for (i = 0; i < SLOTS; i++)
		peer_put(2 + i, 50, 12 + i, 4, PEER, PEER_EPOCH);
	peer_put(2 + 3, 50, 100, 4, PEER, PEER_EPOCH);		/* gap */
	peer_put(2 + 6, 50, 18, SLOT_SIZE, PEER, PEER_EPOCH);	/* too long */
	peer_put(2 + 8, 50, 20, 4, 0, PEER_EPOCH);		/* source */
	peer_put(2 + 9, 50, 21, 4, PEER, PEER_EPOCH - 1);	/* stale */
	in_mem.ctrl.prod = cpu_to_le32(2 + SLOTS);
	CHECK(!dl_rx_peer(&fab, peer, &held));
	CHECK_EQ(ngot, SLOTS - 3);
	CHECK_EQ(peer->rx.cons, 2 + SLOTS);
	/*
	 * Sequence errors: the jump to 100 and back, and after each run of
	 * dropped messages (their numbers are not taken), the next good one.
	 */
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_RX_SEQ_ERRORS]), 4);
	CHECK_EQ(peer->rx.next_seq, 12 + SLOTS);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_RX_BAD_MSGS]), 2);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_RX_STALE]), 1);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_RX_CORRUPT_RING]), 0);

	/*
	 * A message of the peer's next incarnation, which the liveness work
	 * has not seen yet, waits in the ring.
	 */
	ngot = 0;
	peer_info.incarnation = cpu_to_le64(PEER_EPOCH + 1);
	peer_put(18, 51, 0, 4, PEER, PEER_EPOCH + 1);
	in_mem.ctrl.prod = cpu_to_le32(19);
	CHECK(!dl_rx_peer(&fab, peer, &held));
	CHECK_EQ(ngot, 0);
	CHECK_EQ(peer->rx.cons, 18);
	/* And nothing is taken while the link is down. */
	link_up = false;
	peer_info.incarnation = cpu_to_le64(PEER_EPOCH);
	CHECK(!dl_rx_peer(&fab, peer, &held));
	CHECK_EQ(peer->rx.cons, 18);
}

static void test_receive_corrupt(void)
{
	struct dl_peer *peer = setup(SLOTS);
	unsigned int i;
	bool held = false;

	/* A producer a ring and one ahead: skipped, nothing dispatched. */
	peer->rx.cons = 0xfffffff8U;
	peer->rx.synced = true;
	in_mem.ctrl.prod = cpu_to_le32(0xfffffff8U + SLOTS + 1);
	CHECK(!dl_rx_peer(&fab, peer, &held));
	CHECK_EQ(ngot, 0);
	CHECK_EQ(peer->rx.cons, 0x00000009U);
	CHECK_EQ(le32_to_cpu(out_mem.ctrl.cons), 0x00000009U);
	CHECK(!peer->rx.synced);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_RX_CORRUPT_RING]), 1);

	/* A producer behind the consumer is as corrupt. */
	in_mem.ctrl.prod = cpu_to_le32(0x00000008U);
	CHECK(!dl_rx_peer(&fab, peer, &held));
	CHECK_EQ(peer->rx.cons, 8);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_RX_CORRUPT_RING]), 2);

	/* Exactly a ring's worth is not corrupt. */
	for (i = 0; i < SLOTS; i++)
		peer_put(8 + i, 60, i, 0, PEER, PEER_EPOCH);
	in_mem.ctrl.prod = cpu_to_le32(8 + SLOTS);
	CHECK(!dl_rx_peer(&fab, peer, &held));
	CHECK_EQ(ngot, SLOTS);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_RX_CORRUPT_RING]), 2);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_RX_SEQ_ERRORS]), 0);
	CHECK(!held);
}

static void test_receive_fast(void)
{
	struct dl_peer *peer = setup(SLOTS);
	static const u16 types[] = { ATOMIC_TYPE, ATOMIC_TYPE, 50,
				     ATOMIC_TYPE, 51 };
	bool held = false;
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(types); i++)
		peer_put(i, types[i], i, 4, PEER, PEER_EPOCH);
	in_mem.ctrl.prod = cpu_to_le32(ARRAY_SIZE(types));

	/* Nothing while the work owns the rings, or the lock is taken. */
	fab.rx_busy = true;
	CHECK(dl_rx_fast(&fab));
	fab.rx_busy = false;
	kshim_lock_taken = true;
	CHECK(dl_rx_fast(&fab));
	kshim_lock_taken = false;
	CHECK_EQ(ngot, 0);

	/* The interrupt takes the head's relays, stops at the first other. */
	CHECK(dl_rx_fast(&fab));
	CHECK_EQ(ngot_atomic, 2);
	CHECK_EQ(peer->rx.cons, 2);
	CHECK_EQ(le32_to_cpu(out_mem.ctrl.cons), 2);
	CHECK_EQ(got[1].type, ATOMIC_TYPE);
	/* Again: still stuck behind it, takes nothing. */
	CHECK(dl_rx_fast(&fab));
	CHECK_EQ(ngot, 2);

	/* The work takes the rest in ring order, the relay behind it too. */
	CHECK(!dl_rx_peer(&fab, peer, &held));
	CHECK_EQ(ngot, 5);
	CHECK_EQ(ngot_atomic, 2);
	for (i = 0; i < ARRAY_SIZE(types); i++)
		CHECK_EQ(got[i].type, types[i]);
	CHECK_EQ(peer->rx.next_seq, ARRAY_SIZE(types));
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_RX_SEQ_ERRORS]), 0);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_RX_MSGS]), 5);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_RX_IN_IRQ]), 2);

	/* A relay alone: taken whole, nothing left for the work. */
	peer_put(5, ATOMIC_TYPE, 5, 4, PEER, PEER_EPOCH);
	in_mem.ctrl.prod = cpu_to_le32(6);
	CHECK(!dl_rx_fast(&fab));
	CHECK_EQ(ngot_atomic, 3);
	CHECK_EQ(peer->rx.cons, 6);

	/*
	 * A relay the handler leaves: it stays, uncounted, and the relay
	 * behind it waits too; the work then takes both in order.
	 */
	atomic_declines = true;
	peer_put(6, ATOMIC_TYPE, 6, 4, PEER, PEER_EPOCH);
	peer_put(7, ATOMIC_TYPE, 7, 4, PEER, PEER_EPOCH);
	in_mem.ctrl.prod = cpu_to_le32(8);
	CHECK(dl_rx_fast(&fab));
	CHECK_EQ(peer->rx.cons, 6);
	CHECK_EQ(peer->rx.next_seq, 6);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_RX_MSGS]), 6);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_RX_IN_IRQ]), 3);
	CHECK(!dl_rx_peer(&fab, peer, &held));
	CHECK_EQ(ngot, 8);
	CHECK_EQ(got[6].type, ATOMIC_TYPE);
	CHECK_EQ(got[6].epoch, PEER_EPOCH);
	CHECK_EQ(peer->rx.next_seq, 8);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_RX_SEQ_ERRORS]), 0);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_RX_MSGS]), 8);
	atomic_declines = false;

	/* Nor from a peer whose link is down. */
	link_up = false;
	peer_put(8, ATOMIC_TYPE, 8, 4, PEER, PEER_EPOCH);
	in_mem.ctrl.prod = cpu_to_le32(9);
	CHECK(!dl_rx_fast(&fab));
	CHECK_EQ(peer->rx.cons, 8);
}

static void test_receive_backpressure(void)
{
	struct dl_peer *peer = setup(SLOTS);
	unsigned long t0;
	unsigned int i;
	bool held = false;

	/* Our ring to the peer is full of answers it has not taken. */
	for (i = 0; i < SLOTS; i++)
		CHECK_EQ(send(peer, 26, 0x100 + i, DL_MSG_F_RESPONSE, false,
			      0), 0);
	/* One more answer from the receive work fails at once. */
	t0 = jiffies;
	kshim_current_work = &fab.rx_work;
	CHECK_EQ(send(peer, 26, 0x200, DL_MSG_F_RESPONSE, false, 0), -EAGAIN);
	kshim_current_work = NULL;
	CHECK_EQ(jiffies, t0);
	/* From elsewhere (a device's slow work), it waits its bounded while. */
	CHECK_EQ(send(peer, 26, 0x201, DL_MSG_F_RESPONSE, false, 0), -EAGAIN);
	CHECK(jiffies - t0 >= DL_TX_FULL_WAIT_MS);
	/* So does a posted message. */
	t0 = jiffies;
	CHECK_EQ(send(peer, 20, 0, 0, false, 0), -EAGAIN);
	CHECK(jiffies - t0 >= DL_TX_FULL_WAIT_MS);
	/*
	 * But not one a handler posts (a hello answered, an INTx fired
	 * again): the receive work serves every peer and never waits.
	 */
	t0 = jiffies;
	kshim_current_work = &fab.rx_work;
	CHECK_EQ(send(peer, 20, 0, 0, false, 0), -EAGAIN);
	kshim_current_work = NULL;
	CHECK_EQ(jiffies, t0);

	/* Its requests stay in its ring, counted once, and are polled for. */
	for (i = 0; i < 3; i++)
		peer_put(i, 60, i, 0, PEER, PEER_EPOCH);
	in_mem.ctrl.prod = cpu_to_le32(3);
	CHECK(!dl_rx_peer(&fab, peer, &held));
	CHECK(held);
	CHECK_EQ(ngot, 0);
	CHECK_EQ(peer->rx.cons, 0);
	held = false;
	CHECK(!dl_rx_peer(&fab, peer, &held));
	CHECK(held);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_RX_HELD_BACK]), 1);
	fab.rx_poll.armed = 0;
	dl_rx_work(&fab.rx_work);
	CHECK_EQ(fab.rx_poll.armed, 1);
	CHECK_EQ(ngot, 0);

	/* It takes one answer: its requests are served again. */
	in_mem.ctrl.cons = cpu_to_le32(1);
	held = false;
	CHECK(!dl_rx_peer(&fab, peer, &held));
	CHECK(!held);
	CHECK_EQ(ngot, 3);
	CHECK_EQ(peer->rx.cons, 3);
	CHECK(!peer->rx.held_back);
	fab.rx_poll.armed = 0;
	dl_rx_work(&fab.rx_work);
	CHECK_EQ(fab.rx_poll.armed, 0);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_RX_HELD_BACK]), 1);
}

static void test_bind_and_fence(void)
{
	struct dl_peer *peer = setup(SLOTS);
	u8 before[sizeof(out_mem)];
	bool held = false;

	/* Some traffic both ways in this binding. */
	CHECK_EQ(send(peer, 20, 1, 0, false, 8), 0);
	peer_put(0, 40, 0, 4, PEER, PEER_EPOCH);
	in_mem.ctrl.prod = cpu_to_le32(1);
	CHECK(!dl_rx_peer(&fab, peer, &held));
	CHECK_EQ(ngot, 1);
	CHECK_EQ(le32_to_cpu(out_mem.ctrl.cons), 1);

	/*
	 * The peer's slot stops vouching (here: it shows another
	 * incarnation): no store goes into its inbox, neither a message
	 * nor our consumer index; counted once, and the ring stays shut.
	 */
	peer_info.incarnation = cpu_to_le64(PEER_EPOCH + 1);
	memcpy(before, &out_mem, sizeof(before));
	CHECK_EQ(send(peer, 20, 2, 0, false, 8), -ENOTCONN);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_TX_FENCED]), 1);
	peer_info.incarnation = cpu_to_le64(PEER_EPOCH);
	CHECK_EQ(send(peer, 20, 2, 0, false, 8), -ENOTCONN);
	peer_put(1, 40, 1, 4, PEER, PEER_EPOCH);
	in_mem.ctrl.prod = cpu_to_le32(2);
	CHECK(!dl_rx_peer(&fab, peer, &held));
	CHECK_EQ(ngot, 1);
	CHECK(!memcmp(before, &out_mem, sizeof(before)));
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_TX_FENCED]), 1);
	CHECK_EQ(kshim_warnings, 1);

	/* Nor when it no longer binds us, or says anything but UP. */
	dl_ring_open(&fab, peer, &out_mem, PEER_EPOCH);
	peer_info.bound[0] = 0;
	CHECK_EQ(dl_ring_send_atomic(&fab, peer,
				     &(struct dl_fabric_msg){ .type = 23 }),
		 -ENOTCONN);
	dl_ring_open(&fab, peer, &out_mem, PEER_EPOCH);
	peer_info.bound[0] = cpu_to_le64(fab.incarnation);
	peer_info.state = cpu_to_le32(DL_HOST_INIT);
	CHECK_EQ(send(peer, 20, 2, 0, false, 8), -ENOTCONN);
	CHECK(!memcmp(before, &out_mem, sizeof(before)));
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_TX_FENCED]), 3);

	/* Closed, the mapping is handed back and nothing is stored. */
	dl_ring_open(&fab, peer, &out_mem, PEER_EPOCH);
	peer_info.state = cpu_to_le32(DL_HOST_UP);
	CHECK(dl_ring_close(&fab, peer) == &out_mem);
	CHECK(!dl_ring_close(&fab, peer));
	CHECK_EQ(send(peer, 20, 2, 0, false, 8), -ENOTCONN);
	CHECK_EQ(atomic64_read(&peer->cnt[DL_CNT_TX_FENCED]), 3);

	/*
	 * A new binding (the peer restarted): our entry for it is zeroed,
	 * both indices restart at 0, and the receive side, seeing the new
	 * generation, takes the new binding's first message at index 0.
	 */
	peer_info.incarnation = cpu_to_le64(PEER_EPOCH + 2);
	dl_ring_bind(&fab, peer);
	CHECK_EQ(le32_to_cpu(in_mem.ctrl.prod), 0);
	CHECK_EQ(le32_to_cpu(in_mem.ctrl.cons), 0);
	CHECK_EQ(peer->tx.prod, 0);
	memset(&out_mem, 0, sizeof(out_mem));
	dl_ring_open(&fab, peer, &out_mem, PEER_EPOCH + 2);
	CHECK_EQ(send(peer, 20, 3, 0, false, 8), 0);
	CHECK_EQ(le32_to_cpu(out_mem.ctrl.prod), 1);
	{
		struct dl_msg_hdr hdr;

		memcpy(&hdr, out_mem.slots[0], sizeof(hdr));
		CHECK_EQ(le32_to_cpu(hdr.seq), 0);
		CHECK_EQ(le64_to_cpu(hdr.req_id), 3);
	}
	peer_put(0, 41, 0, 4, PEER, PEER_EPOCH);
	in_mem.ctrl.prod = cpu_to_le32(1);
	ngot = 0;
	CHECK(!dl_rx_peer(&fab, peer, &held));
	CHECK_EQ(ngot, 1);
	CHECK_EQ(peer->rx.cons, 1);
	CHECK_EQ(le32_to_cpu(out_mem.ctrl.cons), 1);
}

/*
 * status.c: each status a responder can send reaches the requester as the
 * errno it stands for, whatever a peer writes maps to some errno, and an
 * errno the wire has no word for travels as EIO.
 */
static void test_status(void)
{
	static const int errnos[] = {
		0, -EINVAL, -EOPNOTSUPP, -EBUSY, -ENODEV, -EIO, -ETIMEDOUT,
	};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(errnos); i++)
		CHECK_EQ(dl_status_to_errno(dl_errno_to_status(errnos[i])),
			 errnos[i]);
	CHECK_EQ(dl_errno_to_status(-ETIMEDOUT), DL_STATUS_ETIMEDOUT);
	CHECK_EQ(dl_errno_to_status(-ERANGE), DL_STATUS_EINVAL);
	CHECK_EQ(dl_errno_to_status(-ENOMEM), DL_STATUS_EIO);
	CHECK_EQ(dl_errno_to_status(-EPROTO), DL_STATUS_EIO);
	CHECK_EQ(dl_status_to_errno(DL_STATUS_ETIMEDOUT + 1), -EPROTO);
	CHECK_EQ(dl_status_to_errno(0xffffffffU), -EPROTO);
}

static const struct unit_test tests[] = {
	{ "share: responses keep half, urgent requests their 8 slots",
	  test_share },
	{ "tx room: responses, urgent, normal; indices wrapping at 2^32",
	  test_room_wrap },
	{ "tx room: a consumer index out of the ring is resynced",
	  test_room_corrupt },
	{ "send: fill a ring across the wrap; each kind stops at its limit",
	  test_send_fill },
	{ "send: payload too large, peer down", test_send_errors },
	{ "send: requests learn the incarnation; stale answers are not sent",
	  test_send_bound_incarnation },
	{ "send from an interrupt: the posted share, then fails at once",
	  test_send_atomic },
	{ "receive: in order across the wrap; bad, stale, gapped messages",
	  test_receive },
	{ "receive: corrupt producer index skipped; a full ring is not",
	  test_receive_corrupt },
	{ "receive in the doorbell interrupt: head relays only, in order",
	  test_receive_fast },
	{ "receive: held back while the peer leaves its answers; no handler waits",
	  test_receive_backpressure },
	{ "binding: stores stop when the peer's slot stops vouching; rebind at 0",
	  test_bind_and_fence },
	{ "status: each status its errno both ways; unknown ones EPROTO",
	  test_status },
};

UNIT_SUITE(ring_suite,
	   "fabric/ring.c, rx.c and status.c: ring index arithmetic, statuses",
	   tests);
