/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Task works: added to a list that the test runs when the task "returns
 * to user mode" (kshim_run_task_works()).
 */
#ifndef KSHIM_TASK_WORK_H
#define KSHIM_TASK_WORK_H
#include "../kshim.h"

struct callback_head {
	struct callback_head *next;
	void (*func)(struct callback_head *head);
};

enum task_work_notify_mode { TWA_NONE, TWA_RESUME };

static inline void init_task_work(struct callback_head *cb,
				  void (*func)(struct callback_head *head))
{
	cb->func = func;
}

/* Pending task works, newest first; -ESRCH with kshim_task_exiting. */
extern struct callback_head *kshim_task_works;
extern bool kshim_task_exiting;

static inline int task_work_add(struct task_struct *task,
				struct callback_head *cb,
				enum task_work_notify_mode mode)
{
	(void)task;
	(void)mode;
	if (kshim_task_exiting)
		return -ESRCH;
	cb->next = kshim_task_works;
	kshim_task_works = cb;
	return 0;
}

/* The task returns to user mode: its works run. How many. */
static inline unsigned int kshim_run_task_works(void)
{
	struct callback_head *cb;
	unsigned int n = 0;

	while ((cb = kshim_task_works)) {
		kshim_task_works = cb->next;
		cb->func(cb);
		n++;
	}
	return n;
}
#endif
