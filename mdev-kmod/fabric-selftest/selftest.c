// SPDX-License-Identifier: GPL-2.0
/*
 * devlend_fabric_selftest.ko: ping a peer many times and check every echo.
 *
 * A fabric client on the public API only (fabric/fabric.h), as Linux's
 * ntb_pingpong is one on ntb.h. For each fabric it adds a file to the
 * fabric's debugfs directory (devlend/selftest for a host's first
 * fabric, devlend/fabric-<id>/selftest for further ones):
 *
 *   write "peer=<id> [count=<n>] [size=<bytes>] [window=<n>]" to run the
 *   self-test; the write returns when it is done, with an error if it
 *   failed. Read the result of the last run, one line of key=value.
 *
 * The requester sends DL_MSG_PING requests of random bytes, numbered from
 * 0 in each run and tagged with a random nonce and the crc32 of the bytes,
 * keeping up to a window of them in flight. Each echo must be identical to
 * what was sent. Round-trip times are measured from publishing a request
 * to the arrival of its response.
 *
 * Every host answers pings, this module loaded or not: the responder is
 * the fabric core's (fabric/ping.c), which counts what it sees in the
 * sender's counters.
 */
#include <linux/crc32.h>
#include <linux/debugfs.h>
#include <linux/fs.h>
#include <linux/ktime.h>
#include <linux/minmax.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/random.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/sort.h>
#include <linux/string.h>
#include <linux/uaccess.h>

#include "../fabric/fabric.h"

#define DL_SELFTEST_MAX_COUNT	1000000
#define DL_SELFTEST_MAX_WINDOW	64
#define DL_SELFTEST_TIMEOUT_MS	5000

/* crc32 as zlib computes it, which is what the wire format specifies. */
static u32 dl_crc32(const void *data, size_t len)
{
	return crc32_le(~0U, data, len) ^ ~0U;
}

/**
 * struct dl_selftest_result - the last self-test run.
 * @valid: a test has run.
 * @peer: the peer it pinged.
 * @count: pings asked for.
 * @ok: pings echoed intact.
 * @errors: pings that failed otherwise, or were never sent.
 * @timeouts: pings without an answer in time.
 * @p50_ns: median round-trip time of the good pings.
 * @p99_ns: 99th percentile.
 * @max_ns: the slowest.
 * @pass: every ping came back intact.
 */
struct dl_selftest_result {
	bool valid;
	u32 peer;
	u32 count;
	u32 ok;
	u32 errors;
	u32 timeouts;
	u64 p50_ns;
	u64 p99_ns;
	u64 max_ns;
	bool pass;
};

/**
 * struct dl_selftest - the client's context for one fabric.
 * @fab: the fabric.
 * @file: its selftest file in debugfs.
 * @lock: one run at a time; guards @res.
 * @res: the result of the last run.
 */
struct dl_selftest {
	struct dl_fabric *fab;
	struct dentry *file;
	struct mutex lock;	/* one run at a time */
	struct dl_selftest_result res;
};

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

	if (!have_peer || run->peer >= dl_fabric_max_hosts(run->fab) ||
	    run->peer == dl_fabric_host_id(run->fab))
		return -EINVAL;
	if (!run->count || run->count > DL_SELFTEST_MAX_COUNT)
		return -EINVAL;
	if (run->size > dl_fabric_max_payload(run->fab) - DL_PING_SIZE)
		return -EMSGSIZE;
	/* Our requests and the peer's responses must fit the ring at once. */
	if (!run->window ||
	    run->window > min_t(u32, DL_SELFTEST_MAX_WINDOW,
				dl_fabric_max_requests(run->fab)))
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

/*
 * Run the self-test; the result is kept for reading.
 * @args: "peer=<id> [count=<n>] [size=<bytes>] [window=<n>]"; modified.
 *
 * Returns 0 if every ping came back intact, -EIO if some did not,
 * -ENOTCONN if the peer is (or went) down, -EBUSY if a test is running,
 * -EINVAL or -EMSGSIZE for bad arguments, -EINTR if killed.
 */
