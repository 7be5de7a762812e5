/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Leveled logging to stderr (journald picks it up under systemd). */
#ifndef EGR_LOG_H
#define EGR_LOG_H

enum egr_log_level { EGR_LOG_ERROR = 0, EGR_LOG_WARN, EGR_LOG_INFO, EGR_LOG_DEBUG };

void egr_log_set_level(enum egr_log_level lvl);
enum egr_log_level egr_log_get_level(void);
/* "error", "warn", "info", "debug"; 0 or -EINVAL. */
int egr_log_parse_level(const char *s, enum egr_log_level *out);
void egr_log(enum egr_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) egr_log(EGR_LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  egr_log(EGR_LOG_WARN, __VA_ARGS__)
#define log_info(...)  egr_log(EGR_LOG_INFO, __VA_ARGS__)
#define log_debug(...) egr_log(EGR_LOG_DEBUG, __VA_ARGS__)

#endif /* EGR_LOG_H */
