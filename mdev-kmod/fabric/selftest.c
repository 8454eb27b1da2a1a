// SPDX-License-Identifier: GPL-2.0
/*
 * Fabric self-test: ping a peer many times and check every echo.
 *
 * The requester sends DL_MSG_PING requests of random bytes, numbered from
 * 0 in each run and tagged with a random nonce and the crc32 of the bytes,
 * keeping up to a window of them in flight. Each echo must be identical to
 * what was sent. Round-trip times are measured from publishing a request
 * to the arrival of its response.
 *
 * The responder (every host) checks the crc and that the numbers of a run
 * follow each other, counts what it sees in the sender's counters and
 * echoes the payload: with status EINVAL if the crc was wrong.
 */
#include <linux/crc32.h>
#include <linux/ktime.h>
#include <linux/minmax.h>
#include <linux/mm.h>
#include <linux/random.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/sort.h>
#include <linux/string.h>

#include "internal.h"

#define DL_SELFTEST_MAX_COUNT	1000000
#define DL_SELFTEST_MAX_WINDOW	64
#define DL_SELFTEST_TIMEOUT_MS	5000

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
 * dl_selftest_init() - answer pings.
 * @fab: the fabric being created.
 *
 * Return: 0 or -errno.
 */
int dl_selftest_init(struct dl_fabric *fab)
{
	return dl_fabric_register_handler(fab, DL_MSG_PING, dl_ping_handler,
					  NULL);
}

/**
 * dl_selftest_exit() - stop answering pings.
 * @fab: the fabric.
 */
void dl_selftest_exit(struct dl_fabric *fab)
{
	dl_fabric_unregister_handler(fab, DL_MSG_PING);
}

struct dl_st_slot {
	struct dl_fabric_req req;
	struct dl_ping *tx;
	u8 *rx;
};

struct dl_st_run {
	struct dl_fabric *fab;
	u32 peer;
	u32 count;
	u32 size;
	u32 window;
	u64 nonce;
	u32 test_seq;
	struct dl_st_slot *slots;
	u8 *bufs;
	u64 *rtt;
	struct dl_selftest_result res;
	int fatal;
};

static int dl_st_parse(struct dl_st_run *run, char *args)
{
	bool have_peer = false;
	char *tok, *val;
	u32 *field;
	int ret;

	run->count = 1000;
	run->size = 64;
	run->window = 1;

	while ((tok = strsep(&args, " \t\n"))) {
		if (!*tok)
			continue;
		val = strchr(tok, '=');
		if (!val)
			return -EINVAL;
		*val++ = '\0';
		if (!strcmp(tok, "peer"))
			field = &run->peer;
		else if (!strcmp(tok, "count"))
			field = &run->count;
		else if (!strcmp(tok, "size"))
			field = &run->size;
		else if (!strcmp(tok, "window"))
			field = &run->window;
		else
			return -EINVAL;
		ret = kstrtou32(val, 0, field);
		if (ret)
			return ret;
		have_peer |= field == &run->peer;
	}

	if (!have_peer || !dl_fabric_is_peer(run->fab, run->peer))
		return -EINVAL;
	if (!run->count || run->count > DL_SELFTEST_MAX_COUNT)
		return -EINVAL;
	if (run->size > dl_fabric_max_payload(run->fab) - DL_PING_SIZE)
		return -EMSGSIZE;
	/* Our requests and the peer's responses must fit the ring at once. */
	if (!run->window ||
	    run->window > min_t(u32, DL_SELFTEST_MAX_WINDOW,
				dl_ring_share(run->fab)))
		return -EINVAL;
	return 0;
}

static int dl_st_alloc(struct dl_st_run *run)
{
	size_t len = DL_PING_SIZE + run->size;
	u32 i;

	run->rtt = kvmalloc_array(run->count, sizeof(*run->rtt), GFP_KERNEL);
	run->slots = kcalloc(run->window, sizeof(*run->slots), GFP_KERNEL);
	run->bufs = kcalloc(run->window, 2 * len, GFP_KERNEL);
	if (!run->rtt || !run->slots || !run->bufs)
		return -ENOMEM;
	for (i = 0; i < run->window; i++) {
		run->slots[i].tx = (void *)(run->bufs + 2 * len * i);
		run->slots[i].rx = run->bufs + 2 * len * i + len;
	}
	return 0;
}

static void dl_st_free(struct dl_st_run *run)
{
	kfree(run->bufs);
	kfree(run->slots);
	kvfree(run->rtt);
}

/* Errors after which sending more is pointless. */
static bool dl_st_fatal(int err)
{
	return err == -ENOTCONN || err == -ENODEV || err == -ENOMEM;
}

static int dl_st_submit(struct dl_st_run *run, struct dl_st_slot *slot)
{
	size_t len = DL_PING_SIZE + run->size;
	struct dl_ping *ping = slot->tx;
	int ret;

	get_random_bytes(ping->data, run->size);
	ping->test_seq = cpu_to_le32(run->test_seq);
	ping->data_crc = cpu_to_le32(dl_crc32(ping->data, run->size));
	ping->nonce = cpu_to_le64(run->nonce);

	slot->req.resp = slot->rx;
	slot->req.resp_size = len;
	ret = dl_fabric_req_submit(run->fab, run->peer, DL_MSG_PING, ping, len,
				   &slot->req);
	/* Only pings that left count: the responder checks continuity. */
	if (!ret)
		run->test_seq++;
	return ret;
}