static int dl_selftest_run(struct dl_selftest *st, char *args)
{
	struct dl_fabric *fab = st->fab;
	struct dl_st_run run = { .fab = fab };
	int ret;

	ret = dl_st_parse(&run, args);
	if (ret)
		return ret;
	if (!mutex_trylock(&st->lock))
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
	st->res = run.res;

	ret = run.fatal ? run.fatal : run.res.pass ? 0 : -EIO;
out_free:
	dl_st_free(&run);
out_unlock:
	mutex_unlock(&st->lock);
	return ret;
}

/* Format the result of the last run as one line; bytes written or -EINTR. */
static int dl_selftest_show(struct dl_selftest *st, char *buf, size_t size)
{
	struct dl_selftest_result r;

	if (mutex_lock_interruptible(&st->lock))
		return -EINTR;
	r = st->res;
	mutex_unlock(&st->lock);

	if (!r.valid)
		return scnprintf(buf, size, "result=none\n");
	return scnprintf(buf, size,
			 "peer=%u count=%u ok=%u errors=%u timeouts=%u p50_ns=%llu p99_ns=%llu max_ns=%llu result=%s\n",
			 r.peer, r.count, r.ok, r.errors, r.timeouts,
			 r.p50_ns, r.p99_ns, r.max_ns,
			 r.pass ? "pass" : "fail");
}

static ssize_t dl_selftest_read(struct file *file, char __user *ubuf,
				size_t count, loff_t *ppos)
{
	struct dl_selftest *st = file->private_data;
	char buf[256];
	int len;

	len = dl_selftest_show(st, buf, sizeof(buf));
	if (len < 0)
		return len;
	return simple_read_from_buffer(ubuf, count, ppos, buf, len);
}

static ssize_t dl_selftest_write(struct file *file, const char __user *ubuf,
				 size_t count, loff_t *ppos)
{
	struct dl_selftest *st = file->private_data;
	char buf[128];
	int ret;

	if (count >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, count))
		return -EFAULT;
	buf[count] = '\0';

	ret = dl_selftest_run(st, buf);
	return ret ? ret : count;
}

/* THIS_MODULE: an open file keeps the module, so unloading waits for none. */
static const struct file_operations dl_selftest_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.read = dl_selftest_read,
	.write = dl_selftest_write,
	.llseek = default_llseek,
};

static int dl_selftest_add(struct dl_fabric *fab, void **ctx)
{
	struct dl_selftest *st;

	st = kzalloc(sizeof(*st), GFP_KERNEL);
	if (!st)
		return -ENOMEM;
	st->fab = fab;
	mutex_init(&st->lock);
	/* debugfs failures are not fatal, as the core's own files. */
	st->file = debugfs_create_file("selftest", 0600,
				       dl_fabric_debugfs_dir(fab), st,
				       &dl_selftest_fops);
	*ctx = st;
	return 0;
}

/*
 * Removing the file waits for a running self-test; when the fabric is
 * going away its peers are down already, so the test ends promptly.
 */
static void dl_selftest_remove(struct dl_fabric *fab, void *ctx)
{
	struct dl_selftest *st = ctx;

	debugfs_remove(st->file);
	mutex_destroy(&st->lock);
	kfree(st);
}

/* A run finds out by itself when its peer goes: its requests fail. */
static void dl_selftest_peer_event(struct dl_fabric *fab, void *ctx,
				   enum dl_fabric_event_type type, u32 peer,
				   u16 proto)
{
}

static struct dl_fabric_client dl_selftest_client = {
	.name = "selftest",
	.add = dl_selftest_add,
	.remove = dl_selftest_remove,
	.peer_event = dl_selftest_peer_event,
};

static int __init dl_selftest_init(void)
{
	return dl_fabric_client_register(&dl_selftest_client);
}

static void __exit dl_selftest_exit(void)
{
	dl_fabric_client_unregister(&dl_selftest_client);
}

module_init(dl_selftest_init);
module_exit(dl_selftest_exit);

MODULE_DESCRIPTION("devlend fabric self-test: pings a peer and checks every echo");
MODULE_LICENSE("GPL");
