// SPDX-License-Identifier: GPL-2.0
/*
 * devlend: PCIe device lending for Linux/KVM.
 *
 * A device installed in one host (the lender) is used by a KVM guest on
 * another host (the borrower) as if it were local, across a PCIe fabric.
 * This module holds the fabric layer (fabric/): peers, their memory
 * windows, doorbells and messages, over real NTB adapters or, as now, the
 * emulated ivshmem fabric. The lender and borrower sides build on it.
 */
#include <linux/init.h>
#include <linux/module.h>

#include "fabric/fabric.h"
#include "lender/lender.h"
#include "borrower/borrower.h"

static int __init devlend_init(void)
{
	int ret;

	/*
	 * The lender and the borrower subscribe to fabric events first: the
	 * adapter probes (and reports DL_FABRIC_EV_ADDED) inside
	 * dl_fabric_init().
	 */
	ret = dl_borrower_init();
	if (ret)
		return ret;
	ret = dl_lender_init();
	if (ret)
		goto err_borrower_exit;
	ret = dl_fabric_init();
	if (ret)
		goto err_lender_exit;
	return 0;

err_lender_exit:
	dl_lender_exit();
err_borrower_exit:
	dl_borrower_exit();
	return ret;
}

static void __exit devlend_exit(void)
{
	dl_fabric_exit();
	dl_lender_exit();
	dl_borrower_exit();
}

module_init(devlend_init);
module_exit(devlend_exit);

MODULE_DESCRIPTION("devlend: PCIe device lending for Linux/KVM");
MODULE_LICENSE("GPL");
