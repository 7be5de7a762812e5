/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The clocks egressd reads, in nanoseconds (milliseconds for the wall-clock
 * stamps of exported records). One set so every module means the same thing:
 * monotonic for timeouts and rates, realtime for timestamps people read, and
 * boottime for anything compared with the kernel's bpf_ktime_get_boot_ns()
 * (learned-address expiry, quota windows), which keeps counting in suspend. */
#ifndef EGR_CLOCK_H
#define EGR_CLOCK_H

#include <stdint.h>
#include <time.h>

#define EGR_NSEC_PER_SEC 1000000000ull
#define EGR_NSEC_PER_MSEC 1000000ull

static inline uint64_t egr_clock_ns(clockid_t clock)
{
	struct timespec ts;

	/* Cannot fail for these clock ids on Linux >= 2.6.39. */
	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * EGR_NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static inline uint64_t egr_mono_ns(void)
{
	return egr_clock_ns(CLOCK_MONOTONIC);
}

static inline uint64_t egr_realtime_ns(void)
{
	return egr_clock_ns(CLOCK_REALTIME);
}

/* The clock of bpf_ktime_get_boot_ns(). */
static inline uint64_t egr_boot_ns(void)
{
	return egr_clock_ns(CLOCK_BOOTTIME);
}

static inline uint64_t egr_realtime_ms(void)
{
	return egr_realtime_ns() / EGR_NSEC_PER_MSEC;
}

static inline double egr_mono_s(void)
{
	return (double)egr_mono_ns() / 1e9;
}

#endif /* EGR_CLOCK_H */
