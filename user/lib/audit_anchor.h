/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Anchors of the audit chain (docs/audit.md "Anchors"): the chain head
 * (seq, hash) written, on every start and stop and every N durable records,
 * to a sink the sandbox cannot rewrite: syslog(3) (the journal under
 * systemd) or a file egressd only appends to (FS_APPEND_FL where the file
 * system has it). A key cannot show a cut tail; an anchor can:
 * `egressctl audit verify --anchors FILE` fails on a log shorter than its
 * last anchor or whose record differs from an anchor's hash.
 *
 * One line per anchor, the same text in both sinks so that a syslog file,
 * `journalctl -t egressd -o cat` or the anchor file all read back:
 *   [<ts> ]egressd audit anchor: seq=<N> hash=<64 hex> event=<start|stop|every> log=<path>
 */
#ifndef EGR_AUDIT_ANCHOR_H
#define EGR_AUDIT_ANCHOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "audit_read.h"

struct egr_audit_anchor;

/* spec: "syslog", or an absolute path of the anchor file (created 0600,
 * appended to, made append-only where it can be). 0 or -errno. */
int egr_audit_anchor_open(const char *spec, struct egr_audit_anchor **out);
void egr_audit_anchor_free(struct egr_audit_anchor *an);
/* One anchor line. 0 or -errno (the caller counts a failure). */
int egr_audit_anchor_write(struct egr_audit_anchor *an, const char *log, uint64_t seq,
			   const char *hash, const char *event);

/* struct egr_audit_anchor_rec: audit_read.h (verify reads them). */

/* Parse one text line: 1 an anchor (into *r), 0 not one. */
int egr_audit_anchor_parse(const char *line, size_t len, struct egr_audit_anchor_rec *r);
/* Every anchor line of file (other lines are skipped: a syslog file has
 * many). *out is malloc'd. 0 or -errno. */
int egr_audit_anchors_read(const char *file, struct egr_audit_anchor_rec **out, size_t *n);

#endif
