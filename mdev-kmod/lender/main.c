// SPDX-License-Identifier: GPL-2.0
/*
 * devlend lender: module-level setup. (Being written.)
 */
#include "lender.h"

/**
 * dl_lender_init() - set up the lender side.
 *
 * Return: 0 or -errno.
 */
int dl_lender_init(void)
{
	return 0;
}

/**
 * dl_lender_exit() - tear the lender side down.
 */
void dl_lender_exit(void)
{
}
