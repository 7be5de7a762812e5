// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Anchors of the audit chain (audit_anchor.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "audit_anchor.h"
#include "audit_int.h"
#include "fileio.h"
#include "log.h"
#include "macfile.h"

#define ANCHOR_TAG "egressd audit anchor: "

struct egr_audit_anchor {
	int fd; /* -1: syslog */
	char path[4096];
};

int egr_audit_anchor_open(const char *spec, struct egr_audit_anchor **out)
{
	struct egr_audit_anchor *an;
	int err;

	if (!spec || !out || (strcmp(spec, "syslog") && spec[0] != '/'))
		return -EINVAL;
	an = calloc(1, sizeof(*an));
	if (!an)
		return -ENOMEM;
	an->fd = -1;
	snprintf(an->path, sizeof(an->path), "%s", spec);
	if (!strcmp(spec, "syslog")) {
		openlog("egressd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
		*out = an;
		return 0;
	}
	an->fd = open(spec, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (an->fd < 0) {
		err = -errno;
		free(an);
		return err;
	}
	err = egr_file_set_append_only(an->fd, true);
	if (err)
		log_warn("audit: anchor file %s stays rewritable (%s): make it append-only "
			 "(chattr +a) or use a sink the host keeps",
			 spec,
			 err == -EOPNOTSUPP ? "the file system has no append-only flag" :
					      strerror(-err));
	*out = an;
	return 0;
}

void egr_audit_anchor_free(struct egr_audit_anchor *an)
{
	if (!an)
		return;
	if (an->fd >= 0)
		close(an->fd);
	free(an);
}

int egr_audit_anchor_write(struct egr_audit_anchor *an, const char *log, uint64_t seq,
			   const char *hash, const char *event)
{
	char line[4096 + 256], ts[40];
	int n;

	if (!an || !hash || !event)
		return -EINVAL;
	if (an->fd < 0) {
		syslog(LOG_NOTICE, ANCHOR_TAG "seq=%" PRIu64 " hash=%s event=%s log=%s", seq, hash,
		       event, log ? log : "-");
		return 0;
	}
	egr_audit_rfc3339_now(ts, sizeof(ts));
	n = snprintf(line, sizeof(line), "%s " ANCHOR_TAG "seq=%" PRIu64 " hash=%s event=%s log=%s\n",
		     ts, seq, hash, event, log ? log : "-");
	if (n < 0 || (size_t)n >= sizeof(line))
		return -E2BIG;
	/* One write(): O_APPEND keeps lines whole. Not fsynced: a kill keeps
	 * the page cache; a power cut may cost the newest anchors. */
	return egr_write_all(an->fd, line, (size_t)n);
}

int egr_audit_anchor_parse(const char *line, size_t len, struct egr_audit_anchor_rec *r)
{
	const char *p = memmem(line, len, ANCHOR_TAG, sizeof(ANCHOR_TAG) - 1);
	const char *end = line + len;
	uint64_t seq = 0;

	if (!p)
		return 0;
	p += sizeof(ANCHOR_TAG) - 1;
	if (end - p < 4 || memcmp(p, "seq=", 4))
		return 0;
	p += 4;
	if (p == end || *p < '0' || *p > '9')
		return 0;
	while (p < end && *p >= '0' && *p <= '9') {
		if (seq > (UINT64_MAX - 9) / 10)
			return 0;
		seq = seq * 10 + (uint64_t)(*p++ - '0');
	}
	if (end - p < 6 + EGR_AUDIT_HASH_HEX || memcmp(p, " hash=", 6))
		return 0;
	p += 6;
	if (!egr_audit_is_hash_hex(p, EGR_AUDIT_HASH_HEX) ||
	    (p + EGR_AUDIT_HASH_HEX < end && p[EGR_AUDIT_HASH_HEX] != ' '))
		return 0;
	r->seq = seq;
	memcpy(r->hash, p, EGR_AUDIT_HASH_HEX);
	r->hash[EGR_AUDIT_HASH_HEX] = '\0';
	return 1;
}

int egr_audit_anchors_read(const char *file, struct egr_audit_anchor_rec **out, size_t *n)
{
	struct egr_audit_anchor_rec *v = NULL, r;
	size_t cap = 0, cnt = 0, llen = 0;
	char *line = NULL;
	ssize_t got;
	FILE *f;
	int err = 0;

	*out = NULL;
	*n = 0;
	f = fopen(file, "re");
	if (!f)
		return -errno;
	while ((got = getline(&line, &llen, f)) >= 0) {
		if (!egr_audit_anchor_parse(line, (size_t)got, &r))
			continue;
		if (cnt == cap) {
			size_t nc = cap ? cap * 2 : 64;
			struct egr_audit_anchor_rec *nv = realloc(v, nc * sizeof(*v));

			if (!nv) {
				err = -ENOMEM;
				break;
			}
			v = nv;
			cap = nc;
		}
		v[cnt++] = r;
	}
	if (!err && ferror(f))
		err = -EIO;
	free(line);
	fclose(f);
	if (err) {
		free(v);
		return err;
	}
	*out = v;
	*n = cnt;
	return 0;
}
