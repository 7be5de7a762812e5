// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target for user/lib/localroute.c's reply parser: the input is
 * a netlink buffer, its first four bytes the sequence number expected.
 * Checked promise: 1, 0 or a negative errno, never anything else.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "localroute.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t seq;
	void *copy;
	int v;

	if (size < 4)
		return 0;
	memcpy(&seq, data, 4);
	/* An exact-size heap copy, aligned as a recv buffer is: ASan sees
	 * any read past the end. */
	copy = malloc(size - 4 ? size - 4 : 1);
	if (!copy)
		return 0;
	memcpy(copy, data + 4, size - 4);
	v = egr_localroute_parse_reply(copy, size - 4, seq);
	free(copy);
	if (v != 0 && v != 1 && (v >= 0 || v < -4095))
		abort();
	return 0;
}
