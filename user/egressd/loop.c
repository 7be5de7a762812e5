// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "log.h"
#include "loop.h"

struct watch {
	int fd;
	bool owned;      /* timerfds and the signalfd are the loop's to close */
	void *owned_ctx; /* freed with the watch (timer contexts) */
	egr_loop_fn fn;  /* NULL once removed: skipped until the batch ends */
	void *ctx;
	struct watch *next;
};

struct egr_loop {
	int ep;
	bool running;
	struct watch *watches;
	/* Watches removed while a batch of epoll events is being handled: a
	 * later event of the same batch may still point at them. */
	struct watch *graveyard;
	egr_loop_fn on_hup; /* SIGHUP: reload (NULL: ignored) */
	void *hup_ctx;
	uint64_t turn; /* epoll_wait() calls so far: budgets per turn */
};

static void free_watch(struct watch *w)
{
	if (w->owned)
		close(w->fd);
	free(w->owned_ctx);
	free(w);
}

static void on_signal(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct signalfd_siginfo si;

	if (read(fd, &si, sizeof(si)) != sizeof(si))
		return;
	if (si.ssi_signo == SIGHUP) {
		if (loop->on_hup)
			loop->on_hup(loop, fd, events, loop->hup_ctx);
		return;
	}
	log_info("signal %u: exiting; sandboxes stay enforced", si.ssi_signo);
	loop->running = false;
}

static int add_watch(struct egr_loop *loop, int fd, uint32_t events, egr_loop_fn fn, void *ctx,
		     bool owned)
{
	struct epoll_event ev = { .events = events };
	struct watch *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	w->fd = fd;
	w->fn = fn;
	w->ctx = ctx;
	w->owned = owned;
	ev.data.ptr = w;
	if (epoll_ctl(loop->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
		int err = -errno;

		free(w);
		return err;
	}
	w->next = loop->watches;
	loop->watches = w;
	return 0;
}

int egr_loop_new(struct egr_loop **out)
{
	struct egr_loop *loop = calloc(1, sizeof(*loop));
	sigset_t mask;
	int sfd, err;

	if (!loop)
		return -ENOMEM;
	loop->ep = epoll_create1(EPOLL_CLOEXEC);
	if (loop->ep < 0) {
		err = -errno;
		free(loop);
		return err;
	}
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0 || (err = add_watch(loop, sfd, EPOLLIN, on_signal, NULL, true))) {
		err = sfd < 0 ? -errno : err;
		if (sfd >= 0)
			close(sfd);
		egr_loop_free(loop);
		return err;
	}
	*out = loop;
	return 0;
}

void egr_loop_free(struct egr_loop *loop)
{
	struct watch *w, *next;

	if (!loop)
		return;
	for (w = loop->watches; w; w = next) {
		next = w->next;
		free_watch(w);
	}
	for (w = loop->graveyard; w; w = next) {
		next = w->next;
		free_watch(w);
	}
	close(loop->ep);
	free(loop);
}

int egr_loop_add(struct egr_loop *loop, int fd, uint32_t events, egr_loop_fn fn, void *ctx)
{
	return add_watch(loop, fd, events, fn, ctx, false);
}

int egr_loop_del(struct egr_loop *loop, int fd)
{
	struct watch **pw;

	for (pw = &loop->watches; *pw; pw = &(*pw)->next) {
		struct watch *w = *pw;

		if (w->fd != fd)
			continue;
		epoll_ctl(loop->ep, EPOLL_CTL_DEL, fd, NULL);
		*pw = w->next;
		w->fn = NULL;
		w->next = loop->graveyard;
		loop->graveyard = w;
		return 0;
	}
	return -ENOENT;
}

int egr_loop_mod(struct egr_loop *loop, int fd, uint32_t events)
{
	for (struct watch *w = loop->watches; w; w = w->next) {
		struct epoll_event ev = { .events = events, .data.ptr = w };

		if (w->fd != fd)
			continue;
		return epoll_ctl(loop->ep, EPOLL_CTL_MOD, fd, &ev) < 0 ? -errno : 0;
	}
	return -ENOENT;
}

struct timer {
	egr_loop_fn fn;
	void *ctx;
};

static void on_timer(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct timer *t = ctx;
	uint64_t expirations;

	if (read(fd, &expirations, sizeof(expirations)) != sizeof(expirations))
		return;
	t->fn(loop, fd, events, t->ctx);
}

int egr_loop_every(struct egr_loop *loop, uint32_t interval_ms, egr_loop_fn fn, void *ctx)
{
	struct itimerspec its = {
		.it_interval = { interval_ms / 1000, (long)(interval_ms % 1000) * 1000000 },
		.it_value = { interval_ms / 1000, (long)(interval_ms % 1000) * 1000000 },
	};
	struct timer *t;
	int fd, err;

	if (!interval_ms)
		return -EINVAL;
	fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (fd < 0)
		return -errno;
	t = malloc(sizeof(*t));
	if (!t) {
		close(fd);
		return -ENOMEM;
	}
	t->fn = fn;
	t->ctx = ctx;
	err = timerfd_settime(fd, 0, &its, NULL) < 0 ? -errno : 0;
	if (!err)
		err = add_watch(loop, fd, EPOLLIN, on_timer, t, true);
	if (err) {
		close(fd);
		free(t);
		return err;
	}
	/* add_watch put it first in the list. */
	loop->watches->owned_ctx = t;
	return 0;
}

int egr_loop_run(struct egr_loop *loop)
{
	struct epoll_event evs[16];

	loop->running = true;
	while (loop->running) {
		int n = epoll_wait(loop->ep, evs, 16, -1);

		loop->turn++;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		for (int i = 0; i < n && loop->running; i++) {
			struct watch *w = evs[i].data.ptr;

			if (w->fn)
				w->fn(loop, w->fd, evs[i].events, w->ctx);
		}
		while (loop->graveyard) {
			struct watch *w = loop->graveyard;

			loop->graveyard = w->next;
			free_watch(w);
		}
	}
	return 0;
}

void egr_loop_on_sighup(struct egr_loop *loop, egr_loop_fn fn, void *ctx)
{
	loop->on_hup = fn;
	loop->hup_ctx = ctx;
}

uint64_t egr_loop_turn(const struct egr_loop *loop)
{
	return loop->turn;
}

void egr_loop_stop(struct egr_loop *loop)
{
	loop->running = false;
}

int egr_loop_run_once(struct egr_loop *loop, int timeout_ms)
{
	struct epoll_event evs[16];
	int n = epoll_wait(loop->ep, evs, 16, timeout_ms);

	loop->turn++;
	if (n < 0)
		return -errno;
	for (int i = 0; i < n; i++) {
		struct watch *w = evs[i].data.ptr;

		if (w->fn)
			w->fn(loop, w->fd, evs[i].events, w->ctx);
	}
	while (loop->graveyard) {
		struct watch *w = loop->graveyard;

		loop->graveyard = w->next;
		free_watch(w);
	}
	return n;
}
