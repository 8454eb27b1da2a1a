/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Live migration rules, pure, so that the unit harness tests the code the
 * modules run: the lender's settle rule, and the checks a destination
 * borrower makes of the state a migration stream carries.
 *
 * Kernel-internal: not part of the wire format.
 */
#ifndef DL_MIG_RULES_H
#define DL_MIG_RULES_H

#include <linux/errno.h>
#include <linux/types.h>

#include "devlend_wire.h"

/* What one look at the device tells the settle rule. */
enum dl_settle_verdict {
	DL_SETTLE_WAIT,		/* look again */
	DL_SETTLE_DONE,		/* quiet for the settle time */
	DL_SETTLE_TIMEOUT,	/* never quiet that long in time */
};

/**
 * struct dl_settle - the settle rule's memory between looks.
 * @start_ms: when the wait began.
 * @quiet_ms: since when nothing happened.
 * @fires: interrupts relayed for the device, as last seen.
 * @settle_ms: quiet time wanted.
 * @timeout_ms: most time to wait.
 */
struct dl_settle {
	u64 start_ms;
	u64 quiet_ms;
	u64 fires;
	u32 settle_ms;
	u32 timeout_ms;
};

/**
 * dl_settle_args_ok() - whether a holder's %DL_MSG_MIG_QUIESCE asks for a
 *	wait the lender grants.
 * @q: the request, from the peer.
 *
 * Return: true for a settle time of at least 1 ms and a timeout from it
 * to %DL_MIG_TIMEOUT_MAX_MS, with the reserved field zero.
 */
static inline bool dl_settle_args_ok(const struct dl_mig_quiesce *q)
{
	u32 settle = le32_to_cpu(q->settle_ms);
	u32 timeout = le32_to_cpu(q->timeout_ms);

	return settle && timeout >= settle && timeout <= DL_MIG_TIMEOUT_MAX_MS &&
	       !q->reserved;
}

/**
 * dl_settle_start() - begin waiting for a device to settle.
 * @s: the rule's memory.
 * @now_ms: the time now, in any monotonic milliseconds.
 * @fires: interrupts relayed for the device so far.
 * @settle_ms: quiet time wanted, from dl_settle_args_ok()'s request.
 * @timeout_ms: most time to wait.
 */
static inline void dl_settle_start(struct dl_settle *s, u64 now_ms, u64 fires,
				   u32 settle_ms, u32 timeout_ms)
{
	s->start_ms = now_ms;
	s->quiet_ms = now_ms;
	s->fires = fires;
	s->settle_ms = settle_ms;
	s->timeout_ms = timeout_ms;
}

/**
 * dl_settle_look() - one look at the device.
 * @s: the rule's memory.
 * @now_ms: the time now, not before the last look's.
 * @fires: interrupts relayed for it so far.
 * @pending: its PCIe Device Status says a transaction is pending.
 *
 * The device is idle once neither an interrupt nor a pending transaction
 * was seen for the settle time: what its driver submitted has completed,
 * and with its guest stopped nothing new is submitted.
 *
 * Return: the verdict.
 */
static inline enum dl_settle_verdict dl_settle_look(struct dl_settle *s,
						    u64 now_ms, u64 fires,
						    bool pending)
{
	if (fires != s->fires || pending) {
		s->fires = fires;
		s->quiet_ms = now_ms;
	}
	if (now_ms - s->quiet_ms >= s->settle_ms)
		return DL_SETTLE_DONE;
	if (now_ms - s->start_ms >= s->timeout_ms)
		return DL_SETTLE_TIMEOUT;
	return DL_SETTLE_WAIT;
}

/**
 * struct dl_mig_expect - what a destination knows of the device it is to
 *	take over, to check a migration stream's state against.
 * @lender: its lender's host id.
 * @dev_id: the device there.
 * @incarnation: the lender's incarnation it lists the device under.
 * @self: this host's id: never the source.
 * @nvec: the most vectors of any interrupt index the device has.
 */
struct dl_mig_expect {
	u32 lender;
	u32 dev_id;
	u64 incarnation;
	u32 self;
	u32 nvec;
};

/**
 * dl_mig_state_check() - check the device state of a migration stream.
 * @st: the state, as written by the migration's writer: untrusted.
 * @want: what the destination knows.
 *
 * Return: 0; -EINVAL for a stream of another format or version, or with
 * reserved or unknown bits set, or pending interrupts past the device's
 * vectors; -ENODEV for another device than the one this mdev stands for;
 * -ESTALE for a lender incarnation that is not the current one (the
 * lender restarted: the ticket is void and the device was taken back).
 */
static inline int dl_mig_state_check(const struct dl_mig_state *st,
				     const struct dl_mig_expect *want)
{
	u32 flags = le32_to_cpu(st->flags);
	u32 index = le32_to_cpu(st->irq_index);
	u32 i, n = 0;

	if (le32_to_cpu(st->magic) != DL_MIG_STATE_MAGIC ||
	    le16_to_cpu(st->version) != DL_MIG_STATE_VERSION ||
	    le16_to_cpu(st->size) != sizeof(*st) || st->reserved ||
	    (flags & ~DL_MIG_F_HELD) || index > 2)
		return -EINVAL;
	if (le32_to_cpu(st->lender) != want->lender ||
	    le32_to_cpu(st->dev_id) != want->dev_id)
		return -ENODEV;
	if (flags & DL_MIG_F_HELD) {
		if (!st->ticket || le32_to_cpu(st->from_host) == want->self ||
		    le32_to_cpu(st->from_host) >= DL_MAX_HOSTS)
			return -EINVAL;
		if (le64_to_cpu(st->incarnation) != want->incarnation)
			return -ESTALE;
	} else if (st->ticket) {
		return -EINVAL;
	}
	for (i = 0; i < DL_MIG_PENDING_VECS; i++) {
		if (!(le64_to_cpu(st->pending[i / 64]) & (1ULL << (i % 64))))
			continue;
		if (i >= want->nvec)
			return -EINVAL;
		n++;
	}
	if (n != le32_to_cpu(st->nr_pending))
		return -EINVAL;
	return 0;
}

#endif /* DL_MIG_RULES_H */