static void dl_st_collect(struct dl_st_run *run, struct dl_st_slot *slot)
{
	size_t len = DL_PING_SIZE + run->size;
	ktime_t rtt;
	int ret;

	ret = dl_fabric_req_wait(run->fab, &slot->req, DL_SELFTEST_TIMEOUT_MS);
	if (ret == -ETIMEDOUT) {
		run->res.timeouts++;
		return;
	}
	if (ret) {
		run->res.errors++;
		if (dl_st_fatal(ret))
			run->fatal = ret;
		return;
	}
	if (slot->req.resp_len != len || memcmp(slot->rx, slot->tx, len)) {
		run->res.errors++;
		return;
	}
	rtt = ktime_sub(slot->req.done, slot->req.sent);
	run->rtt[run->res.ok++] = ktime_to_ns(rtt);
}

static void dl_st_loop(struct dl_st_run *run)
{
	u32 head = 0, nout = 0, sent = 0;
	int ret;

	while (sent < run->count || nout) {
		while (!run->fatal && sent < run->count && nout < run->window) {
			ret = dl_st_submit(run, &run->slots[(head + nout) %
							    run->window]);
			sent++;
			if (!ret) {
				nout++;
				continue;
			}
			run->res.errors++;
			if (dl_st_fatal(ret))
				run->fatal = ret;
		}
		if (run->fatal) {
			/* What was never sent failed too. */
			run->res.errors += run->count - sent;
			sent = run->count;
		}
		if (!nout)
			continue;

		dl_st_collect(run, &run->slots[head]);
		head = (head + 1) % run->window;
		nout--;
		if (!run->fatal && fatal_signal_pending(current))
			run->fatal = -EINTR;
	}
}

static int dl_cmp_u64(const void *a, const void *b)
{
	u64 x = *(const u64 *)a, y = *(const u64 *)b;

	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of @n sorted values. */
static u64 dl_percentile(const u64 *v, u32 n, u32 pct)
{
	u64 rank;

	if (!n)
		return 0;
	rank = DIV_ROUND_UP_ULL((u64)n * pct, 100);
	return v[max_t(u64, rank, 1) - 1];
}

/**
 * dl_selftest_run() - run the self-test; the result is kept for reading.
 * @fab: the fabric.
 * @args: "peer=<id> [count=<n>] [size=<bytes>] [window=<n>]"; modified.
 *
 * Return: 0 if every ping came back intact, -EIO if some did not,
 * -ENOTCONN if the peer is (or went) down, -EBUSY if a test is running,
 * -EINVAL or -EMSGSIZE for bad arguments, -EINTR if killed.
 */
int dl_selftest_run(struct dl_fabric *fab, char *args)
{
	struct dl_st_run run = { .fab = fab };
	int ret;

	ret = dl_st_parse(&run, args);
	if (ret)
		return ret;
	if (!mutex_trylock(&fab->selftest_lock))
		return -EBUSY;
	if (!dl_fabric_link_is_up(fab, run.peer)) {
		ret = -ENOTCONN;
		goto out_unlock;
	}
	ret = dl_st_alloc(&run);
	if (ret)
		goto out_free;

	run.nonce = get_random_u64();
	run.res.peer = run.peer;
	run.res.count = run.count;
	dl_st_loop(&run);

	sort(run.rtt, run.res.ok, sizeof(*run.rtt), dl_cmp_u64, NULL);
	run.res.p50_ns = dl_percentile(run.rtt, run.res.ok, 50);
	run.res.p99_ns = dl_percentile(run.rtt, run.res.ok, 99);
	run.res.max_ns = run.res.ok ? run.rtt[run.res.ok - 1] : 0;
	run.res.pass = run.res.ok == run.count;
	run.res.valid = true;
	fab->selftest = run.res;

	ret = run.fatal ? run.fatal : run.res.pass ? 0 : -EIO;
out_free:
	dl_st_free(&run);
out_unlock:
	mutex_unlock(&fab->selftest_lock);
	return ret;
}

/**
 * dl_selftest_show() - format the result of the last run.
 * @fab: the fabric.
 * @buf: where to put one line.
 * @size: bytes at @buf.
 *
 * Return: bytes written, or -EINTR.
 */
int dl_selftest_show(struct dl_fabric *fab, char *buf, size_t size)
{
	struct dl_selftest_result r;

	if (mutex_lock_interruptible(&fab->selftest_lock))
		return -EINTR;
	r = fab->selftest;
	mutex_unlock(&fab->selftest_lock);

	if (!r.valid)
		return scnprintf(buf, size, "result=none\n");
	return scnprintf(buf, size,
			 "peer=%u count=%u ok=%u errors=%u timeouts=%u p50_ns=%llu p99_ns=%llu max_ns=%llu result=%s\n",
			 r.peer, r.count, r.ok, r.errors, r.timeouts,
			 r.p50_ns, r.p99_ns, r.max_ns,
			 r.pass ? "pass" : "fail");
}
