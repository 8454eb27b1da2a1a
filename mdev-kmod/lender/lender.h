/* SPDX-License-Identifier: GPL-2.0 */
/*
 * devlend lender: offers local PCI devices to borrowers across the fabric.
 */
#ifndef DL_LENDER_H
#define DL_LENDER_H

int dl_lender_init(void);
void dl_lender_exit(void);

#endif /* DL_LENDER_H */
