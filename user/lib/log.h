/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Leveled logging to stderr. Under systemd stderr is the journal: lines then
 * start with a "<N>" syslog priority (sd-daemon(3)) that journald strips and
 * records, and drop the timestamp the journal adds itself.
 */
#ifndef EGR_LOG_H
#define EGR_LOG_H

#include <stdbool.h>

enum egr_log_level { EGR_LOG_ERROR = 0, EGR_LOG_WARN, EGR_LOG_INFO, EGR_LOG_DEBUG };

void egr_log_set_level(enum egr_log_level lvl);
enum egr_log_level egr_log_get_level(void);
/* "error", "warn", "info", "debug"; 0 or -EINVAL. */
int egr_log_parse_level(const char *s, enum egr_log_level *out);
/* Prefix lines with "<N>" when force, or when stderr is the journal
 * ($JOURNAL_STREAM names stderr's device and inode). */
void egr_log_init_priority(bool force);
bool egr_log_priority_prefix(void);
void egr_log(enum egr_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) egr_log(EGR_LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  egr_log(EGR_LOG_WARN, __VA_ARGS__)
#define log_info(...)  egr_log(EGR_LOG_INFO, __VA_ARGS__)
#define log_debug(...) egr_log(EGR_LOG_DEBUG, __VA_ARGS__)

#endif /* EGR_LOG_H */
