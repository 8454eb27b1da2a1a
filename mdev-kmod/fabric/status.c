// SPDX-License-Identifier: GPL-2.0
/*
 * Response status: between the wire's &enum dl_msg_status and -errno,
 * both ways. Requesters map what a response says (request.c), responders
 * what a handler returned (msg.c).
 */
#include <linux/errno.h>

#include "internal.h"

/**
 * dl_status_to_errno() - map a response status from the wire to -errno.
 * @status: an &enum dl_msg_status, or anything a peer wrote.
 *
 * Return: 0 or -errno; -EPROTO for a status this host does not know.
 */
int dl_status_to_errno(u32 status)
{
	switch (status) {
	case DL_STATUS_OK:
		return 0;
	case DL_STATUS_EINVAL:
		return -EINVAL;
	case DL_STATUS_ENOTSUPP:
		return -EOPNOTSUPP;
	case DL_STATUS_EBUSY:
		return -EBUSY;
	case DL_STATUS_ENODEV:
		return -ENODEV;
	case DL_STATUS_EIO:
		return -EIO;
	case DL_STATUS_ETIMEDOUT:
		return -ETIMEDOUT;
	default:
		return -EPROTO;
	}
}

/**
 * dl_errno_to_status() - map a handler's result to a response status.
 * @err: 0 or -errno.
 *
 * Return: the closest &enum dl_msg_status; %DL_STATUS_EIO for anything
 * the wire has no word for.
 */
u32 dl_errno_to_status(int err)
{
	switch (err) {
	case 0:
		return DL_STATUS_OK;
	case -EINVAL:
	case -ERANGE:
	case -EMSGSIZE:
		return DL_STATUS_EINVAL;
	case -EOPNOTSUPP:
		return DL_STATUS_ENOTSUPP;
	case -EBUSY:
		return DL_STATUS_EBUSY;
	case -ENODEV:
		return DL_STATUS_ENODEV;
	case -ETIMEDOUT:
		return DL_STATUS_ETIMEDOUT;
	default:
		return DL_STATUS_EIO;
	}
}
