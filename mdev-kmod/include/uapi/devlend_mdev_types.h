/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * devlend's mdev types: the one table of them, for the borrower
 * (borrower/parent.c registers them) and the devlend command (its build
 * script reads this file: vmm-glue/devlend/build.rs).
 *
 * Type <n> (0 to DL_MDEV_NR_TYPES - 1) is named DL_MDEV_TYPE<n>_NAME; the
 * mdev core makes its directory <parent driver>-<name>, that is
 * DL_MDEV_TYPE_PREFIX "<name>" under the fabric device's
 * mdev_supported_types/. A remote device is of the type when its class
 * code (class << 8 | programming interface) masked with
 * DL_MDEV_TYPE<n>_CLASS_MASK is DL_MDEV_TYPE<n>_CLASS_VAL; the type a
 * device gets by default is the most specific one it matches (the mask
 * with most bits). Keep one #define per line: the build script reads
 * them as text.
 */
#ifndef DEVLEND_MDEV_TYPES_H
#define DEVLEND_MDEV_TYPES_H

/* The fabric device's driver ("devlend"), which the mdev core prepends. */
#define DL_MDEV_TYPE_PREFIX		"devlend-"

#define DL_MDEV_NR_TYPES		3

#define DL_MDEV_TYPE0_NAME		"any"
#define DL_MDEV_TYPE0_PRETTY		"devlend remote PCI device"
#define DL_MDEV_TYPE0_DESC		"a PCI device lent by another host of the fabric, of any class"
#define DL_MDEV_TYPE0_CLASS_MASK	0x000000
#define DL_MDEV_TYPE0_CLASS_VAL		0x000000

#define DL_MDEV_TYPE1_NAME		"nvme"
#define DL_MDEV_TYPE1_PRETTY		"devlend remote NVMe controller"
#define DL_MDEV_TYPE1_DESC		"an NVMe controller lent by another host of the fabric"
#define DL_MDEV_TYPE1_CLASS_MASK	0xffffff
#define DL_MDEV_TYPE1_CLASS_VAL		0x010802

#define DL_MDEV_TYPE2_NAME		"net"
#define DL_MDEV_TYPE2_PRETTY		"devlend remote network controller"
#define DL_MDEV_TYPE2_DESC		"a network controller lent by another host of the fabric"
#define DL_MDEV_TYPE2_CLASS_MASK	0xff0000
#define DL_MDEV_TYPE2_CLASS_VAL		0x020000

#endif /* DEVLEND_MDEV_TYPES_H */
