/* Checks the async event filter (asyncev.c) against a scripted
 * ibv_get_async_event:
 *   asyncev_check
 * and the events given back (lip_async_give) to a call on a blocking fd.
 * Built by internal/shim's tests:
 *   gcc -O2 -I.. asyncev_check.c ../asyncev.c -lpthread */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "asyncev.h"
#include "check.h"

static struct ibv_context ctx;
static int fds[2];       /* ctx's async fd (fds[0]) and its writer */
static int blocking_fd;  /* the fd is blocking: get reads a byte per event */
static struct ibv_qp carried, bare; /* a QP layer 2 carries, one it does not */
static struct ibv_async_event script[8];
static int nscript, next, acked[8], nacked, asked;

static int get(struct ibv_context *c, struct ibv_async_event *ev)
{
	CHECK(c == &ctx, "get on another context");
	if (blocking_fd) {
		/* the fd said readable: the scripted event, with its byte */
		char b;
		CHECK(read(ctx.async_fd, &b, 1) == 1, "get on a blocking fd with nothing to read");
	}
	if (next == nscript) {
		errno = EAGAIN;
		return -1;
	}
	*ev = script[next++];
	return 0;
}

static void ack(struct ibv_async_event *ev)
{
	for (int i = 0; i < nscript; i++)
		if (!memcmp(ev, &script[i], sizeof *ev))
			acked[nacked++] = i;
}

/* the Go side's decision: keep what lip_async_keepable allows, for the
 * carried QP, and DEVICE_FATAL when the script says the device is carried */
static int device_carried;
static int keep(struct ibv_context *c, const struct ibv_async_event *ev)
{
	asked++;
	if (!lip_async_keepable(ev->event_type))
		return 0;
	if (ev->event_type == IBV_EVENT_DEVICE_FATAL)
		return device_carried;
	return ev->element.qp == &carried;
}

static const struct lip_async_ops ops = {get, ack, keep};

static void load(int n, const struct ibv_async_event *evs)
{
	for (int i = 0; i < n; i++)
		script[i] = evs[i];
	nscript = n, next = 0, nacked = 0, asked = 0;
}

/* A fatal event of a carried QP is acknowledged and skipped: the
 * application gets the next event. */
static void test_keeps_carried(void)
{
	struct ibv_async_event evs[] = {
		{.element.qp = &carried, .event_type = IBV_EVENT_QP_FATAL},
		{.element.qp = &carried, .event_type = IBV_EVENT_QP_REQ_ERR},
		{.element.port_num = 1, .event_type = IBV_EVENT_PORT_ERR},
	};
	load(3, evs);
	struct ibv_async_event got;
	int ret = lip_async_filter(&ctx, &got, &ops);
	CHECK(ret == 0 && got.event_type == IBV_EVENT_PORT_ERR, "got %d type %d, want the PORT_ERR", ret, got.event_type);
	CHECK(nacked == 2 && acked[0] == 0 && acked[1] == 1, "acked %d (%d %d), want the two kept", nacked, acked[0], acked[1]);
	CHECK(asked == 3, "asked about %d events, want 3", asked);
}

/* The same events of a QP layer 2 does not carry, and the events the
 * filter never keeps, reach the application unacknowledged. */
static void test_passes_bare(void)
{
	struct ibv_async_event evs[] = {
		{.element.qp = &bare, .event_type = IBV_EVENT_QP_FATAL},
		{.element.qp = &carried, .event_type = IBV_EVENT_COMM_EST},
		{.element.cq = NULL, .event_type = IBV_EVENT_CQ_ERR},
	};
	load(3, evs);
	for (int i = 0; i < 3; i++) {
		struct ibv_async_event got;
		int ret = lip_async_filter(&ctx, &got, &ops);
		CHECK(ret == 0 && !memcmp(&got, &evs[i], sizeof got), "event %d: ret %d type %d", i, ret, got.event_type);
	}
	CHECK(nacked == 0, "acked %d events the application gets", nacked);
}

