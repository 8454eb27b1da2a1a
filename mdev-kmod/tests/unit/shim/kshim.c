// SPDX-License-Identifier: GPL-2.0
/* The few shim functions that are not inline (see kshim.h). */
#include <limits.h>
#include <stdio.h>

#include "kshim.h"

struct task_struct *kshim_current;
struct callback_head *kshim_task_works;
bool kshim_task_exiting;

unsigned long jiffies = 1000;
struct workqueue_struct *system_unbound_wq;
unsigned int kshim_warnings;
struct work_struct *kshim_current_work;
bool kshim_lock_taken;

void kshim_log(const char *level, const char *fmt, ...)
{
	va_list ap;

	if (strcmp(level, "info"))
		kshim_warnings++;
	if (!getenv("UNIT_VERBOSE"))
		return;
	fprintf(stderr, "  [kernel %s] ", level);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

static size_t xa_slot(struct xarray *xa, unsigned long index)
{
	size_t i;

	for (i = 0; i < xa->n; i++)
		if (xa->idx[i] == index)
			return i;
	return xa->n;
}

void *xa_load(struct xarray *xa, unsigned long index)
{
	size_t i = xa_slot(xa, index);

	return i < xa->n ? xa->ent[i] : NULL;
}

void *xa_store(struct xarray *xa, unsigned long index, void *entry, gfp_t gfp)
{
	size_t i = xa_slot(xa, index);
	void *old = NULL;

	(void)gfp;
	if (i < xa->n) {
		old = xa->ent[i];
		xa->ent[i] = entry;
		return old;
	}
	if (xa->n == xa->cap) {
		xa->cap = xa->cap ? 2 * xa->cap : 64;
		xa->idx = realloc(xa->idx, xa->cap * sizeof(*xa->idx));
		xa->ent = realloc(xa->ent, xa->cap * sizeof(*xa->ent));
		if (!xa->idx || !xa->ent)
			abort();
	}
	xa->idx[xa->n] = index;
	xa->ent[xa->n++] = entry;
	return NULL;
}

void *xa_erase(struct xarray *xa, unsigned long index)
{
	size_t i = xa_slot(xa, index);
	void *old;

	if (i == xa->n)
		return NULL;
	old = xa->ent[i];
	xa->n--;
	xa->idx[i] = xa->idx[xa->n];
	xa->ent[i] = xa->ent[xa->n];
	return old;
}

/* The entry with the lowest index in [*indexp, max], if any. */
void *xa_find(struct xarray *xa, unsigned long *indexp, unsigned long max,
	      xa_mark_t filter)
{
	size_t i, best = xa->n;

	(void)filter;
	for (i = 0; i < xa->n; i++)
		if (xa->idx[i] >= *indexp && xa->idx[i] <= max &&
		    (best == xa->n || xa->idx[i] < xa->idx[best]))
			best = i;
	if (best == xa->n)
		return NULL;
	*indexp = xa->idx[best];
	return xa->ent[best];
}

void *xa_find_after(struct xarray *xa, unsigned long *indexp,
		    unsigned long max, xa_mark_t filter)
{
	if (*indexp == ULONG_MAX)
		return NULL;
	++*indexp;
	return xa_find(xa, indexp, max, filter);
}

void xa_destroy(struct xarray *xa)
{
	free(xa->idx);
	free(xa->ent);
	memset(xa, 0, sizeof(*xa));
}

/* debugfs output is not looked at here. */
void seq_printf(struct seq_file *s, const char *fmt, ...)
{
	(void)s;
	(void)fmt;
}
