// SPDX-License-Identifier: GPL-2.0
/*
 * include/dl_mig_rules.h: the lender's settle rule (quiet for the settle
 * time, or a timeout; interrupts and pending transactions restart the
 * quiet time), the bounds it grants a holder, and the destination's checks
 * of the device state a migration stream carries.
 */
#include "unit.h"
#include "../../include/dl_mig_rules.h"

static struct dl_mig_quiesce quiesce(u32 settle, u32 timeout, u32 reserved)
{
	struct dl_mig_quiesce q = {
		.dev_id = cpu_to_le32(3),
		.settle_ms = cpu_to_le32(settle),
		.timeout_ms = cpu_to_le32(timeout),
		.reserved = cpu_to_le32(reserved),
	};

	return q;
}

static void test_args(void)
{
	struct dl_mig_quiesce q;

	q = quiesce(50, 3000, 0);
	CHECK(dl_settle_args_ok(&q));
	q = quiesce(1, 1, 0);
	CHECK(dl_settle_args_ok(&q));
	q = quiesce(50, DL_MIG_TIMEOUT_MAX_MS, 0);
	CHECK(dl_settle_args_ok(&q));
	q = quiesce(0, 3000, 0);
	CHECK(!dl_settle_args_ok(&q));
	q = quiesce(100, 50, 0);
	CHECK(!dl_settle_args_ok(&q));
	q = quiesce(50, DL_MIG_TIMEOUT_MAX_MS + 1, 0);
	CHECK(!dl_settle_args_ok(&q));
	q = quiesce(50, 3000, 1);
	CHECK(!dl_settle_args_ok(&q));
}

static void test_settle(void)
{
	struct dl_settle s;

	/* Quiet from the start: done once the settle time has passed. */
	dl_settle_start(&s, 1000, 7, 50, 300);
	CHECK_EQ(dl_settle_look(&s, 1010, 7, false), DL_SETTLE_WAIT);
	CHECK_EQ(dl_settle_look(&s, 1049, 7, false), DL_SETTLE_WAIT);
	CHECK_EQ(dl_settle_look(&s, 1050, 7, false), DL_SETTLE_DONE);

	/* An interrupt restarts the quiet time, so does a pending bit. */
	dl_settle_start(&s, 0, 0, 50, 300);
	CHECK_EQ(dl_settle_look(&s, 40, 1, false), DL_SETTLE_WAIT);
	CHECK_EQ(dl_settle_look(&s, 89, 1, false), DL_SETTLE_WAIT);
	CHECK_EQ(dl_settle_look(&s, 100, 1, true), DL_SETTLE_WAIT);
	CHECK_EQ(dl_settle_look(&s, 149, 1, false), DL_SETTLE_WAIT);
	CHECK_EQ(dl_settle_look(&s, 150, 1, false), DL_SETTLE_DONE);

	/* Never quiet long enough: the timeout. */
	dl_settle_start(&s, 0, 0, 50, 200);
	CHECK_EQ(dl_settle_look(&s, 40, 1, false), DL_SETTLE_WAIT);
	CHECK_EQ(dl_settle_look(&s, 80, 2, false), DL_SETTLE_WAIT);
	CHECK_EQ(dl_settle_look(&s, 120, 3, false), DL_SETTLE_WAIT);
	CHECK_EQ(dl_settle_look(&s, 160, 4, false), DL_SETTLE_WAIT);
	CHECK_EQ(dl_settle_look(&s, 200, 5, false), DL_SETTLE_TIMEOUT);
	/* A pending transaction that never clears: the timeout too. */
	dl_settle_start(&s, 0, 0, 10, 30);
	CHECK_EQ(dl_settle_look(&s, 15, 0, true), DL_SETTLE_WAIT);
	CHECK_EQ(dl_settle_look(&s, 30, 0, true), DL_SETTLE_TIMEOUT);
}

static const struct dl_mig_expect want = {
	.lender = 2, .dev_id = 5, .incarnation = 0x1234, .self = 1, .nvec = 65,
};

static struct dl_mig_state held_state(void)
{
	struct dl_mig_state st = {
		.magic = cpu_to_le32(DL_MIG_STATE_MAGIC),
		.version = cpu_to_le16(DL_MIG_STATE_VERSION),
		.size = cpu_to_le16(sizeof(struct dl_mig_state)),
		.flags = cpu_to_le32(DL_MIG_F_HELD),
		.lender = cpu_to_le32(2),
		.dev_id = cpu_to_le32(5),
		.from_host = cpu_to_le32(3),
		.incarnation = cpu_to_le64(0x1234),
		.ticket = cpu_to_le64(0xfeedULL << 40),
		.irq_index = cpu_to_le32(2),
		.nr_pending = cpu_to_le32(2),
	};