/* DEVICE_FATAL: kept only when the device is carried. */
static void test_device_fatal(void)
{
	struct ibv_async_event evs[] = {{.element.port_num = 0, .event_type = IBV_EVENT_DEVICE_FATAL}};
	struct ibv_async_event got;
	load(1, evs);
	device_carried = 0;
	CHECK(lip_async_filter(&ctx, &got, &ops) == 0 && got.event_type == IBV_EVENT_DEVICE_FATAL && nacked == 0,
	      "DEVICE_FATAL of a device not carried: not returned as it came");
	load(1, evs);
	device_carried = 1;
	errno = 0;
	CHECK(lip_async_filter(&ctx, &got, &ops) == -1 && errno == EAGAIN && nacked == 1,
	      "DEVICE_FATAL of a carried device: returned, or not acked (nacked %d)", nacked);
}

/* A non-blocking fd with only kept events: the call fails with EAGAIN,
 * as with nothing pending, after acknowledging them. */
static void test_nonblocking(void)
{
	struct ibv_async_event evs[] = {{.element.qp = &carried, .event_type = IBV_EVENT_QP_ACCESS_ERR}};
	load(1, evs);
	struct ibv_async_event got;
	errno = 0;
	int ret = lip_async_filter(&ctx, &got, &ops);
	CHECK(ret == -1 && errno == EAGAIN && nacked == 1, "ret %d errno %d acked %d", ret, errno, nacked);
}

/* An event given back is returned first, even on a non-blocking fd
 * with nothing pending; its acknowledgement is the shim's, once; a real
 * event's is libibverbs's. DEVICE_FATAL has no QP. */
static void test_give_back(void)
{
	load(0, NULL);
	CHECK(lip_async_give(&ctx, &carried, IBV_EVENT_QP_FATAL) == 0 && lip_async_give(&ctx, NULL, IBV_EVENT_DEVICE_FATAL) == 0,
	      "lip_async_give failed");
	struct ibv_async_event got;
	CHECK(lip_async_filter(&ctx, &got, &ops) == 0 && got.event_type == IBV_EVENT_QP_FATAL && got.element.qp == &carried,
	      "the QP_FATAL given back was not returned first");
	struct ibv_async_event dev;
	CHECK(lip_async_filter(&ctx, &dev, &ops) == 0 && dev.event_type == IBV_EVENT_DEVICE_FATAL, "DEVICE_FATAL not given back");
	errno = 0;
	CHECK(lip_async_filter(&ctx, &dev, &ops) == -1 && errno == EAGAIN, "more than was given back");
	CHECK(asked == 0, "the Go side was asked about an event it gave back");
	CHECK(lip_async_acked(&got) == 1, "the acknowledgement of a given-back event went to libibverbs");
	CHECK(lip_async_acked(&got) == 0, "a second acknowledgement (of a real event) stopped in the shim");
	struct ibv_async_event bare_ev = {.element.qp = &bare, .event_type = IBV_EVENT_QP_FATAL};
	CHECK(lip_async_acked(&bare_ev) == 0, "a real event's acknowledgement stopped in the shim");
	for (int i = 0; i < LIP_ASYNC_BACK; i++)
		CHECK(lip_async_give(&ctx, &carried, IBV_EVENT_QP_REQ_ERR) == 0, "give %d failed", i);
	errno = 0;
	CHECK(lip_async_give(&ctx, &carried, IBV_EVENT_QP_REQ_ERR) == -1 && errno == ENOSPC, "a full queue took more");
	for (int i = 0; i < LIP_ASYNC_BACK; i++) {
		CHECK(lip_async_filter(&ctx, &got, &ops) == 0 && got.event_type == IBV_EVENT_QP_REQ_ERR, "give %d not returned", i);
		CHECK(lip_async_acked(&got) == 1, "give %d: acknowledgement not the shim's", i);
	}
}

static struct ibv_async_event woke;
static int woke_ret = -2;
static void *blocked_get(void *arg)
{
	(void)arg;
	woke_ret = lip_async_filter(&ctx, &woke, &ops);
	return NULL;
}

/* join waits up to 2 s for th: 0, or -1 (it still blocks: a failure,
 * and the check exits rather than hang) */
static int join(pthread_t th)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	if (pthread_timedjoin_np(th, NULL, &until) == 0)
		return 0;
	printf("FAIL: the get blocked on did not return\nasyncev_check: %d failed\n", fails + 1);
	_exit(1);
}

