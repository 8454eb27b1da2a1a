/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Reference counts: a plain counter, no atomics (the tests run in one
 * thread); kref_put() calls @release when it drops to zero.
 */
#ifndef KSHIM_LINUX_KREF_H
#define KSHIM_LINUX_KREF_H
#include "../kshim.h"

struct kref { int refcount; };

static inline void kref_init(struct kref *k)
{
	k->refcount = 1;
}

static inline void kref_get(struct kref *k)
{
	k->refcount++;
}

static inline bool kref_get_unless_zero(struct kref *k)
{
	if (!k->refcount)
		return false;
	k->refcount++;
	return true;
}

static inline int kref_put(struct kref *k, void (*release)(struct kref *))
{
	if (--k->refcount)
		return 0;
	release(k);
	return 1;
}
#endif
