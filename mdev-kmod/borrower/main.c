// SPDX-License-Identifier: GPL-2.0
/*
 * devlend borrower: module-level setup. (Being written.)
 */
#include "borrower.h"

/**
 * dl_borrower_init() - set up the borrower side.
 *
 * Return: 0 or -errno.
 */
int dl_borrower_init(void)
{
	return 0;
}

/**
 * dl_borrower_exit() - tear the borrower side down.
 */
void dl_borrower_exit(void)
{
}
