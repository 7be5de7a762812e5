// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The audit writer's head outside the log (audit.h, audit_anchor.h): the
 * authenticated audit.state, the log's append-only flag and the anchors.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "audit_anchor.h"
#include "audit_int.h"
#include "audit_w.h"
#include "fileio.h"
#include "log.h"
#include "macfile.h"

/* FS_APPEND_FL on the log: set after open and every cut or rotation, cleared
 * just before them (CAP_LINUX_IMMUTABLE). Unsupported: said once. */
void egr_audit_log_append_only(struct egr_audit *a, bool on)
{
	int err;

	if (!a->append_only || a->fd < 0)
		return;
	err = egr_file_set_append_only(a->fd, on);
	if (err && !a->append_warned)
		log_warn("audit: %s cannot be made append-only (%s); it is rewritable by egressd's "
			 "uid", a->path,
			 err == -EOPNOTSUPP ? "the file system has no such flag" : strerror(-err));
	a->append_warned |= err != 0;
}

int egr_audit_truncate(struct egr_audit *a, off_t size)
{
	int ret;

	egr_audit_log_append_only(a, false);
	ret = ftruncate(a->fd, size) || fsync(a->fd) ? -errno : 0;
	egr_audit_log_append_only(a, true);
	return ret;
}

void egr_audit_anchor_now(struct egr_audit *a, uint64_t seq, const char *hash, const char *event)
{
	if (!a->anchor)
		return;
	if (egr_audit_anchor_write(a->anchor, a->path, seq, hash, event)) {
		a->anchor_failures++;
		a->failures++;
		log_error("audit: cannot write the anchor of seq %" PRIu64 ": %m", seq);
		return;
	}
	a->anchors++;
	a->anchored_seq = seq;
}

/* After records up to seq are durable. */
void egr_audit_anchor_due(struct egr_audit *a, uint64_t seq, const char *hash)
{
	if (a->anchor && seq >= a->anchored_seq + a->anchor_every)
		egr_audit_anchor_now(a, seq, hash, "every");
}

int egr_audit_state_write(struct egr_audit *a, uint64_t seq, const char *hash)
{
	const char *path = a->state_path;
	char buf[160];
	int len, ret, aerr = 0;

	if (a->state_key) {
		json_t *o = json_pack("{s:I, s:s}", "seq", (json_int_t)seq, "hash", hash);

		ret = o ? egr_macfile_write(path, o, a->state_key, a->state_keylen,
					    a->append_only ? &aerr : NULL)
			: -ENOMEM;
		json_decref(o);
		if (aerr && a->append_only && !a->append_warned)
			log_warn("audit: %s cannot be kept append-only: %s", path,
				 aerr == -EOPNOTSUPP ? "the file system has no such flag" :
						       strerror(-aerr));
		a->append_warned |= aerr != 0;
	} else {
		len = snprintf(buf, sizeof(buf), "{\"seq\":%" PRIu64 ",\"hash\":\"%s\"}\n", seq,
			       hash);
		ret = egr_replace_file(path, buf, (size_t)len, 0600);
	}
	if (ret)
		log_error("audit: cannot write state file %s: %s", path, strerror(-ret));
	return ret;
}

/* audit.state: authenticated when a state key is set. -EKEYREJECTED: it
 * fails its MAC (or has none, unless a legacy one is acceptable). */
int egr_audit_state_read_mac(struct egr_audit *a, bool legacy_ok, uint64_t *seq,
		      char hash[EGR_AUDIT_HASH_HEX + 1])
{
	const char *why = NULL;
	json_t *o = NULL, *s, *h;
	int ret;

	if (!a->state_key)
		return egr_audit_state_read(a->state_path, seq, hash);
	ret = egr_macfile_read(a->state_path, a->state_key, a->state_keylen, &o, &why);
	if (ret == -EBADMSG && legacy_ok && !egr_audit_state_read(a->state_path, seq, hash)) {
		log_info("audit: %s has no MAC yet (written before this version); taken", a->state_path);
		return 0;
	}
	if (ret == -EBADMSG) {
		log_error("audit: %s: %s", a->state_path, why ? why : "bad MAC");
		return -EKEYREJECTED;
	}
	if (ret)
		return ret;
	s = json_object_get(o, "seq");
	h = json_object_get(o, "hash");
	if (!json_is_integer(s) || json_integer_value(s) < 0 || !json_is_string(h) ||
	    !egr_audit_is_hash_hex(json_string_value(h), json_string_length(h))) {
		json_decref(o);
		return -EBADMSG;
	}
	*seq = (uint64_t)json_integer_value(s);
	memcpy(hash, json_string_value(h), EGR_AUDIT_HASH_HEX + 1);
	json_decref(o);
	return 0;
}


