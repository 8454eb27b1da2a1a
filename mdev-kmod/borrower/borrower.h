/* SPDX-License-Identifier: GPL-2.0 */
/*
 * devlend borrower: exposes remote devices as VFIO mediated devices.
 */
#ifndef DL_BORROWER_H
#define DL_BORROWER_H

int dl_borrower_init(void);
void dl_borrower_exit(void);

#endif /* DL_BORROWER_H */
