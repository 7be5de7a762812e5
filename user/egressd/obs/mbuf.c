// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The Prometheus exposition text buffer every metrics source appends to. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "mbuf.h"

void egr_mbuf_printf(struct egr_mbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->oom)
		return;
	for (;;) {
		size_t room = b->cap - b->len;

		va_start(ap, fmt);
		n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = true;
			return;
		}
		if ((size_t)n < room) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = b->cap ? b->cap * 2 : 16384;
		while (cap - b->len <= (size_t)n)
			cap *= 2;
		char *p = realloc(b->p, cap);

		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
}

void egr_mbuf_family(struct egr_mbuf *b, const char *name, const char *type, const char *help)
{
	egr_mbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void egr_mbuf_label(struct egr_mbuf *b, const char *value)
{
	for (const char *s = value ? value : ""; *s; s++) {
		if (*s == '\\')
			egr_mbuf_printf(b, "\\\\");
		else if (*s == '"')
			egr_mbuf_printf(b, "\\\"");
		else if (*s == '\n')
			egr_mbuf_printf(b, "\\n");
		else
			egr_mbuf_printf(b, "%c", *s);
	}
}
