// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The control protocol as a hostile client speaks it: bytes through the
 * framing (egr_proto_read over a pipe, with a small size limit so the
 * too-large path runs too), the request check, and for attach and update
 * the policy parser and compiler, as egressd would run them.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compile.h"
#include "policy.h"
#include "proto.h"

#define FUZZ_MAX_REQUEST 16384

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct egr_proto_error pe;
	json_t *req = NULL, *pol;
	char msg[128];
	int fds[2];

	/* A pipe holds 64 KiB: stay below so the write never blocks. */
	if (size > 60000 || pipe(fds) < 0)
		return 0;
	if (write(fds[1], data, size) != (ssize_t)size) {
		close(fds[0]);
		close(fds[1]);
		return 0;
	}
	close(fds[1]);
	if (egr_proto_read(fds[0], FUZZ_MAX_REQUEST, &req, msg, sizeof(msg)) == 0) {
		if (!json_is_object(req))
			abort(); /* the framing promises an object */
		if (egr_proto_check_request(req, &pe) == 0) {
			const char *op = json_string_value(json_object_get(req, "op"));

			pol = json_object_get(req, "policy");
			if (op && (!strcmp(op, "attach") || !strcmp(op, "update")) &&
			    json_is_object(pol)) {
				struct egr_policy p;
				struct egr_compiled c;
				struct egr_error e;

				if (egr_policy_from_json(pol, &p, &e) == 0) {
					if (egr_policy_compile(&p, &c, &e) == 0)
						egr_compiled_free(&c);
					egr_policy_free(&p);
				}
			}
		} else if (!pe.field[0] || !pe.message[0]) {
			abort(); /* every refusal names its field */
		}
		json_decref(req);
	}
	close(fds[0]);
	return 0;
}
