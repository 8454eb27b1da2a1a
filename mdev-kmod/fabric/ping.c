// SPDX-License-Identifier: GPL-2.0
/*
 * The ping responder: every host answers DL_MSG_PING, so that any peer
 * can check the path to it (docs/fabric-protocol.md, "Ping self-test").
 * The requester is a client module of its own, devlend_fabric_selftest
 * (fabric-selftest/), on the public API only; the responder stays here
 * because answering pings is part of the protocol, with or without that
 * module, and because what it sees is counted in the sender's per-peer
 * counters (ping_rx, ping_crc_errors, ping_order_errors).
 *
 * It checks the crc and that the numbers of a run follow each other,
 * and echoes the payload: with status EINVAL if the crc was wrong.
 */
#include <linux/crc32.h>

#include "internal.h"

/* crc32 as zlib computes it, which is what the wire format specifies. */
static u32 dl_crc32(const void *data, size_t len)
{
	return crc32_le(~0U, data, len) ^ ~0U;
}

static void dl_ping_handler(struct dl_fabric *fab,
			    const struct dl_fabric_msg *msg, void *priv)
{
	struct dl_peer *peer = &fab->peers[msg->peer];
	const struct dl_ping *ping = msg->data;
	struct dl_ping_rx *st = &peer->ping;
	u32 seq;
	u64 nonce;
	int err = 0;

	if (msg->len < DL_PING_SIZE) {
		dl_peer_count(peer, DL_CNT_RX_BAD_MSGS);
		err = -EINVAL;
		goto respond;
	}
	dl_peer_count(peer, DL_CNT_PING_RX);

	if (dl_crc32(ping->data, msg->len - DL_PING_SIZE) !=
	    le32_to_cpu(ping->data_crc)) {
		dl_peer_count(peer, DL_CNT_PING_CRC_ERRORS);
		err = -EINVAL;
	}

	seq = le32_to_cpu(ping->test_seq);
	nonce = le64_to_cpu(ping->nonce);
	if (!st->valid || st->nonce != nonce) {
		/* A new run starts at 0. */
		if (seq)
			dl_peer_count(peer, DL_CNT_PING_ORDER_ERRORS);
		st->valid = true;
		st->nonce = nonce;
	} else if (seq != st->next_seq) {
		dl_peer_count(peer, DL_CNT_PING_ORDER_ERRORS);
	}
	st->next_seq = seq + 1;

respond:
	if (msg->req_id)
		dl_fabric_respond(fab, msg, err, msg->data, msg->len);
}

/**
 * dl_ping_init() - answer pings.
 * @fab: the fabric being created.
 *
 * Return: 0 or -errno.
 */
int dl_ping_init(struct dl_fabric *fab)
{
	return dl_fabric_register_handler(fab, DL_MSG_PING, dl_ping_handler,
					  NULL);
}

/**
 * dl_ping_exit() - stop answering pings.
 * @fab: the fabric.
 */
void dl_ping_exit(struct dl_fabric *fab)
{
	dl_fabric_unregister_handler(fab, DL_MSG_PING);
}