static void sleep_ms(int ms)
{
	struct timespec d = {0, ms * 1000000L};
	nanosleep(&d, NULL);
}

/* On a blocking fd, a call waiting for the next event (after the filter
 * kept one of ctx) wakes for an event given back; then for a real one. */
static void test_give_wakes(void)
{
	CHECK(fcntl(fds[0], F_SETFL, 0) == 0, "fcntl");
	blocking_fd = 1;
	load(0, NULL);
	pthread_t th;
	pthread_create(&th, NULL, blocked_get, NULL);
	sleep_ms(50);
	CHECK(woke_ret == -2, "the get returned with nothing given back (%d)", woke_ret);
	CHECK(lip_async_give(&ctx, &carried, IBV_EVENT_QP_ACCESS_ERR) == 0, "give failed");
	join(th);
	CHECK(woke_ret == 0 && woke.event_type == IBV_EVENT_QP_ACCESS_ERR, "the blocked get woke with %d type %d", woke_ret,
	      woke.event_type);
	CHECK(lip_async_acked(&woke) == 1, "acknowledgement not the shim's");
	struct ibv_async_event evs[] = {{.element.port_num = 1, .event_type = IBV_EVENT_PORT_ACTIVE}};
	load(1, evs);
	woke_ret = -2;
	pthread_create(&th, NULL, blocked_get, NULL);
	sleep_ms(20);
	CHECK(write(fds[1], "e", 1) == 1, "write");
	join(th);
	CHECK(woke_ret == 0 && woke.event_type == IBV_EVENT_PORT_ACTIVE, "a real event after the wake: %d type %d", woke_ret,
	      woke.event_type);
	blocking_fd = 0;
	CHECK(fcntl(fds[0], F_SETFL, O_NONBLOCK) == 0, "fcntl");
}

/* A destroyed QP's events given back are dropped, handed out or not; a
 * closed context's too. */
static void test_forget_close(void)
{
	load(0, NULL);
	carried.context = &ctx;
	struct ibv_async_event got;
	CHECK(lip_async_give(&ctx, &carried, IBV_EVENT_QP_FATAL) == 0 && lip_async_give(&ctx, &carried, IBV_EVENT_QP_REQ_ERR) == 0 &&
	          lip_async_give(&ctx, &bare, IBV_EVENT_QP_FATAL) == 0,
	      "give failed");
	CHECK(lip_async_filter(&ctx, &got, &ops) == 0 && got.element.qp == &carried, "first not returned");
	lip_async_forget_qp(&carried);
	CHECK(lip_async_acked(&got) == 0, "a destroyed QP's event still counted handed out");
	CHECK(lip_async_filter(&ctx, &got, &ops) == 0 && got.element.qp == &bare, "the other QP's event was dropped");
	CHECK(lip_async_give(&ctx, &bare, IBV_EVENT_QP_FATAL) == 0, "give failed");
	lip_async_close(&ctx);
	errno = 0;
	CHECK(lip_async_filter(&ctx, &got, &ops) == -1 && errno == EAGAIN, "a closed context's event was returned");
	CHECK(lip_async_acked(&got) == 0, "a closed context's event still counted handed out");
}

int main(void)
{
	CHECK(pipe(fds) == 0 && fcntl(fds[0], F_SETFL, O_NONBLOCK) == 0, "pipe");
	ctx.async_fd = fds[0];
	CHECK(!lip_async_keepable(IBV_EVENT_CQ_ERR) && !lip_async_keepable(IBV_EVENT_PORT_ERR) &&
	          !lip_async_keepable(IBV_EVENT_PATH_MIG_ERR) && lip_async_keepable(IBV_EVENT_QP_FATAL),
	      "lip_async_keepable");
	test_keeps_carried();
	test_passes_bare();
	test_device_fatal();
	test_nonblocking();
	test_give_back();
	test_give_wakes();
	test_forget_close();
	if (fails) {
		printf("asyncev_check: %d failed\n", fails);
		return 1;
	}
	printf("asyncev_check: ok\n");
	return 0;
}