	st.pending[0] = cpu_to_le64(1ULL << 3);
	st.pending[1] = cpu_to_le64(1ULL << 0);	/* vector 64, the last */
	return st;
}

static void test_state(void)
{
	struct dl_mig_state st;

	st = held_state();
	CHECK_EQ(dl_mig_state_check(&st, &want), 0);

	/* Another format, version, size; reserved or unknown bits. */
	st = held_state();
	st.magic = cpu_to_le32(DL_MIG_STATE_MAGIC + 1);
	CHECK_EQ(dl_mig_state_check(&st, &want), -EINVAL);
	st = held_state();
	st.version = cpu_to_le16(DL_MIG_STATE_VERSION + 1);
	CHECK_EQ(dl_mig_state_check(&st, &want), -EINVAL);
	st = held_state();
	st.size = cpu_to_le16(sizeof(st) - 8);
	CHECK_EQ(dl_mig_state_check(&st, &want), -EINVAL);
	st = held_state();
	st.reserved = cpu_to_le64(1);
	CHECK_EQ(dl_mig_state_check(&st, &want), -EINVAL);
	st = held_state();
	st.flags = cpu_to_le32(DL_MIG_F_HELD | 0x100);
	CHECK_EQ(dl_mig_state_check(&st, &want), -EINVAL);
	st = held_state();
	st.irq_index = cpu_to_le32(3);
	CHECK_EQ(dl_mig_state_check(&st, &want), -EINVAL);

	/* Another device, or lender. */
	st = held_state();
	st.dev_id = cpu_to_le32(6);
	CHECK_EQ(dl_mig_state_check(&st, &want), -ENODEV);
	st = held_state();
	st.lender = cpu_to_le32(1);
	CHECK_EQ(dl_mig_state_check(&st, &want), -ENODEV);

	/* A lender that restarted since: the ticket is void. */
	st = held_state();
	st.incarnation = cpu_to_le64(0x1235);
	CHECK_EQ(dl_mig_state_check(&st, &want), -ESTALE);

	/* Held without a ticket, from itself or no host; a ticket unheld. */
	st = held_state();
	st.ticket = 0;
	CHECK_EQ(dl_mig_state_check(&st, &want), -EINVAL);
	st = held_state();
	st.from_host = cpu_to_le32(1);
	CHECK_EQ(dl_mig_state_check(&st, &want), -EINVAL);
	st = held_state();
	st.from_host = cpu_to_le32(DL_MAX_HOSTS);
	CHECK_EQ(dl_mig_state_check(&st, &want), -EINVAL);
	st = held_state();
	st.flags = 0;
	CHECK_EQ(dl_mig_state_check(&st, &want), -EINVAL);
	st.ticket = 0;
	st.incarnation = 0;
	CHECK_EQ(dl_mig_state_check(&st, &want), 0);

	/* Pending interrupts: within the device's vectors, counted right. */
	st = held_state();
	st.pending[1] = cpu_to_le64(1ULL << 1);	/* vector 65: none such */
	CHECK_EQ(dl_mig_state_check(&st, &want), -EINVAL);
	st = held_state();
	st.pending[31] = cpu_to_le64(1ULL << 63);
	CHECK_EQ(dl_mig_state_check(&st, &want), -EINVAL);
	st = held_state();
	st.nr_pending = cpu_to_le32(3);
	CHECK_EQ(dl_mig_state_check(&st, &want), -EINVAL);
	st = held_state();
	st.pending[0] = 0;
	st.pending[1] = 0;
	st.nr_pending = 0;
	CHECK_EQ(dl_mig_state_check(&st, &want), 0);
}

static const struct unit_test mig_rules_tests[] = {
	{ "quiesce: the settle and timeout a lender grants", test_args },
	{ "settle rule: quiet for the settle time, else the timeout",
	  test_settle },
	{ "stream state: format, device, lender incarnation, ticket, interrupts",
	  test_state },
};

UNIT_SUITE(mig_rules_suite, "include/dl_mig_rules.h: live migration rules",
	   mig_rules_tests);
