// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "log.h"

static enum egr_log_level cur_level = EGR_LOG_INFO;
static const char *const level_names[] = { "error", "warn", "info", "debug" };
/* syslog priorities: LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG */
static const int level_prio[] = { 3, 4, 6, 7 };
static bool prio_prefix;

void egr_log_init_priority(bool force)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	prio_prefix = force;
	if (force || !js || sscanf(js, "%llu:%llu", &dev, &ino) != 2 || fstat(2, &st) < 0)
		return;
	prio_prefix = (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

bool egr_log_priority_prefix(void)
{
	return prio_prefix;
}

void egr_log_set_level(enum egr_log_level lvl)
{
	cur_level = lvl;
}

enum egr_log_level egr_log_get_level(void)
{
	return cur_level;
}

int egr_log_parse_level(const char *s, enum egr_log_level *out)
{
	for (unsigned i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*out = (enum egr_log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

/* Length of the well-formed UTF-8 sequence at s (n bytes left), 0 if it is
 * none (a stray continuation byte, an overlong form, a surrogate, past
 * U+10FFFF, cut short). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	size_t len;

	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4;
	else
		return 0;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

/*
 * A message as text the journal and a log reader can trust: what it
 * quotes (a process's comm, a path, a name from a request) may hold
 * anything. A newline starts a continuation line under the same prefix,
 * marked "  | ", so that no quoted text can begin a line of its own (a
 * forged entry, a forged "<N>" priority); other control bytes and bytes
 * that are not UTF-8 are written as \\xNN. out NULL: the length only.
 */
static size_t put_text(char *out, const char *msg, size_t n, const char *prefix, size_t plen)
{
	const unsigned char *s = (const unsigned char *)msg;
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		size_t k;

		if (s[i] == '\n') {
			if (out) {
				out[o] = '\n';
				memcpy(out + o + 1, prefix, plen);
				memcpy(out + o + 1 + plen, "  | ", 4);
			}
			o += 1 + plen + 4;
		} else if (s[i] == '\t' || (s[i] >= 0x20 && s[i] < 0x7f)) {
			if (out)
				out[o] = (char)s[i];
			o++;
		} else if (s[i] >= 0x80 && (k = utf8_len(s + i, n - i))) {
			if (out)
				memcpy(out + o, s + i, k);
			o += k;
			i += k - 1;
		} else {
			if (out)
				snprintf(out + o, 5, "\\x%02x", s[i]);
			o += 4;
		}
	}
	return o;
}

void egr_log(enum egr_log_level lvl, const char *fmt, ...)
{
	char prefix[64], small[1024], line[2048], *msg = small, *out = line;
	struct timespec now;
	struct tm tm;
	va_list ap, again;
	size_t plen, len;
	int n;

	if (lvl > cur_level)
		return;
	if (prio_prefix) {
		snprintf(prefix, sizeof(prefix), "<%d>%-5s ", level_prio[lvl], level_names[lvl]);
	} else {
		char ts[32];

		clock_gettime(CLOCK_REALTIME, &now);
		gmtime_r(&now.tv_sec, &tm);
		strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
		snprintf(prefix, sizeof(prefix), "%s.%03ldZ %-5s ", ts, now.tv_nsec / 1000000,
			 level_names[lvl]);
	}
	plen = strlen(prefix);
	va_start(ap, fmt);
	va_copy(again, ap);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if (n >= (int)sizeof(small)) {
		msg = malloc((size_t)n + 1);
		if (msg) {
			vsnprintf(msg, (size_t)n + 1, fmt, again);
		} else {
			msg = small; /* cut, not lost */
			n = (int)sizeof(small) - 1;
		}
	}
	va_end(again);
	/* One write for the whole line: stderr is unbuffered. */
	len = plen + put_text(NULL, msg, (size_t)n, prefix, plen) + 1;
	if (len > sizeof(line) && !(out = malloc(len + 1))) {
		out = line; /* the prefix and no message rather than nothing */
		n = 0;
		len = plen + 1;
	}
	memcpy(out, prefix, plen);
	put_text(out + plen, msg, (size_t)n, prefix, plen);
	out[len - 1] = '\n';
	fwrite(out, 1, len, stderr);
	if (out != line)
		free(out);
	if (msg != small)
		free(msg);
}
